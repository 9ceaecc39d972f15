"""Metric names: TRL/Trainer key names, their `train/` forms, and value validation.

Every source funnels keys through `canonical()` so that `train/entropy` from a
Trackio run and `entropy` from a JSONL stream land in the same series.
"""

from __future__ import annotations

import functools
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

# Alternative spellings seen in the wild -> canonical name. (`train_loss` is not one:
# the Trainer logs it once, at the end, as the run's average loss; see RUN_SUMMARY_KEYS.)
_ALIASES = {
    "token_accuracy": "mean_token_accuracy",
    "carl/phi": "phi",
    "carl/phi_mean": "phi",
    "phi_mean": "phi",
}


# What verl and OpenRLHF call the metrics the panels and the health flags read under TRL's
# names (sources/framework_lines.py reads their logs). Read in their sources: verl
# (trainer/ppo/metric_utils.py `compute_data_metrics`, workers/actor/dp_actor.py,
# trainer/ppo/core_algos.py, trainer/ppo/ray_trainer.py) and OpenRLHF
# (trainer/ray/ppo_actor.py `training_step`/`ppo_train`, trainer/ppo_trainer.py,
# trainer/ppo_utils/experience_maker.py). Their other keys keep their own names.
FRAMEWORK_NAMES: dict[str, dict[str, str]] = {
    "verl": {
        "critic/score/mean": REWARD,  # the reward function's score: the task reward
        "actor/entropy": ENTROPY,
        "actor/kl_loss": "kl",  # KL to the reference policy, as TRL's `kl`
        "actor/pg_loss": "loss",
        "actor/grad_norm": "grad_norm",
        "actor/lr": "learning_rate",
        "actor/pg_clipfrac": "clip_ratio/region_mean",  # PPO's clipped share of tokens
        "response_length/mean": "completions/mean_length",
        "response_length/clip_ratio": "completions/clipped_ratio",  # at the length cap
        "training/epoch": "epoch",
        "training/global_step": "global_step",  # the step itself: not a metric
    },
    "openrlhf": {
        "policy_loss": "loss",
        "entropy_loss": ENTROPY,  # the mean entropy of the policy (not a loss term)
        "actor_lr": "learning_rate",
        "actor_grad_norm": "grad_norm",
        "group_reward_std": "reward_std",  # the reward's spread within a prompt's group
        "ppo_clip_ratio": "clip_ratio/region_mean",
        "response_length": "completions/mean_length",
        "rollout/truncated_rate": "completions/clipped_ratio",  # hit the length cap
    },
}


def framework_name(framework: str, key: str) -> str:
    """The dashboard's name for a key verl or OpenRLHF logged (the key itself when the
    dashboard gives it no part of its own)."""
    return FRAMEWORK_NAMES.get(framework, {}).get(key, key)


# What the Trainer logs once, when training ends (its dict printed last, and the same keys
# in TensorBoard, Trackio, W&B and the CARL stream): the run's summary, never a point of a
# curve. `train_loss` there is the average over the run, not the last step's loss.
END_OF_TRAINING_KEYS = ("train_runtime", "train_samples_per_second", "train_steps_per_second",
                        "total_flos")
RUN_SUMMARY_KEYS = (*END_OF_TRAINING_KEYS, "train_loss")

# Evaluation metrics: the Trainer prints `eval_loss`; its TensorBoard, Trackio and W&B
# callbacks log `eval/loss`. One name whatever the source: `eval/loss`.
_EVAL_PREFIXES = ("eval_", "test_")


def canonical(key: str) -> str:
    """`train/entropy` -> `entropy`; `eval_loss` -> `eval/loss`; `eval/loss` stays."""
    k = key.strip()
    k = k.removeprefix("train/")
    if k.startswith(_EVAL_PREFIXES) and len(k) > 5:
        prefix, _, rest = k.partition("_")
        return f"{prefix}/{rest}"
    return _ALIASES.get(k, k)


def valid_number(value: Any) -> float | None:
    """A finite number as float, else None. Booleans and numeric strings are not numbers."""
    t = type(value)
    if t is float:
        return value if math.isfinite(value) else None
    if t is int:
        return float(value)
    return None


def finite_number(value: Any) -> float | None:
    """A finite float from a number or a numeric string (a config's "500"), or None
    (bools, other text, NaN, infinities)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def is_metric_key(key: str) -> bool:
    return (
        key not in NON_METRIC_KEYS
        and canonical(key) not in NON_METRIC_KEYS
        and key not in STEP_KEYS
    )


@functools.lru_cache(maxsize=4096)
def metric_name(key: str) -> str | None:
    """The canonical name of a logged key, None for a key that is not a metric; kept for
    the keys seen (a source's rows repeat the same keys, row after row)."""
    return canonical(key) if is_metric_key(key) else None


# The health flags a run can raise (store/health.py), and the alerts kept as flags: named
# here, with no numpy, for what reads them before any data (the alert kinds, the guards).
HEALTH_FLAGS = ("no_learning_signal", "entropy_collapse", "truncation", "kl_drift",
                "reward_dominance", "loss_spike", "grad_spike", "task_collapse", "stalled")
ALERT_FLAGS = ("nan_loss", "diverging")

# The metrics people watch first (table rows, export columns); the rest follow by name.
PINNED = ("phi", "entropy", "mean_token_accuracy", "reward", "loss", "kl", "learning_rate",
          "grad_norm")


def display_order(name: str) -> tuple[int, str]:
    return (PINNED.index(name) if name in PINNED else len(PINNED), name)
