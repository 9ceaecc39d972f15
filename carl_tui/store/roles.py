"""Which logged metrics play which part: accuracy, task reward, the CARL reward.

TRL logs each GRPO reward function as `rewards/<name>/mean` and their sum as
`reward`. When one of them is the CARL reward, `reward` is a composite that
includes CARL, so anything that must judge the *task* (the phase classifier
of a GRPO run, the cascade gate) reads the sum of the other reward functions
instead. A reward function is CARL's when its name contains "carl".

Frameworks without per-function rewards (OpenRLHF's `train/reward`, a plain
Trainer) have only `reward`; it is the task reward as long as the run has
shown no CARL reward.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from carl_tui import metric_names as mn

CARL_STAGE_METRIC = "cascade/stage"  # 0 before the CARL reward switches on, 1 after
_PREFIX, _SUFFIX = "rewards/", "/mean"


def reward_function(name: str) -> str | None:
    """`rewards/<f>/mean` -> `f`; None for any other metric."""
    if name.startswith(_PREFIX) and name.endswith(_SUFFIX) and len(name) > len(_PREFIX + _SUFFIX):
        return name[len(_PREFIX) : -len(_SUFFIX)]
    return None


def is_carl_reward(name: str) -> bool:
    f = reward_function(name)
    return f is not None and "carl" in f.lower()


def task_reward_names(names: Iterable[str]) -> list[str]:
    return sorted(n for n in names if reward_function(n) is not None and not is_carl_reward(n))


def carl_reward_names(names: Iterable[str]) -> list[str]:
    return sorted(n for n in names if is_carl_reward(n))


def task_reward(cols: Mapping[str, np.ndarray], n: int, *, carl_known: bool) -> np.ndarray:
    """Per row, the task reward: the sum of the task reward functions' means (NaN
    where none was logged); else `reward` when the run has no CARL reward."""
    names = task_reward_names(cols)
    if names:
        stack = np.vstack([cols[k] for k in names])
        present = ~np.isnan(stack)
        total = np.where(present, stack, 0.0).sum(axis=0)
        return np.where(present.any(axis=0), total, np.nan)
    if not carl_known and not carl_reward_names(cols) and mn.REWARD in cols:
        return np.asarray(cols[mn.REWARD], dtype=np.float64)
    return np.full(n, np.nan)


def task_metric_label(names: Iterable[str], carl_known: bool) -> str:
    """How the task reward is made, for the panel: `rewards/a/mean + rewards/b/mean`."""
    names = list(names)
    tasks = task_reward_names(names)
    if tasks:
        return " + ".join(tasks)
    if mn.REWARD in names and not carl_known:
        return mn.REWARD
    return ""
