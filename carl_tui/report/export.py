"""`carl-tui export`: every step of a run, one row per step, as JSONL or CSV.

Rows come from the same events the store receives, at full resolution (the
store keeps a bounded window; an export keeps every step). Several rows at
one step (a restart, a summary dict at the last step) merge into one; for a
metric logged twice at one step the later value wins. When the run logs no
phi and its vocabulary size is known, `phi` is derived from entropy
(`1 - entropy / ln V`), as on the dashboard.

Each row also carries the phase of its step as the run's story reads at the end of
the export (`phase`, `phase_from`: the step that phase began, `phase_seen_at`: the step
at which the dashboard first said it); steps before any phase have none.

Each row also says the health flags standing at its step (`health`: those whose trouble
began at or before it, `from_step <= step`, worst first, comma-separated; store/health.py):
a CSV column, empty where none stands; a JSONL key, left out where none stands. `--metrics`
without `health` leaves it out.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Sequence
from typing import TextIO

import numpy as np
import orjson

from carl_tui import metric_names as mn
from carl_tui.events import Event, ScalarBatch
from carl_tui.store.health import HealthFlag, standing
from carl_tui.store.sanitize import clean_events

HEALTH = "health"


class BatchCollector:
    """Keeps every ScalarBatch of every run (secret-free, as the store sees them)."""

    def __init__(self) -> None:
        self.batches: dict[str, list[ScalarBatch]] = {}

    def __call__(self, events: Iterable[Event]) -> None:
        batches = (ev for ev in events if isinstance(ev, ScalarBatch) and len(ev))
        for ev in clean_events(batches):
            self.batches.setdefault(ev.run.key, []).append(ev)


def merge_steps(batches: Sequence[ScalarBatch]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """One row per step, in step order: (steps, {metric: values with NaN = not logged})."""
    if not batches:
        return np.empty(0, dtype=np.int64), {}
    steps = np.concatenate([b.steps.astype(np.int64) for b in batches])
    names: dict[str, None] = {}
    for b in batches:
        names.update(dict.fromkeys(b.columns))
    order = np.argsort(steps, kind="stable")
    sorted_steps = steps[order]
    starts = np.flatnonzero(np.concatenate([[True], np.diff(sorted_steps) != 0]))
    out: dict[str, np.ndarray] = {}
    for name in names:
        col = np.concatenate([
            b.columns[name] if name in b.columns else np.full(len(b), np.nan) for b in batches
        ])[order]
        pos = np.where(np.isnan(col), -1, np.arange(col.size))
        last = np.maximum.reduceat(pos, starts)  # the last valid value of each step
        out[name] = np.where(last >= 0, col[np.maximum(last, 0)], np.nan)
    return sorted_steps[starts], out


def with_derived_phi(
    columns: dict[str, np.ndarray], vocab_size: int | None
) -> dict[str, np.ndarray]:
    if mn.PHI in columns or mn.ENTROPY not in columns or not vocab_size or vocab_size < 2:
        return columns
    return {**columns, mn.PHI: 1.0 - columns[mn.ENTROPY] / math.log(vocab_size)}


def with_run_summary(
    steps: np.ndarray, columns: dict[str, np.ndarray], step: int | None,
    values: dict[str, float] | None,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The run's end-of-training values (`train_loss`, `train_runtime`, ...) as columns at
    their step, where the rows do not hold them already (a Trainer log prints them in a
    dict of their own, which the store keeps apart)."""
    missing = {k: v for k, v in (values or {}).items() if k not in columns}
    if step is None or not missing:
        return steps, columns
    i = int(np.searchsorted(steps, step))
    if i == steps.size or steps[i] != step:  # a row of its own
        steps = np.insert(steps, i, step)
        columns = {k: np.insert(c, i, np.nan) for k, c in columns.items()}
    out = dict(columns)
    for key, value in missing.items():
        col = np.full(steps.size, np.nan)
        col[i] = value
        out[key] = col
    return steps, out


#: The phase columns of an export (`phase_columns`).
PHASE_COLUMNS = ("phase", "phase_from", "phase_seen_at")


def phase_columns(steps: np.ndarray, dated: Sequence[tuple[str, int, int, str]]
                  ) -> dict[str, list]:
    """Each step's phase as the story reads it (`PhaseView.dated`): the latest phase that
    began at or before the step, where it began and when it was first said."""
    starts = np.array([d[1] for d in dated], dtype=np.int64)
    at = np.searchsorted(starts, steps, side="right") - 1 if dated else np.full(len(steps), -1)
    out: dict[str, list] = {name: [] for name in PHASE_COLUMNS}
    for i in at.tolist():
        d = dated[i] if i >= 0 else None
        out["phase"].append(d[0] if d else None)
        out["phase_from"].append(d[1] if d else None)
        out["phase_seen_at"].append(d[2] if d else None)
    return out


def select(columns: dict[str, np.ndarray], wanted: Sequence[str] | None,
           extra: Sequence[str] = ()) -> list[str]:
    """Column order: the dashboard's, then `extra`; `wanted` picks and orders (unknown
    names raise KeyError)."""
    if wanted:
        missing = [w for w in wanted if w not in columns and w not in extra]
        if missing:
            raise KeyError(", ".join(missing))
        return list(wanted)
    return sorted(columns, key=mn.display_order) + list(extra)


def _cell(col, i: int):
    """A column's value at row i, or None where the step has none: a float of a metric's
    column, a label or a step of a phase column (a list)."""
    v = col[i]
    if isinstance(col, list):
        return v
    return None if math.isnan(v) else float(v)


def health_by_step(steps: np.ndarray, flags: Sequence[HealthFlag]) -> list[str | None]:
    """Each step's health flags standing (`from_step <= step`), worst first, joined by
    commas (None where none stands: an empty CSV cell, no JSONL key): the cell changes only
    where a flag's trouble began."""
    starts = sorted({f.from_step for f in flags})
    cells = [None] + [",".join(f.flag for f in standing(flags, s)) for s in starts]
    at = np.searchsorted(np.asarray(starts, dtype=np.int64), steps, side="right")
    return [cells[i] for i in at.tolist()]


def write_jsonl(out: TextIO, steps: np.ndarray, columns: dict[str, np.ndarray | list],
                names: Sequence[str]) -> int:
    cols = [columns[n] for n in names]
    buf = io.StringIO()
    for i, step in enumerate(steps.tolist()):
        row: dict[str, float | int | str] = {"step": step}
        for name, col in zip(names, cols):
            v = _cell(col, i)
            if v is not None:
                row[name] = v
        buf.write(orjson.dumps(row).decode())
        buf.write("\n")
        if buf.tell() > 1 << 20:
            out.write(buf.getvalue())
            buf = io.StringIO()
    out.write(buf.getvalue())
    return int(steps.size)


def write_csv(out: TextIO, steps: np.ndarray, columns: dict[str, np.ndarray | list],
              names: Sequence[str]) -> int:
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["step", *names])
    cols = [columns[n] for n in names]
    for i, step in enumerate(steps.tolist()):
        cells = (_cell(c, i) for c in cols)
        w.writerow([step, *("" if v is None else repr(v) if isinstance(v, float) else v
                            for v in cells)])
    return int(steps.size)
