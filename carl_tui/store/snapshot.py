"""Immutable views of the store that the UI (and the diagnosis) read.

A snapshot is cheap to build (bounded by the series' display size, not by the
run's length) and safe to hand to another thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from carl_tui.events import Job, Marker, Progress, RunLife, RunRef, SourceStatus
from carl_tui.store.health import CeilingFit, HealthFlag, stalled_flag
from carl_tui.store.skipped import counts_text, skipped_counts
from carl_tui.store.system import JobUsage, SystemView


@dataclass(frozen=True)
class SeriesView:
    name: str
    steps: np.ndarray  # display points (extremes kept), oldest first
    values: np.ndarray
    count: int  # points logged in the whole run
    first_step: float | None
    last_step: float | None
    last: float | None
    min: float | None
    max: float | None
    trend: float  # mean of the last 10 minus the 10 before
    recent_mean: float | None  # mean of the last 50 points
    whole_mean: float | None  # mean over the whole run
    tail: np.ndarray = field(default_factory=lambda: np.empty(0))  # the last raw values
    derived: bool = False  # e.g. phi computed from entropy
    # min, max and whole_mean come partly from a coarse preview of the history (see
    # store/preview.py): provisional until the whole history is read. `last` is exact.
    provisional: bool = False


@dataclass(frozen=True)
class GateView:
    metric: str
    window: int
    min_above: int
    threshold: float
    above: int
    fired: bool
    trigger_step: int | None
    peak_entropy: float | None
    peak_entropy_step: int | None
    progress_text: str
    window_values: tuple[float, ...] = ()
    provisional: bool = False  # the preview's gate (a sample of the history), not the run's


@dataclass(frozen=True)
class CascadeView:
    """When the CARL reward switched on (see `store/cascade.py`)."""

    metric: str  # what the task reward is made of, e.g. "rewards/reverse_reward/mean"
    stage: str  # "A" (task rewards only), "B" (task + CARL), "" (no CARL reward in the run)
    fired: bool
    trigger_step: int | None
    source: str | None = None  # "run" (the run said so), "derived", None
    basis: str = ""  # how the step is known, or why there is none
    has_carl: bool = False
    waiting_for: str = ""  # what the derived gate waits for


@dataclass(frozen=True)
class StageView:
    """One stage's phases as said: `said` holds (phase, from_step, seen_at, corrected_at)
    of every phase the dashboard said in it, in order, corrected ones too."""

    kind: str  # "accuracy" or "reward"
    metric: str
    start_step: int
    phase: str
    said: tuple[tuple[str, int, int, int | None], ...] = ()


@dataclass(frozen=True)
class PhaseView:
    phase: str  # baseline / melting / transition / plateau / crystallisation / converged
    since_step: int | None  # where the phase began (a change point of the curve)
    timeline: tuple[tuple[str, int], ...]  # (phase, first step) of the current stage
    inputs: str  # which metrics drive the classifier, e.g. "mean_token_accuracy + entropy"
    stage: str = ""  # "accuracy" (SFT-like) or "reward" (GRPO-like), see store/phases.py
    stage_start: int | None = None
    history: tuple[tuple[str, int, str], ...] = ()  # (phase, first step, stage) of every stage
    provisional: bool = False  # classified on a sample of the history while it is read
    metric: str = ""  # the current stage's progress metric ("mean_token_accuracy", a reward)
    seen_at: int | None = None  # the step at which the dashboard first said the phase
    values: int = 0  # values of the progress metric the current stage read
    too_few: bool = False  # too few values to tell a phase ("phase: 3 values, too few")
    evidence: str = ""  # why the phase holds, in numbers (`Reading.text`)
    stages: tuple[StageView, ...] = ()
    #: (phase, from_step, seen_at, stage) of every stage's story as it reads now
    dated: tuple[tuple[str, int, int, str], ...] = ()


@dataclass(frozen=True)
class RunEvent:
    """A moment in the run's story: crystallisation, the cascade switch, a phase, a job state."""

    kind: str
    step: int | None
    text: str
    severity: str = "information"


@dataclass(frozen=True)
class Notice:
    """Something the user should be told about once (gate fired, phase changed)."""

    seq: int
    run: RunRef
    kind: str  # "phase_transition", "cascade", "phase", "marker"
    step: int | None
    text: str
    severity: str = "information"
    # The wall time of the data it is about (its step's time, where the run dates it;
    # None: unknown): what happened before the dashboard opened is history, never news.
    at: float | None = None


@dataclass(frozen=True)
class RunSnapshot:
    run: RunRef
    version: int  # grows with every change to the run
    meta: Mapping[str, Any]
    series: Mapping[str, SeriesView]
    gate: GateView
    cascade: CascadeView
    phase: PhaseView
    markers: tuple[Marker, ...]
    log_tail: tuple[str, ...]  # the last lines (bounded)
    log_total: int  # lines received in the whole run
    job: Job | None  # the job the run belongs to, if any
    progress: Progress | None
    last_step: int | None
    updated_at: float | None  # wall time of the last data for this run
    vocab_size: int | None
    phi_derived: bool
    steps_logged: int = 0
    first_step: int | None = None
    events: tuple[RunEvent, ...] = ()
    wall: SeriesView | None = None  # wall time (epoch s) by step: the x axis "time"
    system: SystemView | None = None  # GPUs, CPU, RAM (store/system.py)
    # While a long history is read after a coarse preview: the share of it read so far
    # (0..1, by step); None once every row is in (nothing on screen is provisional).
    history_read: float | None = None
    life: RunLife | None = None  # the source's word on the run's life, if it said one
    # While provisional: the preview holds the run's own newest rows (a project of many
    # runs previewed run by run), so its last step and newest values are exact.
    newest_read: bool = False
    # The health flags said so far (store/health.py), in the order said: the rules' and
    # the alerts' (nan_loss, diverging); `health_at(now)` adds `stalled`.
    health: tuple[HealthFlag, ...] = ()
    # The reward's forecast at zero entropy (R = -a exp(H) + b), once the fit is good.
    reward_ceiling: CeilingFit | None = None

    def health_at(self, now: float) -> tuple[HealthFlag, ...]:
        """The flags, and `stalled` when no data came for several logging intervals
        while the run's job says it is running (`now`: the clock, epoch seconds)."""
        running = self.job is not None and self.job.stage == "RUNNING"
        if not running or self.wall is None:
            return self.health
        flag = stalled_flag(self.wall.steps, self.wall.values, now, True)
        return self.health if flag is None else (*self.health, flag)

    @property
    def provisional(self) -> bool:
        return self.history_read is not None

    @property
    def usage(self) -> JobUsage | None:
        """The job bar's totals, read from the machine samples (None without any)."""
        return self.system.usage if self.system is not None else None


@dataclass(frozen=True)
class StoreSummary:
    """What the status bar needs: every source's health and the skipped input."""

    sources: Mapping[str, SourceStatus] = field(default_factory=dict)
    skipped: int = 0

    def skipped_counts(self) -> list[tuple[int, str]]:
        """What every source skipped, in its units: [(32, "NaN or infinite values"), ...]."""
        reasons = [(reason, count) for st in self.sources.values()
                   for reason, count, _ in st.skip_reasons]
        told = sum(n for _, n in reasons)
        if told < self.skipped:  # counted without a reason
            reasons.append(("", self.skipped - told))
        return skipped_counts(reasons)

    def skipped_text(self, most: int = 3) -> str:
        """"32 NaN or infinite values, 3 malformed lines" ("nothing" when nothing was)."""
        return counts_text(self.skipped_counts(), most)
