"""Rows of a remote Trackio reply as points, run by run.

A row of the metrics table is `{"id", "run_id", "run_name", "step", "metrics",
"timestamp"}`, its metrics a JSON object (or its text). The x axis is
`train/global_step` when the metrics have it, else Trackio's step; a row without
a valid step is skipped and counted (never given an invented step). Values that
are not finite numbers are counted (Trackio writes NaN as "NaN"); media, tables
and histograms are noted apart, never as skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from carl_tui.metric_names import metric_name, valid_number
from carl_tui.sources.rows import NOT_FINITE, iso_to_epoch, media_kind, short_repr, step_of
from carl_tui.sources.trackio.system_tables import X_KEY
from carl_tui.sources.unused_input import UnusedInput

_NON_FINITE = {"NaN", "Infinity", "-Infinity"}

Point = tuple[int, dict[str, float]]


@dataclass
class RunPoints:
    """Points by run (in arrival order), with each run's name and newest row time, and
    the (metric, step) pairs it logged as NaN or infinite (for the NaN-loss alert)."""

    by_run: dict[str, list[Point]] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    newest: dict[str, float | None] = field(default_factory=dict)
    nonfinite: dict[str, list[tuple[str, int]]] = field(default_factory=dict)


def run_key(row: dict[str, Any]) -> str:
    """The run a row belongs to: its id, else its name (old databases)."""
    return str(row.get("run_id") or row.get("run_name") or "")


def points_by_run(rows: list[dict[str, Any]], unused_input: UnusedInput) -> RunPoints:
    """The points of metrics rows, by run; what cannot be read counted in `unused_input`."""
    out = RunPoints()
    for row in rows:
        rid = run_key(row)
        out.names.setdefault(rid, str(row.get("run_name") or rid))
        metrics = row.get("metrics")
        if isinstance(metrics, (str, bytes)):
            try:
                metrics = orjson.loads(metrics)
            except orjson.JSONDecodeError:
                unused_input.skip("row metrics not JSON", short_repr(metrics))
                continue
        if not isinstance(metrics, dict):
            unused_input.skip("row metrics not a JSON object", short_repr(metrics))
            continue
        point = row_point(row.get("step"), metrics, unused_input, out.nonfinite.setdefault(rid, []))
        if point is not None:
            out.by_run.setdefault(rid, []).append(point)
        out.newest[rid] = iso_to_epoch(row.get("timestamp"))
    return out


def row_point(step: Any, metrics: dict[str, Any], unused_input: UnusedInput,
              nonfinite: list[tuple[str, int]] | None = None) -> Point | None:
    """(step, values) of a row; None (skipped and counted) when it has no valid step.
    Values logged as NaN or infinite are counted, and added to `nonfinite`."""
    x = step_of(metrics[X_KEY]) if X_KEY in metrics else step_of(step)
    if isinstance(x, str):  # the reason the step is not valid
        unused_input.skip(x, short_repr(metrics.get(X_KEY, step)))
        return None
    values: dict[str, float] = {}
    for key, value in metrics.items():
        name = None if key == X_KEY else metric_name(key)
        if name is None:
            continue
        v = valid_number(value)
        if v is not None:
            values[name] = v
        elif type(value) is float or (isinstance(value, str) and value in _NON_FINITE):
            unused_input.skip(NOT_FINITE, f"{key}={short_repr(value)}")
            if nonfinite is not None:
                nonfinite.append((name, x))
        elif isinstance(value, dict) and isinstance(value.get("_type"), str):
            unused_input.note(media_kind(value))
    return x, values
