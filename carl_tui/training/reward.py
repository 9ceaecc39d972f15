"""The CARL reward for TRL's GRPOTrainer, computed in one batched pass.

For each completion the model reads prompt + completion; the output row at
position k predicts token k+1, so the rows that score the completion tokens run
from the last prompt token to the second-to-last completion token. All
completions go through the model body in one forward pass (right or left
padding, masked); the output layer is applied to the scored rows a chunk at a
time and reduced on the device to per-token phi and P(chosen token), so no
full-vocabulary copy of all logits exists at once and only two floats per token
reach the host. The sequence scores (multiscale, cloud, discontinuity,
composite) follow docs/maths.md ("The three reward components").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from carl_tui.training.model_config import text_config, vocab_size

#: Scored rows whose logits are materialised at once (rows x V float32 per chunk).
DEFAULT_CHUNK_ROWS = 64

COMPONENT_METRICS = (
    ("composite", "carl/composite"),
    ("multiscale", "carl/multiscale"),
    ("cloud", "carl/cloud"),
    ("discontinuity", "carl/discontinuity"),
    ("phi_mean", "carl/completion_phi"),
    ("phi_std", "carl/completion_phi_std"),
    ("entropy_mean", "carl/completion_entropy"),
)


def prompt_token_ids(tokenizer, prompts: Sequence[Any]) -> list[list[int]]:
    """Token ids of each prompt, the way TRL's GRPOTrainer tokenizes them."""
    if prompts and isinstance(prompts[0], list):  # conversational
        out = tokenizer.apply_chat_template(
            conversation=list(prompts), add_generation_prompt=True, tokenize=True,
            return_dict=True,
        )
        return [list(ids) for ids in out["input_ids"]]
    return [list(ids) for ids in tokenizer(text=list(prompts))["input_ids"]]


def completion_token_ids(tokenizer, completions: Sequence[Any]) -> list[list[int]]:
    """Token ids of completions given as text (or as one assistant message)."""
    texts = []
    for c in completions:
        if isinstance(c, list):
            c = "".join(str(m.get("content", "")) for m in c)
        texts.append(str(c))
    return [list(ids) for ids in tokenizer(text=texts, add_special_tokens=False)["input_ids"]]


def _output_fn(model) -> Callable[[torch.Tensor], torch.Tensor]:
    """hidden states -> logits, as the model's own head computes them."""
    head = model.get_output_embeddings()
    cfg = text_config(model)
    softcap = getattr(cfg, "final_logit_softcapping", None)
    scaling = getattr(cfg, "logits_scaling", None)
    scale = getattr(model, "logit_scale", None) or getattr(cfg, "logit_scale", None)

    def fn(h: torch.Tensor) -> torch.Tensor:
        x = head(h)
        if scale:
            x = x * scale
        if scaling:
            x = x / scaling
        if softcap:
            x = torch.tanh(x / softcap) * softcap
        return x

    return fn


def _device(model) -> torch.device:
    try:
        return next(model.parameters()).device
    except StopIteration:  # pragma: no cover
        return torch.device("cpu")


def batch_token_stats(
    model,
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    *,
    pad_token_id: int = 0,
    padding_side: str = "right",
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per completion: (phi [C], P(chosen token) [C]) as float32 numpy arrays.

    One forward pass of the model body over all prompt + completion sequences;
    the output head runs on the scored rows only, `chunk_rows` rows at a time."""
    if padding_side not in ("right", "left"):
        raise ValueError("padding_side must be 'right' or 'left'")
    n = len(completion_ids)
    if len(prompt_ids) != n:
        raise ValueError("one prompt per completion")
    lengths_c = [len(c) for c in completion_ids]
    if n == 0 or sum(lengths_c) == 0:
        return ([np.zeros(c, np.float32) for c in lengths_c],
                [np.zeros(c, np.float32) for c in lengths_c])
    for p, c in zip(prompt_ids, completion_ids):
        if len(c) and not len(p):
            raise ValueError("a scored completion needs at least one prompt token")
    batch = _pack(prompt_ids, completion_ids, int(pad_token_id), padding_side)
    phi_h, p_h = _scored_row_stats(model, batch, chunk_rows)
    bounds = np.cumsum([0, *lengths_c])
    return (
        [phi_h[bounds[i] : bounds[i + 1]] for i in range(n)],
        [p_h[bounds[i] : bounds[i + 1]] for i in range(n)],
    )


class _PackedBatch(NamedTuple):
    """Padded prompt + completion sequences, and where the completion tokens are scored."""

    ids: torch.Tensor  # [n, width]
    mask: torch.Tensor  # [n, width], 1 on real tokens
    position_ids: torch.Tensor  # [n, width]
    row_idx: list[int]  # per scored token: its sequence ...
    col_idx: list[int]  # ... and the position whose output predicts it
    targets: list[int]  # the completion token scored


def _pack(prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]],
          pad_token_id: int, padding_side: str) -> _PackedBatch:
    seqs = [list(p) + list(c) for p, c in zip(prompt_ids, completion_ids)]
    n, width = len(seqs), max(len(s) for s in seqs)
    ids = torch.full((n, width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    row_idx: list[int] = []
    col_idx: list[int] = []
    targets: list[int] = []
    for i, (seq, p) in enumerate(zip(seqs, prompt_ids)):
        off = width - len(seq) if padding_side == "left" else 0
        ids[i, off : off + len(seq)] = torch.tensor(seq, dtype=torch.long)
        mask[i, off : off + len(seq)] = 1
        lp, lc = len(p), len(seq) - len(p)
        # rows lp-1 .. lp+lc-2 predict completion tokens lp .. lp+lc-1
        row_idx.extend([i] * lc)
        col_idx.extend(range(off + lp - 1, off + lp + lc - 1))
        targets.extend(seq[lp:])
    position_ids = (mask.cumsum(dim=1) - 1).clamp_min(0)
    return _PackedBatch(ids, mask, position_ids, row_idx, col_idx, targets)


def _scored_row_stats(model, batch: _PackedBatch,
                      chunk_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """phi and P(chosen token) of every scored token, in `batch.targets` order.

    The model body runs once over the whole batch; the output layer runs on
    `chunk_rows` scored rows at a time, reduced on the device."""
    from carl_tui.coherence.phi_torch import token_stats_torch

    device = _device(model)
    body = model.get_decoder()
    head = _output_fn(model)
    n_rows = len(batch.targets)
    with torch.inference_mode():
        hidden = body(
            input_ids=batch.ids.to(device), attention_mask=batch.mask.to(device),
            position_ids=batch.position_ids.to(device), use_cache=False,
        ).last_hidden_state
        rows = hidden[torch.tensor(batch.row_idx, device=device),
                      torch.tensor(batch.col_idx, device=device)]
        del hidden
        tgt = torch.tensor(batch.targets, dtype=torch.long, device=device)
        phi = torch.empty(n_rows, dtype=torch.float32, device=device)
        p_next = torch.empty(n_rows, dtype=torch.float32, device=device)
        for s in range(0, n_rows, chunk_rows):
            e = min(s + chunk_rows, n_rows)
            logits = head(rows[s:e]).unsqueeze(0)
            ph, pn = token_stats_torch(logits, tgt[s:e].unsqueeze(0), chunk_size=e - s)
            phi[s:e] = ph[0]
            p_next[s:e] = pn[0]
            del logits
    return phi.cpu().numpy(), p_next.cpu().numpy()


class CarlReward:
    """TRL reward function: the CARL composite of each completion.

    Call as TRL does: `reward(prompts=..., completions=..., completion_ids=..., **kwargs)`.
    With `log_components`, the batch means of the components are passed to the
    trainer's `log_metric` hook (TRL >= 1.x), so they appear in the trainer's logs
    (and so in the stream and in Trackio). `last_scores` keeps the latest batch."""

    __name__ = "carl"

    def __init__(self, model, tokenizer, *, chunk_rows: int = DEFAULT_CHUNK_ROWS,
                 log_components: bool = True, padding_side: str = "right"):
        self.model = model
        self.tokenizer = tokenizer
        self.chunk_rows = chunk_rows
        self.log_components = log_components
        self.padding_side = padding_side
        self.last_scores: list[Any] = []

    def _pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self.tokenizer.eos_token_id
        return int(pad or 0)

    def scores(self, prompts: Sequence[Any], completions: Sequence[Any],
               completion_ids: Sequence[Sequence[int]] | None = None) -> list[Any]:
        """`CarlScore` of each completion."""
        from carl_tui.coherence.rewards import score_sequence

        p_ids = prompt_token_ids(self.tokenizer, prompts)
        c_ids = (
            [list(c) for c in completion_ids]
            if completion_ids is not None
            else completion_token_ids(self.tokenizer, completions)
        )
        model = self.model
        was_training = model.training
        model.eval()
        try:
            phis, probs = batch_token_stats(
                model, p_ids, c_ids, pad_token_id=self._pad_id(),
                padding_side=self.padding_side, chunk_rows=self.chunk_rows,
            )
        finally:
            model.train(was_training)
        log_v = math.log(vocab_size(model))
        out = []
        for phi, p in zip(phis, probs):
            phi64 = phi.astype(np.float64)
            out.append(score_sequence(phi64, p.astype(np.float64), entropy=(1.0 - phi64) * log_v))
        return out

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any],
                 completion_ids: Sequence[Sequence[int]] | None = None,
                 **kwargs: Any) -> list[float]:
        scores = self.scores(prompts, completions, completion_ids)
        self.last_scores = scores
        log_metric = kwargs.get("log_metric")
        if self.log_components and callable(log_metric) and scores:
            for field, name in COMPONENT_METRICS:
                vals = [float(getattr(s, field)) for s in scores]
                vals = [v for v in vals if math.isfinite(v)]
                if vals:
                    log_metric(name, float(np.mean(vals)))
        return [float(s.composite) for s in scores]


def carl_reward(model, tokenizer, *, chunk_size: int = DEFAULT_CHUNK_ROWS,
                log_components: bool = True, padding_side: str = "right") -> CarlReward:
    """A GRPO reward function (TRL's signature) returning the CARL composite per completion."""
    return CarlReward(model, tokenizer, chunk_rows=chunk_size, log_components=log_components,
                      padding_side=padding_side)
