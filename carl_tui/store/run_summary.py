"""The run's end-of-training summary, kept apart from its curves.

The Trainer logs, once, when training ends, `train_runtime`,
`train_samples_per_second`, `train_steps_per_second`, `total_flos` and
`train_loss` (the average loss over the run), at the last step. A source that
reads them as a row of metrics (TensorBoard, Trackio, W&B, a JSONL stream)
hands them to the store like any other row; stored as points, `train_loss` would
sit at the last step beside (or, named `loss`, over) the loss logged there. So
the store takes them out of the rows: the run's meta keeps them under
`train_summary` ({name: value}, the newest wins; with the final `epoch` when the
row has it, as a Trainer log's end line does) and `train_summary_step`.

`train_loss` is taken only from a row that holds one of the other end-of-training
keys (a run that logs a per-step `train_loss` of its own keeps its curve).

A source can also hand the summary over as meta (`SUMMARY`, `SUMMARY_STEP`): a JSONL
`meta` line can hold anything there, so `meta_update` keeps only finite numbers
(`valid_number`, as for any metric value), at an integer step, and counts what it
left out.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from carl_tui.metric_names import END_OF_TRAINING_KEYS, RUN_SUMMARY_KEYS, valid_number

SUMMARY = "train_summary"
SUMMARY_STEP = "train_summary_step"


def take_run_summary(
    steps: np.ndarray, columns: dict[str, np.ndarray]
) -> tuple[int, dict[str, float]] | None:
    """Remove the end-of-training values from `columns` (in place); (their step, the
    values of the last row holding them), or None when the rows hold none."""
    ends = [columns[k] for k in END_OF_TRAINING_KEYS if k in columns]
    if not ends:
        return None
    rows = np.flatnonzero(np.any(~np.isnan(np.vstack(ends)), axis=0))
    if rows.size == 0:
        return None
    values: dict[str, float] = {}
    for key in RUN_SUMMARY_KEYS:
        col = columns.get(key)
        if col is None:
            continue
        taken = col[rows]
        if key in END_OF_TRAINING_KEYS:
            del columns[key]
        else:  # train_loss: only at the rows that end a training
            rest = col.copy()
            rest[rows] = np.nan
            if np.isnan(rest).all():
                del columns[key]
            else:
                columns[key] = rest
        good = taken[~np.isnan(taken)]
        if good.size:
            values[key] = float(good[-1])
    epoch = columns.get("epoch")  # the final epoch, as a Trainer log's end line says it
    if epoch is not None and not np.isnan(epoch[rows[-1]]):
        values["epoch"] = float(epoch[rows[-1]])  # (a copy: the epoch curve keeps it)
    return int(steps[rows[-1]]), values


def merged(meta: Mapping, step: int | None, values: Mapping[str, float]) -> dict:
    """The meta entries that add `values` (logged at `step`) to the run's summary."""
    out: dict = {SUMMARY: {**(meta.get(SUMMARY) or {}), **values}}
    if step is not None:
        out[SUMMARY_STEP] = step
    return out


def meta_update(current: Mapping, meta: Mapping) -> tuple[dict, int]:
    """The entries of `meta` to add to a run's meta `current`, its summary (SUMMARY,
    SUMMARY_STEP) merged into the run's; and how many of those were left out (a
    summary that is not {name: number}, a value not a finite number, a step not an
    integer)."""
    out = {k: v for k, v in meta.items() if k not in (SUMMARY, SUMMARY_STEP)}
    raw, step = meta.get(SUMMARY), meta.get(SUMMARY_STEP)
    left_out = 0
    if step is not None:
        v = valid_number(step)
        step = int(v) if v is not None and v.is_integer() else None
        left_out += step is None
    if isinstance(raw, Mapping):
        values = {k: v for k, v in ((k, valid_number(v)) for k, v in raw.items())
                  if v is not None}
        left_out += len(raw) - len(values)
        out.update(merged(current, step, values))
    else:
        left_out += raw is not None
        if step is not None:
            out[SUMMARY_STEP] = step
    return out, left_out
