"""Cascade: CARL rewards switch on only after the task is learned.

Stage A uses the task rewards alone; once the cascade gate fires on the task
reward (sustained high relative to its own history), stage B adds the CARL
reward. The gate reads only the task rewards, which are computed in both
stages, so the switch can never wait on itself.

    cascade = CascadeReward([reverse_reward], carl=carl_reward(model, tok), callback=cb)
    GRPOTrainer(..., reward_funcs=cascade.reward_funcs)

Before the switch the CARL function returns None for every completion, which
TRL treats as "not applied" (it adds nothing to the advantages).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from trl.trainer.utils import get_callable_name

from carl_tui.coherence.gates import CascadeGate


def _stream_step(kwargs: dict[str, Any]) -> int:
    """The trainer step whose log line will carry this batch's rewards."""
    state = kwargs.get("trainer_state")
    return int(getattr(state, "global_step", 0)) + 1 if state is not None else 0


class _TaskReward:
    """A task reward function that also reports its values to the cascade."""

    def __init__(self, func: Callable[..., list[float | None]], owner: CascadeReward, index: int):
        self.func = func
        self.owner = owner
        self.index = index
        self.__name__ = get_callable_name(func)

    def __call__(self, prompts, completions, completion_ids=None, **kwargs):
        values = self.func(prompts=prompts, completions=completions, completion_ids=completion_ids,
                           **kwargs)
        self.owner._record(completions, self.index, values)
        return values


class _GatedCarl:
    """The CARL reward, applied only in stage B."""

    def __init__(self, owner: CascadeReward):
        self.owner = owner
        self.__name__ = get_callable_name(owner.carl)

    def __call__(self, prompts, completions, completion_ids=None, **kwargs):
        return self.owner._carl_call(prompts, completions, completion_ids, kwargs)


class CascadeReward:
    """Stage A: task rewards; stage B: task rewards + CARL, after the cascade gate.

    `reward_funcs` is the list to give `GRPOTrainer` (task functions first, CARL
    last). `callback` (a `CarlCallback`) receives the `cascade` marker."""

    def __init__(
        self,
        task_reward_funcs: Sequence[Callable[..., list[float | None]]],
        carl: Callable[..., list[float]],
        *,
        gate: Any = None,
        callback: Any = None,
    ):
        if not task_reward_funcs:
            raise ValueError("the cascade needs at least one task reward")

        self.carl = carl
        self.gate = gate if gate is not None else CascadeGate()
        self.callback = callback
        self.tasks = [_TaskReward(f, self, i) for i, f in enumerate(task_reward_funcs)]
        self.gated = _GatedCarl(self)
        self.fired_step: int | None = None
        self.history: list[tuple[int, float, bool]] = []  # (step, task metric, carl applied)
        self._batch_key: int | None = None
        self._batch: dict[int, list[float | None]] = {}

    @property
    def reward_funcs(self) -> list[Callable[..., list[float | None]]]:
        return [*self.tasks, self.gated]

    @property
    def stage(self) -> str:
        return "B" if self.gate.fired else "A"

    def _record(self, completions, index: int, values) -> None:
        key = id(completions)
        if key != self._batch_key:
            self._batch_key = key
            self._batch = {}
        self._batch[index] = list(values)

    def task_metric(self, prompts, completions, completion_ids, kwargs) -> float:
        """Mean over completions of the summed task rewards (None counts as missing)."""
        if id(completions) != self._batch_key or len(self._batch) != len(self.tasks):
            for t in self.tasks:
                if id(completions) != self._batch_key or t.index not in self._batch:
                    t(prompts, completions, completion_ids, **kwargs)
        per_completion = []
        for i in range(len(completions)):
            vals = [self._batch[t.index][i] for t in self.tasks]
            vals = [float(v) for v in vals if v is not None and math.isfinite(float(v))]
            if vals:
                per_completion.append(sum(vals))
        return sum(per_completion) / len(per_completion) if per_completion else 0.0

    def _carl_call(self, prompts, completions, completion_ids, kwargs) -> list[float | None]:
        step = _stream_step(kwargs)
        metric = self.task_metric(prompts, completions, completion_ids, kwargs)
        was_fired = self.gate.fired
        if not was_fired and self.gate.update(step, metric):
            self._on_fire(step, metric)
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):
            log_metric("cascade/stage", 1.0 if self.gate.fired else 0.0)
        applied = self.gate.fired
        self.history.append((step, metric, applied))
        if not applied:
            return [None] * len(completions)
        return self.carl(prompts=prompts, completions=completions, completion_ids=completion_ids,
                         **kwargs)

    def _on_fire(self, step: int, metric: float) -> None:
        self.fired_step = step
        cb = self.callback
        if cb is None:
            return
        at = step + getattr(cb, "step_offset", 0)
        cb.marker("cascade", at, stage="B", task_metric=metric)
        cb.log_text(f"cascade gate fired at step {at}: CARL reward on (task reward {metric:.3f})")
