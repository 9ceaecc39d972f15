"""A tiny, fully offline model and task: reverse a digit string.

Everything is built in-process: a character-level tokenizer from `tokenizers`,
a small Llama-shaped causal LM with random weights, and a synthetic data set.
A CPU learns the task in about a minute; token accuracy rises past 0.99 and the
entropy collapses, which is what the dashboard is made to show.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

PAD = "<pad>"
EOS = "<eos>"
SEP = ">"
DIGITS = "0123456789"
CHARS = DIGITS + SEP
TINY_MODEL_NAME = "tiny-reverse"


_VOCAB = {PAD: 0, EOS: 1, **{ch: i + 2 for i, ch in enumerate(CHARS)}}


def tiny_vocab_size() -> int:
    """The tiny tokenizer's vocabulary size (pad, eos and one token per character),
    known without building it."""
    return len(_VOCAB)


def tiny_tokenizer():
    """A character-level `PreTrainedTokenizerFast`: one token per character, plus pad and eos."""
    # lazy: tokenizers only once the tokenizer is built (the demo's first lines come first)
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(vocab=dict(_VOCAB), unk_token=PAD))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=PAD, eos_token=EOS, padding_side="right"
    )
    fast.model_max_length = 64
    return fast


def tiny_model(
    vocab_size: int | None = None,
    *,
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
):
    """A small Llama-shaped causal LM with random weights.

    `vocab_size` defaults to the tiny tokenizer's size; pass a larger one (e.g.
    32000) to get the same body with a wide output layer (the extra ids are
    never produced by the tokenizer)."""
    # lazy: torch only once the model is built (the demo's first lines come first)
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    tok_len = len(tiny_tokenizer())
    vocab_size = vocab_size or tok_len
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 4,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(pad_token_id=0, eos_token_id=1, bos_token_id=None)
    model.config.name_or_path = TINY_MODEL_NAME
    return model


def reverse_example(rng: random.Random, min_len: int = 3, max_len: int = 6) -> tuple[str, str]:
    """One (prompt, answer) pair: "12345>" -> "54321"."""
    n = rng.randint(min_len, max_len)
    digits = "".join(rng.choice(DIGITS) for _ in range(n))
    return digits + SEP, digits[::-1]


def _rows(n: int, seed: int, min_len: int, max_len: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    return [reverse_example(rng, min_len, max_len) for _ in range(n)]


def sft_dataset(n: int = 4096, *, seed: int = 0, min_len: int = 3, max_len: int = 6):
    """Prompt/completion `datasets.Dataset` for SFT (TRL appends eos to the completion)."""
    from datasets import Dataset  # lazy: datasets only once a dataset is built

    rows = _rows(n, seed, min_len, max_len)
    return Dataset.from_dict(
        {"prompt": [p for p, _ in rows], "completion": [a for _, a in rows]}
    )


def token_ids(text: str) -> list[int]:
    """The tiny tokenizer's ids for `text` (digits and ">"), without building it."""
    return [_VOCAB[ch] for ch in text]


def sft_dataset_tokenized(n: int = 4096, *, seed: int = 0, min_len: int = 3, max_len: int = 6):
    """`sft_dataset` as `SFTTrainer` prepares it: `input_ids` (prompt, completion, eos) and
    `labels` (-100 on the prompt). Built in a blink; give `SFTConfig(dataset_kwargs=
    {"skip_prepare_dataset": True})` so that the trainer uses it as is."""
    from datasets import Dataset  # lazy: datasets only once a dataset is built

    ids, labels = [], []
    for prompt, answer in _rows(n, seed, min_len, max_len):
        p, a = token_ids(prompt), token_ids(answer) + [_VOCAB[EOS]]
        ids.append(p + a)
        labels.append([-100] * len(p) + a)
    return Dataset.from_dict({"input_ids": ids, "labels": labels})


def grpo_dataset(n: int = 1024, *, seed: int = 1, min_len: int = 3, max_len: int = 6):
    """Prompt + `answer` `datasets.Dataset` for GRPO."""
    from datasets import Dataset  # lazy: datasets only once a dataset is built

    rows = _rows(n, seed, min_len, max_len)
    return Dataset.from_dict({"prompt": [p for p, _ in rows], "answer": [a for _, a in rows]})


def reverse_score(completion: str, answer: str) -> float:
    """Fraction of answer positions the completion gets right, with the longer of
    the two as the denominator (so extra characters cost too). 1.0 = exact."""
    text = completion.strip()
    denom = max(len(text), len(answer))
    if denom == 0:
        return 1.0
    hits = sum(1 for a, b in zip(text, answer) if a == b)
    return hits / denom


def reverse_reward(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float]:
    """GRPO task reward (TRL signature): `reverse_score` per completion."""
    out = []
    for comp, ans in zip(completions, answer):
        if isinstance(comp, list):  # conversational form
            comp = comp[-1]["content"] if comp else ""
        out.append(reverse_score(str(comp), ans))
    return out


def warm_start_copy(
    model,
    tokenizer,
    *,
    steps: int = 150,
    batch_size: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
    on_step: Callable[[int, dict[str, float]], bool | None] | None = None,
) -> float:
    """Pre-train the random model on a neighbouring task (copy the digits) so that
    SFT on reversal starts from a confident, wrong model: its entropy first rises
    (melting) before it collapses on the new task. Returns the final copy loss.

    `on_step(step, metrics)` is called after each optimizer step (steps count
    from 1) with the step's `loss`, `entropy` (mean entropy of the predicted
    distribution over the trained tokens, in nats, as TRL's SFT logs it),
    `mean_token_accuracy` (argmax = target over the same tokens) and
    `num_tokens` (trained tokens so far); if it returns True the warm start
    ends after that step."""
    import torch  # lazy: torch only once the model is trained

    rng = random.Random(seed + 7919)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    loss_value = float("nan")
    tokens = 0
    for step in range(1, steps + 1):
        ids, mask, labels = _copy_batch(tokenizer, rng, batch_size)
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        opt.step()
        loss_value = float(out.loss.detach())
        if on_step is None:
            continue
        entropy, accuracy, trained = _copy_step_metrics(out.logits, labels)
        tokens += trained
        metrics = {"loss": loss_value, "entropy": entropy, "mean_token_accuracy": accuracy,
                   "num_tokens": float(tokens)}
        if on_step(step, metrics):
            break
    opt.zero_grad(set_to_none=True)
    model.eval()
    return loss_value


def _copy_batch(tokenizer, rng: random.Random, batch_size: int):
    """(input_ids, attention_mask, labels) of one batch of the copy task: "123>" + "123"
    + eos, with the loss on the copied part and eos only."""
    import torch  # lazy: torch only once the model is trained

    pairs = [reverse_example(rng) for _ in range(batch_size)]
    texts = [p + p[:-1] for p, _ in pairs]  # "123>" + "123"
    enc = tokenizer(texts, padding=True, return_tensors="pt")
    pad = torch.zeros(batch_size, 1, dtype=torch.long)
    ids = torch.cat([enc["input_ids"], pad], dim=1)
    mask = torch.cat([enc["attention_mask"], pad], dim=1)
    lengths = enc["attention_mask"].sum(1)
    ids[torch.arange(batch_size), lengths] = tokenizer.eos_token_id
    mask[torch.arange(batch_size), lengths] = 1
    labels = ids.clone()
    labels[mask == 0] = -100
    for i, (p, _) in enumerate(pairs):
        labels[i, : len(p)] = -100
    return ids, mask, labels


def _copy_step_metrics(logits, labels) -> tuple[float, float, int]:
    """(mean entropy in nats, token accuracy, trained tokens) of one step's predictions
    over the trained tokens (the logits at k predict token k + 1)."""
    # lazy: torch only once the model is trained
    import torch

    from carl_tui.coherence.phi_torch import entropy_torch

    with torch.no_grad():
        target = labels[:, 1:]
        trained = target != -100
        picked = logits.detach()[:, :-1][trained].float()
        entropy = float(entropy_torch(picked).mean())
        accuracy = float((picked.argmax(-1) == target[trained]).float().mean())
    return entropy, accuracy, int(trained.sum())
