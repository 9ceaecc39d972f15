"""The fleet: one row per run the store holds, for the fleet table and `fleet --json`.

`FleetRow` is what the table shows and `fleet --json` prints for one run; `fleet_rows`
builds them from the store (each run's snapshot, its source's word on its life
(`RunLife`), its job), so a row's numbers are those of `summary --run` for the same run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from carl_tui.events import RunRef

#: live: it may still log; finished: its end was read; stalled: live, but no update for
#: several times its usual interval; failed: its job errored or was cancelled; queued: its
#: job is not running yet.
FleetState = Literal["live", "finished", "stalled", "failed", "queued"]


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
    config: Mapping[str, Any] = field(default_factory=dict)
