"""The plain event model: what every source produces and the store consumes.

Events are small immutable values with no I/O and no Textual. Metric points
travel in columnar batches (`ScalarBatch`) so that loading a million steps is a
handful of numpy operations rather than millions of Python objects.

Importing this module does not import numpy (the CLI checks what the user named,
and the dashboard draws its first frame, before numpy loads): numpy is imported
where a batch is built.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np


@dataclass(frozen=True, slots=True)
class RunRef:
    """Identity of one run. Runs are keyed by `run_id`; `name` is for display
    (Trackio run names repeat across runs)."""

    source: str  # "jsonl", "trackio", "trackio-remote", "hf-job", "replay", "demo"
    project: str
    run_id: str
    name: str = ""

    @property
    def key(self) -> str:
        return f"{self.source}:{self.project}:{self.run_id}"

    @property
    def label(self) -> str:
        return self.name or self.run_id

    def answers_to(self, wanted: str) -> bool:
        """Whether `--run wanted` names this run: its key, id or name, or the last parts of
        a name that is a path (a TensorBoard run `exp/Nov26_host` answers to `Nov26_host`)."""
        if wanted in (self.key, self.run_id, self.name):
            return True
        return ends_with_path(self.name, wanted) or ends_with_path(self.run_id, wanted)


def ends_with_path(name: str, wanted: str) -> bool:
    """Whether the path-like `name` ends with the parts `wanted` (`exp/Nov26_host` ends
    with `Nov26_host` and with `Nov26_host/`, not with `26_host`)."""
    tail = "/" + wanted.strip("/")
    return tail != "/" and name.endswith(tail)


@dataclass(frozen=True, slots=True)
class ScalarBatch:
    """Many steps of many metrics for one run, in columns.

    `steps` is int64 of length N (not necessarily sorted, duplicates allowed:
    the store keeps them in arrival order). Every column is float64 of length N
    with NaN where that metric was not logged at that step. Values are already
    validated (finite numbers); invalid ones are NaN and counted by the source.
    `times`, when the source knows them, is each row's wall time (the x axis
    "time since start"); otherwise `wall_time` dates the newest row.
    `nonfinite` names values the run logged as NaN or infinite (not plotted;
    the store raises an alert for a NaN loss).

    `preview`: the rows are a coarse view of the run read ahead of its history (a
    strided sample of the whole run and its newest rows), shown provisionally
    while the history is read in order; they never reach the gates and phases.
    The real rows follow as plain batches; an empty preview batch says the
    history has been read up to where the preview was taken (the coarse view is
    dropped). `tail`: a preview batch of the run's newest rows only, no sample of its
    shape (a project of many runs: each run's latest values, step and time): shown, never
    fed to the preview's own phase classifier and gate.
    """

    run: RunRef
    steps: np.ndarray
    columns: Mapping[str, np.ndarray]
    wall_time: float | None = None  # wall time of the newest row, seconds since epoch
    times: np.ndarray | None = None  # wall time of each row (float64, NaN = unknown), if known
    nonfinite: tuple[tuple[str, int], ...] = ()  # (metric, step) logged as NaN or infinite
    preview: bool = False  # a coarse view of the history, shown until the history is read
    tail: bool = False  # with preview: the run's newest rows only (not its shape)

    def __len__(self) -> int:
        return int(self.steps.shape[0])

    @classmethod
    def from_rows(
        cls,
        run: RunRef,
        rows: Iterable[tuple[int, Mapping[str, float]]],
        wall_time: float | None = None,
        nonfinite: Iterable[tuple[str, int]] = (),
    ) -> ScalarBatch:
        """Build a batch from `(step, {metric: value})` rows (values already valid floats);
        `nonfinite` names the (metric, step) values the run logged as NaN or infinite."""
        import numpy as np  # lazy: numpy off the first frame (the UI imports events before it)

        rows = list(rows)
        steps = np.fromiter((s for s, _ in rows), dtype=np.int64, count=len(rows))
        names: dict[str, None] = {}
        for _, vals in rows:
            for k in vals:
                names.setdefault(k, None)
        columns: dict[str, np.ndarray] = {}
        for name in names:
            columns[name] = np.fromiter(
                (vals.get(name, math.nan) for _, vals in rows), dtype=np.float64, count=len(rows)
            )
        return cls(run=run, steps=steps, columns=columns, wall_time=wall_time,
                   nonfinite=tuple(nonfinite))


@dataclass(frozen=True, slots=True)
class RunMeta:
    """Run metadata: model, method (sft/grpo), vocab_size, config, ... Merged into the run."""

    run: RunRef
    meta: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class LogLines:
    """Raw log lines of a run (job logs, trainer output), oldest first."""

    run: RunRef
    lines: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Marker:
    """A notable event at a step, reported by the run itself (e.g. the training
    callback's gate events): kind is "phase_transition", "cascade", "phase", ..."""

    run: RunRef
    kind: str
    step: int
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Progress:
    """Progress of a run as printed by a progress bar: step of total, ETA in seconds."""

    run: RunRef
    step: int
    total: int | None = None
    eta_s: float | None = None


Life = Literal["live", "finished", "failed", "stopped", "queued"]  # a run's life (`RunLife`)

# A job's stage, as Hugging Face Jobs names it (a training started on this machine uses
# the same words; "ENDED": one whose process is gone, found again in the jobs list), and
# the life of its run that each stage means.
STAGE_LIFE: Mapping[str, Life] = {
    "SCHEDULING": "queued",
    "RUNNING": "live",
    "COMPLETED": "finished",
    "ERROR": "failed",
    "CANCELED": "stopped",
    "DELETED": "failed",
    "ENDED": "finished",
}


def life_of_stage(stage: str) -> Life:
    """The run life a job's stage means: SCHEDULING -> queued, RUNNING -> live,
    COMPLETED (and ENDED) -> finished, CANCELED -> stopped (someone stopped it), ERROR
    and DELETED -> failed. A stage
    this does not know (one the Hub adds later) says nothing of an end: live."""
    return STAGE_LIFE.get(stage, "live")


@dataclass(frozen=True, slots=True)
class Job:
    """A job a run belongs to (a Hugging Face Job, or a training this machine started):
    what the launcher returns, what its source says each time its state changes (the
    store keeps the newest), and a line of the jobs list. Times are epoch seconds:
    `started_at` is None while it is scheduled, `finished_at` until it ends. `command`
    and `label` (what the jobs list shows beside it: the job's labels, else its command)
    have their secrets masked wherever they are shown (`hub.job_label`, the store)."""

    run: RunRef
    job_id: str
    stage: str
    namespace: str = ""
    name: str = ""
    flavor: str = ""
    message: str = ""
    url: str = ""
    created_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    command: tuple[str, ...] = ()
    label: str = ""

    @property
    def life(self) -> Life:
        return life_of_stage(self.stage)

    @property
    def ended(self) -> bool:
        """It has ended (completed, failed, cancelled or deleted): its stage will not change."""
        return self.life in ("finished", "failed", "stopped")

    @property
    def duration_s(self) -> float | None:
        """Seconds from creation to the end (or to now while it runs)."""
        if self.created_at is None:
            return None
        return (self.finished_at or time.time()) - self.created_at

    @property
    def age_s(self) -> float | None:
        """Seconds since it was created."""
        return None if self.created_at is None else time.time() - self.created_at

    @property
    def running_s(self) -> float | None:
        """Seconds it has run on its hardware (from its start to its end, or to now):
        what it costs is its flavor's price per hour times this. None before it starts."""
        if self.started_at is None:
            return None
        return max(0.0, (self.finished_at or time.time()) - self.started_at)


SourceState = Literal["connecting", "live", "retrying", "error", "finished", "idle"]


@dataclass(frozen=True, slots=True)
class SourceStatus:
    """Health of a source, for the status bar.

    `last_good` is the wall time of the last successful read; `skipped` counts
    malformed input skipped so far, `skip_reasons` says why (reason, count,
    first example), `not_plotted` counts valid data the dashboard does not
    plot (kind, count); `limitation` names a reduced mode (e.g. an old server
    without incremental queries)."""

    source: str
    state: SourceState
    message: str = ""
    last_good: float | None = None
    skipped: int = 0
    retry_in: float | None = None
    limitation: str = ""
    skip_reasons: tuple[tuple[str, int, str], ...] = ()
    not_plotted: tuple[tuple[str, int], ...] = ()
    follows: bool = False  # it follows a local file or folder (else a server, a job)
    slow: bool = False  # its last poll took longer than SLOW_POLL_S

    @property
    def word(self) -> str:
        """The source's connection in one word, never a run's state (a run is live,
        stalled, finished...; its source is "following" its file, "connected" to its
        server, "answering slowly", "retrying", or has "read all" there will be)."""
        if self.state == "live":
            if self.slow:
                return "answering slowly"
            return "following" if self.follows else "connected"
        return CONNECTION_WORDS.get(self.state, self.state)


#: A poll slower than this (seconds) has its source said to be "answering slowly".
SLOW_POLL_S = 3.0
CONNECTION_WORDS = {"finished": "read all"}




@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU in a system sample. Memory in MiB (2**20 bytes), power in watts,
    utilization in percent (0-100); None where the source did not report it."""

    index: int
    utilization: float | None = None
    memory_used_mb: float | None = None
    memory_total_mb: float | None = None
    power_w: float | None = None
    temperature_c: float | None = None


@dataclass(frozen=True, slots=True)
class SystemSample:
    """A sample of the machine a run trains on (Trackio's system metrics, a job's
    metrics stream): per GPU, CPU percent and RAM in MiB. Samples are dated by
    wall time (epoch seconds); `step` is None unless the source knows one. A
    sample may carry only some of this (Trackio logs GPU and CPU rows apart)."""

    run: RunRef
    step: int | None
    wall_time: float | None
    gpus: tuple[GpuSample, ...] = ()
    cpu_percent: float | None = None
    memory_mb: float | None = None
    memory_total_mb: float | None = None


@dataclass(frozen=True, slots=True)
class RunLife:
    """What a source knows of one run's life, said when it changes: "live" (it may still
    log), "finished" (its end was read: a Trainer's end-of-training line, a job that
    completed, a closed recording), "failed" (a job that errored or was deleted),
    "stopped" (a job someone cancelled), "queued" (a job not yet running). `updated_at`:
    wall time (epoch seconds) of the run's newest record, where the source knows it;
    `reason`: why, in a few words, where it says more than the state ("job ERROR: out of
    memory")."""

    run: RunRef
    state: Life
    updated_at: float | None = None
    reason: str = ""


Event = (
    ScalarBatch | RunMeta | LogLines | Marker | Progress | Job | SourceStatus
    | SystemSample | RunLife
)
