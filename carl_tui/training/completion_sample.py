"""A sample of a GRPO step's completions for the CARL stream, each with its CARL score.

TRL's `GRPOTrainer` keeps the latest generation batch in `trainer._logs` (prompt,
completion, one list per reward function, advantage): the same data it prints
and saves with `log_completions=True`. `completions_line` picks `k` of them,
evenly spread, scores each with the CARL composite (prompt + completion, one
batched forward pass) and returns the stream line:

    {"event": "completions", "step": 12, "rows": [{"prompt": "...", "completion": "...",
     "rewards": {"reverse_reward": 0.5}, "advantage": 0.71, "carl": 0.43}, ...]}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from carl_tui.completions.model import text_of
from carl_tui.training.stream import finite


def pick(n: int, k: int) -> list[int]:
    """`k` indices of `n`, evenly spread, first and last included (all when k >= n)."""
    if k >= n:
        return list(range(n))
    if k <= 1:
        return [0] if k == 1 and n else []
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def carl_scores(model, tokenizer, prompts: Sequence[Any], completions: Sequence[Any]):
    """The CARL composite of each completion, conditioned on its prompt."""
    if model is None or tokenizer is None or not prompts:
        return [None] * len(prompts)
    from carl_tui.training.reward import CarlReward  # lazy: torch only when a completion is scored

    scorer = CarlReward(model, tokenizer, log_components=False)
    return [finite(s.composite) for s in scorer.scores(list(prompts), list(completions))]


def completions_line(logs: Mapping[str, Any], step: int, k: int, model=None,
                     tokenizer=None) -> dict[str, Any] | None:
    """The stream line for `k` completions of `logs` (TRL's `trainer._logs`), or None."""
    prompts = list(logs.get("prompt") or ())
    completions = list(logs.get("completion") or ())
    n = min(len(prompts), len(completions))
    if n == 0 or k <= 0:
        return None
    idx = pick(n, k)
    rewards = {str(name): list(vals) for name, vals in (logs.get("rewards") or {}).items()}
    advantages = list(logs.get("advantages") or ())
    sample_p = [prompts[i] for i in idx]
    sample_c = [completions[i] for i in idx]
    scores = carl_scores(model, tokenizer, sample_p, sample_c)
    rows = []
    for j, i in enumerate(idx):
        rows.append({
            "prompt": text_of(prompts[i]),
            "completion": text_of(completions[i]),
            "rewards": {name: finite(v[i]) if i < len(v) else None
                        for name, v in rewards.items()},
            "advantage": finite(advantages[i]) if i < len(advantages) else None,
            "carl": scores[j],
        })
    return {"event": "completions", "step": int(step), "rows": rows}
