"""The state of one run, fed by events: its series, log, job and machine samples, and
its judgements (gates, phases, alerts and the events they record: `judgements.py`).
`snapshot()` reads it (`run_snapshot.py`)."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

import numpy as np

from carl_tui import metric_names as mn
from carl_tui.events import (
    Job,
    Marker,
    Progress,
    RunLife,
    RunRef,
    ScalarBatch,
    SystemSample,
)
from carl_tui.store.judgements import RunJudgements
from carl_tui.store.preview import Preview
from carl_tui.store.run_snapshot import build_snapshot
from carl_tui.store.run_summary import (
    SUMMARY,
    SUMMARY_STEP,
    merged,
    meta_update,
    take_run_summary,
)
from carl_tui.store.series import Series
from carl_tui.store.snapshot import RunSnapshot
from carl_tui.store.step_count import StepCount
from carl_tui.store.system import SystemTrack

if TYPE_CHECKING:  # pragma: no cover
    from carl_tui.coherence.gates import PhaseTransitionGate
    from carl_tui.store.cascade import CascadeTracker
    from carl_tui.store.health import HealthWatch
    from carl_tui.store.phases import PhaseTrack
    from carl_tui.store.snapshot import RunEvent

LOG_TAIL = 2000
MAX_MARKERS = 1000


class RunState:
    def __init__(
        self,
        run: RunRef,
        *,
        vocab_size: int | None = None,
        gate_metric: str = mn.ACCURACY,
        recent: int = 4096,
        max_buckets: int = 1024,
        notify: Callable[[RunRef, str, int | None, str, str], None] | None = None,
    ):
        self.run = run
        self.meta: dict = {}
        self.series: dict[str, Series] = {}
        self._recent, self._max_buckets = recent, max_buckets
        self.wall = Series(recent, max_buckets)  # wall time by step (not a metric)
        self.cli_vocab_size = vocab_size
        self.judgements = RunJudgements(gate_metric, self._tell)  # gate, cascade, phases, alerts
        self.markers: deque[Marker] = deque(maxlen=MAX_MARKERS)
        self.log_tail: deque[str] = deque(maxlen=LOG_TAIL)
        self.log_total = 0
        self.job: Job | None = None  # the job the run belongs to, as last said
        self.life: RunLife | None = None  # the source's word on the run's life, if any
        self.progress: Progress | None = None
        self.system = SystemTrack()  # machine samples (GPUs, CPU, RAM)
        self.version = 0
        # The wall time of the run's newest record that carries one (never the time it
        # was read); `newest_timeless`: a newer record carried none (a log line, a Trainer
        # dict), so its time is its file's (`RunLife.updated_at`, see `updated_at`).
        self.updated_at: float | None = None
        self.newest_timeless = False
        self._steps = StepCount()  # distinct steps logged
        self.last_step: int | None = None
        self.first_step: int | None = None
        self.preview: Preview | None = None  # the coarse view while the history is read
        self._warned_vocab = False
        self._notify = notify or (lambda *a: None)

    # -- the judgements' readers (see judgements.py) ------------------------------

    @property
    def gate(self) -> PhaseTransitionGate:
        return self.judgements.gate

    @property
    def cascade(self) -> CascadeTracker:
        return self.judgements.cascade

    @property
    def phases(self) -> PhaseTrack:
        return self.judgements.phases

    @property
    def events(self) -> deque[RunEvent]:
        return self.judgements.events

    @property
    def health(self) -> HealthWatch:
        return self.judgements.health

    @property
    def steps_logged(self) -> int:
        """Distinct steps that logged something (rows of one step count once)."""
        return self._steps.count

    # -- identity ------------------------------------------------------------

    @property
    def vocab_size(self) -> int | None:
        v = self.meta.get("vocab_size") or (self.meta.get("config") or {}).get("vocab_size")
        if isinstance(v, (int, float)) and v > 1:
            return int(v)
        return self.cli_vocab_size

    def _series(self, name: str) -> Series:
        s = self.series.get(name)
        if s is None:
            s = self.series[name] = Series(self._recent, self._max_buckets)
        return s

    def _touch(self, wall_time: float | None = None, *, fresh: bool = True) -> None:
        """Something changed; `fresh`: the run itself produced it (its data or log lines),
        so "updated N ago" moves to its time (metadata and the run's markers do not). A
        record with no time of its own leaves the age to its file's time: never the time
        it was read."""
        self.version += 1
        if not fresh:
            return
        if wall_time is None:
            self.newest_timeless = True
        elif self.updated_at is None or wall_time >= self.updated_at:
            self.updated_at = wall_time
            self.newest_timeless = False

    # -- events --------------------------------------------------------------

    def add_meta(self, meta: dict) -> None:
        if SUMMARY in meta or SUMMARY_STEP in meta:  # the end of a training: to its summary
            meta, left_out = meta_update(self.meta, meta)
            if left_out:
                what = "entry" if left_out == 1 else "entries"
                self._notify(self.run, SUMMARY, None, f"run summary: {left_out} {what} not "
                             "a number (left out)", "warning")
        self.meta.update(meta)
        if SUMMARY in meta:  # the end of the training, after its rows
            self.phases.training_ended()
        self.judgements.cascade.add_meta(meta)
        self._check_vocab()
        self._touch(fresh=False)

    def add_marker(self, marker: Marker) -> None:
        self.markers.append(marker)
        self._touch(fresh=False)
        if marker.kind == "cascade":
            self.judgements.cascade_marker(marker.step)
            return
        if marker.kind in ("phase", "stage"):  # the run's own labels: shown, not announced
            return
        if marker.kind == "alert":  # trackio.alert(...): the run's own alert
            self.judgements.run_alert(marker)
            return
        if marker.kind == "guard":  # the dashboard's guard acted on the run (ui/guard.py)
            self.judgements.record("guard", marker.step, str(marker.detail.get("text", "")),
                              "warning")
            return
        if marker.kind == "phase_transition":  # the dashboard's own gate says it (the panel
            return                            # shows the run's step when the two differ)
        label = marker.kind.replace("_", " ")
        self._notify(self.run, f"marker:{marker.kind}", marker.step,
                     f"run reports {label} at step {marker.step}", "information")

    def add_lines(self, lines: tuple[str, ...]) -> None:
        self.log_tail.extend(lines)
        self.log_total += len(lines)
        self._touch()

    def set_job(self, job: Job) -> None:
        first = self.job is None
        changed = first or self.job.stage != job.stage
        self.job = job
        self._touch(fresh=False)
        if changed:
            sev = "error" if job.stage in ("ERROR",) else "information"
            text = f"job {job.job_id}: {job.stage}"
            # a job first seen has not changed: recorded, not announced (a list of 50 jobs
            # is not 50 pieces of news); a first sight of a failed job is
            judged = self.judgements
            tell = judged.note if first and sev == "information" else judged.record
            tell("job", self.last_step, text, sev)

    def set_life(self, life: RunLife) -> None:
        """The source's word on the run's life: a change of the run, not its data."""
        self.life = life
        self._touch(fresh=False)

    def add_system(self, sample: SystemSample) -> None:
        """A machine sample: shown, not data of the run (`updated_at` stays: a stalled
        training whose GPU monitor still logs must not look fresh)."""
        self.system.add(sample)
        self.version += 1

    def set_progress(self, progress: Progress) -> None:
        self.progress = progress
        self._touch()

    def add_batch(self, batch: ScalarBatch) -> None:
        if batch.preview:
            self._add_preview(batch)
            return
        n = len(batch)
        if n == 0:
            return
        steps = batch.steps.astype(np.float64)
        cols = dict(batch.columns)
        ended = take_run_summary(batch.steps, cols)  # never points of a curve
        if ended is not None:
            self.meta.update(merged(self.meta, *ended))
        for name, values in cols.items():
            self._series(name).extend(steps, values)
        self._add_wall_times(batch, steps)
        self._steps.add(batch.steps)
        newest, oldest = int(batch.steps.max()), int(batch.steps.min())
        self.last_step = newest if self.last_step is None else max(self.last_step, newest)
        self.first_step = oldest if self.first_step is None else min(self.first_step, oldest)
        self.phases.vocab_size = self.vocab_size
        self.judgements.feed(batch.steps, cols, batch.nonfinite)
        if ended is not None:  # read in order: the rows before the summary are in
            self.phases.training_ended()
        self._check_vocab()
        if self.preview is not None and self.updated_at is not None:
            # Old rows of the history: the run's newest data is the preview's.
            self.version += 1
            if batch.wall_time is not None and batch.wall_time > self.updated_at:
                self.updated_at = batch.wall_time
            return
        self._touch(batch.wall_time)

    def _add_preview(self, batch: ScalarBatch) -> None:
        """A coarse view of the history (see store/preview.py); an empty one ends it."""
        if len(batch) == 0:
            if self.preview is not None:
                self.preview = None
                self.version += 1
            return
        if self.preview is None:
            self.preview = Preview(self.gate.metric)
        self.preview.add(batch)
        self._touch(batch.wall_time)

    def _add_wall_times(self, batch: ScalarBatch, steps: np.ndarray) -> None:
        """Wall time by step, for the time axis: each row's when the source knows it,
        else the batch's newest time at its newest step."""
        if batch.times is not None:
            self.wall.extend(steps, np.asarray(batch.times, dtype=np.float64))
        elif batch.wall_time is not None:
            i = int(np.argmax(batch.steps))
            self.wall.extend(steps[i : i + 1], np.array([batch.wall_time], dtype=np.float64))

    @property
    def phi_derived(self) -> bool:
        """phi is shown as `1 - entropy / ln V`: the run logs entropy, no phi, and V is known."""
        names = set(self.series)
        if self.preview is not None:
            names.update(self.preview.names())
        return mn.PHI not in names and mn.ENTROPY in names and bool(self.vocab_size)

    def _check_vocab(self) -> None:
        """Entropy above ln V is impossible: then the vocabulary size is wrong. Said once."""
        v, ent = self.vocab_size, self.series.get(mn.ENTROPY)
        if self._warned_vocab or not v or ent is None or not ent.count:
            return
        if ent.vmax > math.log(v) + 1e-9:
            self._warned_vocab = True
            self._notify(
                self.run, "vocab", None,
                f"entropy exceeds ln {v}: the vocabulary size {v} looks too small "
                "(set --vocab-size)", "warning",
            )

    def _tell(self, kind: str, step: int | None, text: str, severity: str) -> None:
        """Tell the user about an event the run's judgements recorded."""
        self._notify(self.run, kind, step, text, severity)

    # -- reading -------------------------------------------------------------

    def time_at(self, step: int | None) -> float | None:
        """The wall time of the run at `step`, where it dates its rows: the newest time at
        a step up to it, else the first dated after it (no later than that); None where
        no row is dated."""
        if step is None or not len(self.wall):
            return None
        steps, times = self.wall.display(max_points=1 << 30)
        ok = np.isfinite(times)
        steps, times = steps[ok], times[ok]
        if not steps.size:
            return None
        before = steps <= step
        if before.any():
            return float(times[before].max())
        return float(times.min())

    def snapshot(self, max_points: int = 2000,
                 series: Collection[str] | None = None) -> RunSnapshot:
        """What the UI and the reports read of the run (see `run_snapshot.py`)."""
        return build_snapshot(self, max_points, series)
