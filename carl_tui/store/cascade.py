"""When did the CARL reward switch on in this run, and how do we know?

In order of trust:

1. the run says so: a `cascade` marker (the CARL callback writes one), or the
   `cascade/stage` metric turning 1, or the CARL reward being logged for the
   first time after the task rewards had been logged without it;
2. derived: the run has a CARL reward (its config says so, or `cascade/stage`
   is logged at 0) but has not switched yet, or not said when: the cascade gate
   on the *task* rewards alone (never on `reward`, which includes CARL) says
   when it would switch; shown labelled "derived";
3. a run with no CARL reward is never told that CARL switched on. A run whose
   CARL reward is logged from its first reward row has no cascade.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from carl_tui.coherence.gates import CascadeGate
from carl_tui.store import roles


@dataclass(frozen=True)
class CascadeState:
    switched_at: int | None
    source: str | None  # "run", "derived", or None when there is no switch to report
    basis: str  # how the step is known, or why there is none
    has_carl: bool
    waiting_for: str  # what the derived gate waits for ("" when not applicable)
    task_metric: str  # what the task reward is made of


class CascadeTracker:
    def __init__(self) -> None:
        self.gate = CascadeGate()
        self.marker_step: int | None = None
        self.stage_step: int | None = None  # first step with cascade/stage >= 0.5
        self.stage_logged = False
        self.carl_first_step: int | None = None
        self.task_first_step: int | None = None
        self.carl_configured = False
        self.task_names: set[str] = set()
        self.reward_seen = False

    # -- feeding -------------------------------------------------------------

    def add_meta(self, meta: Mapping) -> None:
        config = meta.get("config") if isinstance(meta.get("config"), Mapping) else {}
        for source in (meta, config):
            if source.get("carl") is True or source.get("cascade") is True:
                self.carl_configured = True

    def add_marker(self, step: int) -> None:
        if self.marker_step is None:
            self.marker_step = int(step)

    def add_batch(self, steps: np.ndarray, cols: Mapping[str, np.ndarray]) -> None:
        stage = cols.get(roles.CARL_STAGE_METRIC)
        if stage is not None and (~np.isnan(stage)).any():
            self.stage_logged = True
            on = np.flatnonzero(stage >= 0.5)
            if self.stage_step is None and on.size:
                self.stage_step = int(steps[on[0]])
        carl = roles.carl_reward_names(cols)
        tasks = roles.task_reward_names(cols)
        self.task_names.update(tasks)
        if tasks or "reward" in cols:
            self.reward_seen = True
        if carl and self.carl_first_step is None:
            logged = np.flatnonzero(np.any([~np.isnan(cols[k]) for k in carl], axis=0))
            if logged.size:
                self.carl_first_step = int(steps[logged[0]])
        task = roles.task_reward(cols, steps.shape[0], carl_known=self.has_carl)
        known = np.flatnonzero(~np.isnan(task))
        if known.size and self.task_first_step is None:
            self.task_first_step = int(steps[known[0]])
        if known.size:
            self.gate.update_many(steps, task)

    # -- reading -------------------------------------------------------------

    @property
    def has_carl(self) -> bool:
        return (
            self.carl_configured
            or self.marker_step is not None
            or self.stage_logged
            or self.carl_first_step is not None
        )

    @property
    def carl_from_start(self) -> bool:
        """The CARL reward was logged from the first task reward on: no cascade."""
        return (
            self.carl_first_step is not None
            and self.task_first_step is not None
            and self.carl_first_step <= self.task_first_step
            and self.marker_step is None
            and self.stage_step is None
        )

    def state(self) -> CascadeState:
        label = " + ".join(sorted(self.task_names)) or ("reward" if self.reward_seen else "")
        if self.marker_step is not None:
            return CascadeState(self.marker_step, "run", "the run's cascade event", True, "", label)
        if self.stage_step is not None:
            return CascadeState(self.stage_step, "run", "cascade/stage turned 1", True, "", label)
        if self.carl_from_start:
            return CascadeState(None, None, "CARL reward on from the start (no cascade)", True,
                                "", label)
        if self.carl_first_step is not None:
            return CascadeState(self.carl_first_step, "run", "CARL reward first logged", True,
                                "", label)
        if not self.has_carl:
            basis = "no CARL reward in this run" if self.reward_seen else ""
            return CascadeState(None, None, basis, False, "", label)
        if self.gate.fired:
            return CascadeState(self.gate.trigger_step, "derived",
                                f"cascade gate on the task reward ({label})", True, "", label)
        if self.task_first_step is None:  # SFT (or a warm start): no task reward yet
            return CascadeState(None, None, "waits for the task reward (GRPO)", True, "",
                                label)
        waiting = getattr(self.gate, "waiting_for", "") or self.gate.progress_text
        return CascadeState(None, None, "stage A (task rewards only)", True, waiting, label)
