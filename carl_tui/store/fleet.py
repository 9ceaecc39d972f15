"""The fleet: one row per run the store holds, for the fleet table and `fleet --json`.

`FleetRow` is what the table shows and `fleet --json` prints for one run; `fleet_rows`
builds them from the store (each run's snapshot, its source's word on its life
(`RunLife`), its job), so a row's numbers are those of `summary --run` for the same run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from carl_tui import metric_names as mn
from carl_tui.events import STAGE_LIFE, RunRef
from carl_tui.identity import LOCAL
from carl_tui.store.health import standing
from carl_tui.store.store import RunStore, newest_first, updated_at

if TYPE_CHECKING:  # pragma: no cover
    from carl_tui.store.snapshot import RunSnapshot, SeriesView

#: live: it may still log; finished: its end was read; stalled: live, but no update for
#: several times its usual interval; failed: its job errored or was cancelled; queued: its
#: job is not running yet.
FleetState = Literal["live", "finished", "stalled", "failed", "queued", "stopped"]


@dataclass(frozen=True)
class FleetRow:
    """One run, as the fleet table shows it. None where the run has no such value."""

    run: RunRef
    source: str  # the kind of source: "trackio", "tensorboard", "wandb", "hf-job", ...
    state: FleetState
    first_step: int | None = None
    last_step: int | None = None
    updated_at: float | None = None  # wall time (epoch seconds) of the newest record
    phase: str | None = None  # the current stage's phase
    stage: str | None = None  # "sft", "grpo", ... where the run has stages
    phase_from: int | None = None  # the step the phase began
    phase_seen: int | None = None  # the step at which the dashboard first said it
    gate_metric: str | None = None
    gate_step: int | None = None  # the step the gate fired, None while it has not
    task_metric: str | None = None  # the progress metric (reward, token accuracy, ...)
    task_last: float | None = None
    task_best: float | None = None
    task_trend: tuple[float, ...] = ()  # a few dozen values across the run, for a sparkline
    loss: float | None = None
    gpu_percent: float | None = None
    flavor: str | None = None  # the job's hardware flavor, for a job
    cost_usd: float | None = None  # price per hour x time running, for a job with a price
    created_at: float | None = None  # when its job was created (epoch seconds), for a job
    # The job's state in its engine's own words, with a pending job's reason ("PENDING
    # (Resources)", Ray's "STOPPED"): `Job.message`, for a job whose engine says one.
    job_state: str | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    # Its history is still being read after a coarse preview (the dashboard's store): the
    # phase, the gate's step and the best value are the preview's (None: not told yet);
    # so are its step, task value and loss unless the preview holds its newest rows
    # (`newest_read`: a project of many runs previewed run by run).
    provisional: bool = False
    newest_read: bool = True
    # The health flags standing (store/health.py), worst first; () when none stands.
    health: tuple[str, ...] = ()
    health_severity: str | None = None  # the worst one's

    @property
    def state_text(self) -> str:
        """The state as printed (`fleet` piped): a queued job's with its engine's reason
        ("queued: PENDING (Resources)"); the screen's column is too narrow for it, the
        job bar and the run card say it there."""
        if self.state == "queued" and self.job_state:
            return f"queued: {self.job_state}"
        return self.state

    @property
    def worst_flag(self) -> str:
        """The worst flag standing, or "ok"."""
        return self.health[0] if self.health else "ok"


# -- building the rows ------------------------------------------------------------------

#: A live run is "stalled" when nothing new came for more than STALL_FACTOR times its
#: usual interval between updates (the median gap between the wall times of its last
#: rows, as its source dates them: each row's time where the source knows it, else each
#: read batch's newest), and for at least STALL_MIN_S seconds (a run that logs every
#: 0.2 s is not stalled after 1 s of garbage collection). Where the interval cannot be
#: measured (fewer than three dated rows: a history read in one batch), after
#: STALL_UNKNOWN_S seconds without an update.
STALL_FACTOR = 5.0
STALL_MIN_S = 60.0
STALL_UNKNOWN_S = 600.0
#: A run its source cannot see end (a file, Trackio's store) that stays silent far longer
#: (STOP_FACTOR times its usual interval, and at least STOP_MIN_S) has "stopped": it will
#: not come back (W&B calls such a run crashed when its heartbeat stops).
STOP_FACTOR = 60.0
STOP_MIN_S = 3600.0
TREND_POINTS = 32  # values across the run for a row's sparkline
#: The series a row reads (with its current progress metric): its task metric where the
#: stage has none of its own (`task_metric`), its loss, its epoch (`_reached_its_end`).
ROW_SERIES = (mn.ACCURACY, mn.REWARD, "loss", "epoch")

#: The store's sizes for reading many runs for their rows only (`carl-tui fleet`): each
#: series keeps the last 64 points (what a snapshot's tail and means read) and 32 buckets
#: of history (a trend of TREND_POINTS), not the dashboard's 4096 + 1024 a series. A row's
#: numbers do not change: last, best, phases and gate are computed on every row as read.
FLEET_STORE = {"recent": 64, "max_buckets": 32}

#: Config keys that differ between runs for no meaning (names, ids, paths, times), or that
#: have a column of their own (a job's flavor): never a sweep's axis. Matched on the key
#: itself, at the top level of the config; so are the keys a tracker adds with a leading
#: underscore (Trackio's `_Created`, W&B's `_wandb`).
NOISE_KEYS = frozenset({
    "name", "run_name", "run_id", "id", "job_id", "url", "output_dir", "logging_dir",
    "hub_model_id", "trackio_url", "trackio_dir", "trackio_project", "timestamp",
    "created_at", "start_time", "started_at", "wandb_run_id", "command", "labels",
    "flavor",  # a job's: a column of its own
})

#: Meta entries that are the store's or a source's bookkeeping, not the run's config (for a
#: run whose meta has no `config` of its own: a JSONL stream's meta line, a job).
_BOOKKEEPING = frozenset({
    "config", "train_summary", "train_summary_step", "steps_estimated", "summary",
    "exit_code", "trackio_url", "trackio_dir", "trackio_project",
})


class RowSnapshots:
    """The snapshot each row is read from, taken again only when its run changed. The
    fleet table reads every row whenever the store changed: while a project of a thousand
    runs loads, a few runs change between two reads, and taking every run's snapshot
    each time (under the store's lock) held back the loading itself."""

    def __init__(self) -> None:
        self._memo: dict[str, tuple[int, RunSnapshot | None]] = {}

    def of(self, store: RunStore, key: str) -> RunSnapshot | None:
        version = store.run_version(key)
        hit = self._memo.get(key)
        if hit is not None and hit[0] == version:
            return hit[1]
        snap = store.snapshot(key, max_points=TREND_POINTS, series=ROW_SERIES)
        self._memo[key] = (version, snap)
        return snap


def fleet_rows(store: RunStore, *, now: float | None = None,
               prices: Mapping[str, float] | None = None,
               snapshots: RowSnapshots | None = None,
               first: int | None = None) -> list[FleetRow]:
    """One row per run `store` holds, the newest record first (its `updated_at`; among
    equals, the run the store updated last: a run's place does not move while its old
    history is read). `now` (epoch seconds,
    default the clock) judges "stalled" and a running job's cost; `prices` maps a job's
    hardware flavor to its price in USD per hour (the Hub lists them: `hub.job_prices`;
    without it a job's cost is None: no price is known offline). `snapshots`: the runs'
    snapshots as last taken, for a reader that reads the rows again and again. `first`:
    only the first rows of that order, so many (a big fleet's first screen, at once)."""
    now = time.time() if now is None else now
    snapshots = snapshots or RowSnapshots()
    rows = []
    for run in store.runs() if first is None else store.newest_runs(first):
        snap = snapshots.of(store, run.key)
        if snap is not None:
            rows.append(fleet_row(snap, now=now, prices=prices))
    rows.sort(key=lambda r: newest_first(r.updated_at))
    return rows


def fleet_row(snap: RunSnapshot, *, now: float,
              prices: Mapping[str, float] | None = None) -> FleetRow:
    """The row of one run's snapshot (see `fleet_rows`)."""
    phase, from_step, seen_at, stage = (snap.phase.dated[-1] if snap.phase.dated
                                        else (None,) * 4)
    task = task_metric(snap)
    series = snap.series.get(task) if task else None
    loss = snap.series.get("loss")
    flavor = (snap.job.flavor if snap.job is not None else "") or snap.meta.get("flavor")
    config = run_config(snap.meta)
    flags = standing(snap.health_at(now))
    return FleetRow(
        run=snap.run,
        source=snap.run.source,
        state=run_state(snap, now, config),
        first_step=snap.first_step,
        last_step=snap.last_step,
        updated_at=updated_at(snap),
        phase=phase or None,
        stage=stage or None,
        phase_from=from_step,
        phase_seen=seen_at,
        gate_metric=snap.gate.metric,
        gate_step=snap.gate.trigger_step if snap.gate.fired else None,
        task_metric=task,
        task_last=series.last if series is not None else None,
        task_best=series.max if series is not None else None,
        task_trend=_trend(series),
        loss=loss.last if loss is not None else None,
        gpu_percent=_gpu_percent(snap),
        flavor=str(flavor) if flavor else None,
        cost_usd=_cost(snap, now, prices),
        job_state=(snap.job.message or None) if snap.job is not None else None,
        created_at=snap.job.created_at if snap.job is not None else None,
        config=shown_config(config),
        provisional=snap.phase.provisional,
        newest_read=snap.newest_read,
        health=tuple(f.flag for f in flags),
        health_severity=flags[0].severity if flags else None,
    )


def run_state(snap: RunSnapshot, now: float,
              config: Mapping[str, Any] | None = None) -> FleetState:
    """The run's state: its source's word (`RunLife`) where it says more than "live", else
    its job's stage, else "finished" once its end of training was read (the Trainer's
    end-of-training values, a W&B exit record) or its last step reached the end its config
    sets (`max_steps`, else `num_train_epochs` by the logged epoch: a Trainer's config, as
    TRL's `report_to` logs it; Trackio keeps no end of a run) or its progress bar its
    total, else "live" (a source that cannot tell, such as Trackio's store, says "live"
    of every run it reads); a live run with no update for long is "stalled"
    (STALL_FACTOR), and for far longer "stopped" (STOP_FACTOR): the age is its data's
    own time (`updated_at`), never the time it was read. `config`: the run's
    (`run_config`), where the caller has it. One word, the same on every screen."""
    said = snap.life.state if snap.life is not None else "live"
    if said != "live":
        state: FleetState = said
    elif snap.job is not None and snap.job.stage in STAGE_LIFE:
        state = snap.job.life
    elif "exit_code" in snap.meta:
        state = "finished" if snap.meta["exit_code"] in (0, None) else "failed"
    elif (snap.meta.get("train_summary") or _reached_its_end(snap, config)
          or _bar_full(snap)):
        state = "finished"
    else:
        state = "live"
    if state == "live":
        return _silence(snap, now)
    return state


def _bar_full(snap: RunSnapshot) -> bool:
    """A Trainer's progress bar reached its total, and the run logged that step."""
    bar = snap.progress
    return (bar is not None and bool(bar.total) and bar.step >= bar.total
            and snap.last_step is not None and snap.last_step >= bar.total)


#: The config keys that set a run's last step, the first one set counting: the Trainer's
#: `max_steps`, else a script's own (`total_steps`, `num_steps`, `steps`: a sweep's spec).
END_STEP_KEYS = ("max_steps", "total_steps", "num_steps", "steps")


def _reached_its_end(snap: RunSnapshot, config: Mapping[str, Any] | None) -> bool:
    """The run logged the last step its config asks for: `max_steps` (> 0), or, where that
    is unset (-1: epochs decide), `num_train_epochs` by its logged `epoch`."""
    config = run_config(snap.meta) if config is None else config
    max_steps = next((n for key in END_STEP_KEYS
                      if (n := mn.finite_number(config.get(key))) is not None and n > 0), None)
    if max_steps is not None:
        return snap.last_step is not None and snap.last_step >= max_steps
    epochs, epoch = mn.finite_number(config.get("num_train_epochs")), snap.series.get("epoch")
    return (epochs is not None and epochs > 0 and epoch is not None
            and epoch.last is not None and epoch.last >= epochs - 1e-6)


def usual_interval(snap: RunSnapshot) -> float | None:
    """The median gap (seconds) between the wall times of the run's last rows, or None
    when fewer than three rows carry one."""
    if snap.wall is None:
        return None
    times = snap.wall.tail[np.isfinite(snap.wall.tail)]
    if times.size < 3:
        return None
    gaps = np.diff(np.sort(times))
    gaps = gaps[gaps > 0]
    return float(np.median(gaps)) if gaps.size else None


def _silence(snap: RunSnapshot, now: float) -> FleetState:
    """A run said live, by how long it has been silent: "live", "stalled" or "stopped"."""
    updated, interval = updated_at(snap), usual_interval(snap)
    if updated is None:
        return "live"
    silent = now - updated
    if silent > max(STOP_FACTOR * (interval or STALL_UNKNOWN_S / STALL_FACTOR), STOP_MIN_S):
        return "stopped"
    if interval is None:
        return "stalled" if silent > STALL_UNKNOWN_S else "live"
    return "stalled" if silent > max(STALL_FACTOR * interval, STALL_MIN_S) else "live"


def task_metric(snap: RunSnapshot) -> str | None:
    """The progress metric of the run's current stage (token accuracy, the task reward)
    where the run logs it as one series; else accuracy or reward when it logs one."""
    if snap.phase.metric in snap.series:
        return snap.phase.metric
    return next((m for m in (mn.ACCURACY, mn.REWARD) if m in snap.series), None)


def _trend(series: SeriesView | None) -> tuple[float, ...]:
    if series is None:
        return ()
    values = series.values[np.isfinite(series.values)]
    if values.size > TREND_POINTS:
        values = values[np.linspace(0, values.size - 1, TREND_POINTS).astype(int)]
    return tuple(float(v) for v in values)


def _gpu_percent(snap: RunSnapshot) -> float | None:
    """The mean utilization of the run's GPUs in their newest samples (the job bar's)."""
    usage = snap.usage
    return None if usage is None else usage.gpu_percent


def needs_prices(rows: Sequence[FleetRow]) -> bool:
    """Whether a row is a job whose flavor the Hub prices (a run of this machine, flavor
    `local`, has no price): only then are the Hub's prices asked."""
    return any(r.flavor not in (None, "", LOCAL) for r in rows)


def _cost(snap: RunSnapshot, now: float, prices: Mapping[str, float] | None) -> float | None:
    """Price per hour x hours running (0 while queued); None without a job or a price."""
    job = snap.job
    if job is None or not prices or job.flavor not in prices:
        return None
    if job.started_at is None:
        return 0.0
    seconds = max(0.0, (job.finished_at or now) - job.started_at)
    return prices[job.flavor] * seconds / 3600.0


def run_config(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The run's config: its logged `config`, else the other entries of its meta."""
    cfg = meta.get("config")
    if isinstance(cfg, Mapping):
        return dict(cfg)
    return {k: v for k, v in meta.items() if k not in _BOOKKEEPING}


def shown_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A run's config as the table, the card and `fleet --json` show it: without a
    tracker's own `_` keys (W&B's `_Username`, `_Created`, `_Group`...), which are its
    bookkeeping, not the run's config."""
    return {k: v for k, v in config.items() if not str(k).startswith("_")}


def differing_keys(rows: Sequence[FleetRow]) -> list[str]:
    """The config keys the runs share with different values (a sweep's axes: learning
    rate, seed, model...), in the order the runs name them: a key counts where at least
    two runs have it and they give it different values. A key only one run has is that
    run's own (an SFT run and a GRPO run each have dozens the other lacks: not axes), and
    keys every run gives the same value are left out, and so are NOISE_KEYS (names, ids,
    paths, times) and keys that begin with "_"."""
    keys: dict[str, None] = {}
    for r in rows:
        keys.update(dict.fromkeys(r.config))
    out = []
    for key in keys:
        if key in NOISE_KEYS or str(key).startswith("_"):
            continue
        values = [_comparable(r.config[key]) for r in rows if key in r.config]
        if len(values) > 1 and len(set(values)) > 1:
            out.append(key)
    return out


def _comparable(v: Any) -> Any:
    """A hashable stand-in for a config value (dicts and lists as their JSON)."""
    try:
        hash(v)
    except TypeError:
        return json.dumps(v, sort_keys=True, default=str)
    return v
