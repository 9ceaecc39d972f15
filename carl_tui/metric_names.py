"""Metric names: TRL/Trainer key names, their `train/` forms, and value validation.

Every source funnels keys through `canonical()` so that `train/entropy` from a
Trackio run and `entropy` from a JSONL stream land in the same series.
"""

from __future__ import annotations

import math
from typing import Any

# Keys that are bookkeeping, not metrics to plot.
STEP_KEYS = ("step", "global_step", "train/global_step", "_step")
NON_METRIC_KEYS = frozenset(
    {"step", "global_step", "_step", "_timestamp", "_runtime", "timestamp", "time", "event"}
)

# Canonical names the dashboard gives special meaning to.
PHI = "phi"
ENTROPY = "entropy"
ACCURACY = "mean_token_accuracy"
REWARD = "reward"

# Alternative spellings seen in the wild -> canonical name.
_ALIASES = {
    "train_loss": "loss",
    "token_accuracy": "mean_token_accuracy",
    "carl/phi": "phi",
    "carl/phi_mean": "phi",
    "phi_mean": "phi",
}



def canonical(key: str) -> str:
    """`train/entropy` -> `entropy`; `eval/loss` stays `eval/loss`."""
    k = key.strip()
    k = k.removeprefix("train/")
    return _ALIASES.get(k, k)


def valid_number(value: Any) -> float | None:
    """A finite number as float, else None. Booleans and numeric strings are not numbers."""
    t = type(value)
    if t is float:
        return value if math.isfinite(value) else None
    if t is int:
        return float(value)
    return None


def is_metric_key(key: str) -> bool:
    return (
        key not in NON_METRIC_KEYS
        and canonical(key) not in NON_METRIC_KEYS
        and key not in STEP_KEYS
    )


# The metrics people watch first (table rows, export columns); the rest follow by name.
PINNED = ("phi", "entropy", "mean_token_accuracy", "reward", "loss", "kl", "learning_rate",
          "grad_norm")


def display_order(name: str) -> tuple[int, str]:
    return (PINNED.index(name) if name in PINNED else len(PINNED), name)
