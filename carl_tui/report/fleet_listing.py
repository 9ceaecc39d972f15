"""`carl-tui fleet`: every run a source holds, one row each, as JSON or a plain table.

The JSON array holds one object per run (keys always present, null where the run has no
such value), most recently updated first:

    {"run": str, "id": str, "source": str,
     "state": "live" | "finished" | "stalled" | "failed" | "queued" | "stopped",
     "first_step": int, "last_step": int, "updated_at": float (epoch seconds),
     "phase": {"phase": str, "stage": "accuracy" | "reward", "from_step": int,
               "seen_at": int},
     "gate": {"metric": str, "fired_at": int | null},
     "task": {"metric": str, "last": float, "best": float, "trend": [float, ...]},
     "loss": float, "gpu_percent": float, "flavor": str, "cost_usd": float,
     "created_at": float (a job's creation, epoch seconds),
     "job_state": str (a job's state in its engine's words: "PENDING (Resources)"),
     "config": {key: value},
     "health": str (the worst health flag standing, or "ok"),
     "health_flags": [str, ...] (every flag standing, worst first)}

`phase` is the last entry of `summary --json`'s `phases`, `gate` its `gate`, and the
task's `last` and `best` are `summary`'s `last` and `max` of that metric: the same
numbers for the same run (`store/fleet.py` says how each is chosen, and the states).
The table says the same for a person, with the config keys that differ between the runs
(the sweep's axes) as its last columns.

A job's cost is its flavor's price per hour (listed by the Hub, asked once when a run
is a job) times the hours it has run; null when the price cannot be had (offline).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from carl_tui.hub import job_prices as hub_prices
from carl_tui.report.summary import _num
from carl_tui.store import fleet_columns
from carl_tui.store.fleet import FleetRow, differing_keys, needs_prices
from carl_tui.store.fleet_columns import FleetColumn


def fleet_dict(row: FleetRow) -> dict[str, Any]:
    """One run of `fleet --json`."""
    return {
        "run": row.run.label,
        "id": row.run.run_id,
        "source": row.source,
        "state": row.state,
        "first_step": row.first_step,
        "last_step": row.last_step,
        "updated_at": row.updated_at,
        "phase": {"phase": row.phase, "stage": row.stage, "from_step": row.phase_from,
                  "seen_at": row.phase_seen},
        "gate": {"metric": row.gate_metric, "fired_at": row.gate_step},
        "task": {"metric": row.task_metric, "last": row.task_last, "best": row.task_best,
                 "trend": list(row.task_trend)},
        "loss": row.loss,
        "gpu_percent": row.gpu_percent,
        "flavor": row.flavor,
        "cost_usd": row.cost_usd,
        "created_at": row.created_at,
        "job_state": row.job_state,
        "config": dict(row.config),
        "health": row.worst_flag,
        "health_flags": list(row.health),
    }


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return _num(v)
    return str(v)


def _config_cell(v: Any) -> str:
    """A config value as people write it: 0.0003, 1e-05, 8, tiny-llama."""
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (dict, list)):
        return json.dumps(v, default=str)
    return "-" if v is None else str(v)


def _text(column: FleetColumn, row: FleetRow, now: float) -> str:
    return column.text(row, now) if column.text is not None else _cell(column.value(row))


def fleet_table(rows: Sequence[FleetRow], *, now: float | None = None) -> list[list[str]]:
    """The table's cells, its header first: what the fleet screen shows, for a pipe (the
    listed columns of `store/fleet_columns.py`, then the config keys that differ)."""
    now = time.time() if now is None else now
    axes = differing_keys(rows)
    listed = fleet_columns.listed()
    out = [[c.listed or c.key for c in listed] + axes]
    for r in rows:
        out.append([_text(c, r, now) for c in listed]
                   + [_config_cell(r.config.get(k)) for k in axes])
    return out


def fleet_text(rows: Sequence[FleetRow], *, now: float | None = None) -> str:
    """The table, its columns aligned (numbers to the right)."""
    cells = fleet_table(rows, now=now)
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    right = [c.align == "right" for c in fleet_columns.listed()]
    right += [False] * (len(widths) - len(right))
    lines = []
    for row in cells:
        parts = [c.rjust(w) if r else c.ljust(w)
                 for c, w, r in zip(row, widths, right, strict=True)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def job_prices(rows: Sequence[FleetRow],
               say: Callable[[str], None] | None = None) -> dict[str, float] | None:
    """The Hub's price per hour of each Jobs flavor, asked only when a run is a job;
    None (said once through `say`) when it cannot be had."""
    if not needs_prices(rows):
        return None
    try:
        return hub_prices()
    except Exception as exc:  # noqa: BLE001 - a missing price is a missing column, said once
        if say is not None:
            say(f"job cost unknown: {exc}")
        return None
