"""Metric rows (parsed JSON objects) to ScalarBatch columns, fast.

Shared by the JSONL, replay, local Trackio and W&B sources. A row is a dict
such as `{"step": 12, "time": 1732350000.1, "loss": 0.4, "train/entropy": 1.2}`.

The skipped-input policy (one rule for every source that builds rows here):

- Step: the first of `step_keys` present in the row decides (`step`, then
  `global_step`, `train/global_step`, `_step`); the other step keys of the row
  are ignored. Its value must be an integer in [0, 2**62): 12 or 12.0. Any
  other value (NaN, true, "nine", 10.5, null, a list or object, >= 2**62)
  makes the whole row skipped as "invalid step", a negative integer as
  "negative step": one count per row, and no point of it is kept. A step is
  never invented for a row whose step is wrong (it could collide with a real
  one).
- A row with no step key takes `default_steps[i]` (the caller's own step,
  e.g. Trackio's; a negative entry means "none"), or else the previous kept
  row's step + 1; the first row of a stream without a step gets step 0
  (`prev_step` = -1). A stream that never logs a step thus gets 0, 1, 2, ...
  with no collision. Mixed with stepped rows it can collide: after
  `{"step": 5}`, a step-less row gets 6, and a later `{"step": 6}` is a second
  point at 6 (the store keeps both, in arrival order). Writers that log steps
  should log them on every row.
- `time_key` (epoch seconds) is not a metric; the newest valid one becomes the
  batch's wall time.
- Every other metric key (see `metric_names.is_metric_key`) is canonicalised
  (`train/entropy` -> `entropy`) and becomes a float64 column with NaN where
  the row did not log it. Keys that are not metrics (`timestamp`, `_runtime`,
  ...) are ignored.
- A metric name (after canonicalising) must be non-empty and free of control
  characters; the values of any other key are skipped as "invalid metric
  name" (one per value).
- A metric (or time) value that is not a finite number is NaN in its column
  and skipped, one count per value: "value not a finite number" for NaN and
  infinities (also the strings "NaN", "Infinity", "-Infinity" that Trackio
  writes), "value not a number" for strings, booleans, null, lists, objects
  and integers too large for a float. A metric whose every value was skipped
  adds no column.
- A tracker's media, table or histogram (an object with a `"_type"`, such as
  Trackio's `{"_type": "trackio.image", ...}`) is valid data the dashboard does
  not plot: counted apart (`unused_input.note("image")`), never as skipped.

Every skip is counted in the `unused_input` given (an `UnusedInput`, by reason with
the first example) and in `RowColumns.unused_input` / `RowColumns.skipped`; kept
rows + rows skipped = rows given. `RowColumns.kept` lists which rows made it
(None: all of them).

Speed: rows that share one key set (the usual case) are converted with one
C-level pass per stage (itemgetter, a type census, `np.fromiter`) instead of a
Python loop per value; only rows with odd values take the per-value path.
(A pyarrow JSON reader was tried for large blocks: about 12% faster on a
million lines, but 65 MB more process memory; the dashboard keeps to one path.)
"""

from __future__ import annotations

import math
import re
import reprlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import chain
from operator import itemgetter
from typing import Any

import numpy as np

from carl_tui.metric_names import STEP_KEYS, canonical, is_metric_key, valid_number
from carl_tui.redact import redact
from carl_tui.sources.unused_input import UnusedInput

TIME_KEY = "time"


def iso_to_epoch(ts: Any) -> float | None:
    """An ISO-8601 timestamp (as Trackio stores them) in epoch seconds, else None."""
    if not isinstance(ts, str):
        return None
    try:
        return datetime.fromisoformat(ts).timestamp()
    except ValueError:
        return None


INVALID_STEP = "invalid step"
NEGATIVE_STEP = "negative step"
NOT_FINITE = "value not a finite number"
NOT_NUMBER = "value not a number"
INVALID_NAME = "invalid metric name"

# Control characters (C0 but tab and newline, DEL, C1): an escape sequence in a
# name or a log line must never reach the terminal.
_CONTROLS = {c: "\ufffd" for c in (*range(0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))}
_BAD_NAME = re.compile("[\x00-\x1f\x7f-\x9f]")
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 100


def clean_text(text: str) -> str:
    """`text` with control characters (but tab and newline) replaced by U+FFFD."""
    return text.translate(_CONTROLS) if _BAD_NAME.search(text) else text


def log_lines(text: str) -> list[str]:
    """The lines of a logged text, split at newlines only: U+2028, U+2029 and the other
    breaks `str.splitlines` knows stay inside their line, as the writer meant them. No
    line at all reads as one empty line; a final newline ends the last line."""
    lines = text.split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return lines


def short_repr(value: Any) -> str:
    """A bounded, printable repr for skip examples (deeply nested values included)."""
    try:
        if isinstance(value, str):
            value = redact(value)  # mask a secret before the repr cuts it short
        return clean_text(_REPR.repr(value))
    except Exception:  # noqa: BLE001 - an example must never break counting
        return f"<{type(value).__name__}>"


def valid_name(key: str) -> bool:
    """A metric name must be non-empty and free of control characters."""
    return bool(key) and not _BAD_NAME.search(key)

_NUMBER_TYPES = frozenset({float, int})
_MAX_STEP = float(2**62)
_MAX_STEP_INT = 2**62
_EXACT = float(2**53)  # integers at or beyond this are not all exact in a float64
_NONFINITE_STRINGS = frozenset({"NaN", "nan", "Infinity", "-Infinity", "inf", "-inf"})
# Codes of a value in a kinds matrix: 0 fine or absent, then the skip reasons.
_OK, _NOT_FINITE, _NOT_NUMBER, _MEDIA = 0, 1, 2, 3
_VALUE_REASONS = {_NOT_FINITE: NOT_FINITE, _NOT_NUMBER: NOT_NUMBER}


@dataclass
class RowColumns:
    """The columns of a block of rows, ready for a ScalarBatch."""

    steps: np.ndarray  # int64, one per kept row
    columns: dict[str, np.ndarray] = field(default_factory=dict)  # float64, NaN = absent
    last_time: float | None = None
    skipped: int = 0  # rows and values skipped (= unused_input.total)
    kept: np.ndarray | None = None  # indices of the given rows that are here; None: all
    unused_input: UnusedInput = field(default_factory=UnusedInput)  # this block's skips by reason
    times: np.ndarray | None = None  # each kept row's time (NaN: none), when time_key is read
    nonfinite: tuple[tuple[str, int], ...] = ()  # (metric, step) logged as NaN or infinite

    def __len__(self) -> int:
        return int(self.steps.shape[0])


@dataclass
class _Entry:
    """One raw key of one group of rows: its float column and where it came from."""

    key: str
    col: np.ndarray  # float64, NaN = invalid
    idx: np.ndarray | None  # row of each group position; None: the group is every row
    kinds: np.ndarray | None  # int8 codes per group position; None: every value fine
    values: list  # the group's value tuples (for examples)
    j: int  # this key's position in those tuples


def _getter(keys: tuple[str, ...]):
    if len(keys) == 1:
        key = keys[0]
        return lambda d: (d[key],)
    return itemgetter(*keys)


def _group_rows(rows: Sequence[dict]) -> list[tuple[tuple[str, ...], np.ndarray | None, list]]:
    """(keys, row indices or None for all rows, value tuples) per distinct key set."""
    n = len(rows)
    keys0 = tuple(rows[0])
    if keys0 and sum(map(len, rows)) == n * len(keys0):
        try:
            # Every row has exactly len(keys0) keys and contains all of keys0:
            # they all have the same key set (in any order).
            return [(keys0, None, list(map(_getter(keys0), rows)))]
        except KeyError:
            pass
    by_keys: dict[tuple[str, ...], list[int]] = {}
    for i, d in enumerate(rows):
        by_keys.setdefault(tuple(d), []).append(i)
    groups = []
    for keys, idx in by_keys.items():
        if not keys:
            groups.append((keys, np.asarray(idx, dtype=np.intp), [()] * len(idx)))
            continue
        get = _getter(keys)
        groups.append((keys, np.asarray(idx, dtype=np.intp), [get(rows[i]) for i in idx]))
    return groups


def _to_float(value: Any) -> float | None:
    try:
        return valid_number(value)
    except OverflowError:  # an integer too large for a float
        return None


def _kind(value: Any) -> int:
    """Why `value` is not a finite number."""
    t = type(value)
    if t is float or (t is str and value in _NONFINITE_STRINGS):
        return _NOT_FINITE
    if t is dict and isinstance(value.get("_type"), str):
        return _MEDIA  # a tracker's media, table or histogram: valid, not plotted
    return _NOT_NUMBER


def media_kind(value: dict) -> str:
    """`{"_type": "trackio.image", ...}` -> "image"; W&B's "histogram" stays "histogram"."""
    kind = str(value.get("_type", "media"))
    return kind.rsplit(".", 1)[-1].replace("_", " ") or "media"


def _matrix(values: list[tuple], width: int) -> tuple[np.ndarray, np.ndarray | None]:
    """float64 matrix [rows, width] of the values, NaN where invalid; and an
    int8 matrix of why each value is invalid (None when none is)."""
    m = len(values)
    if set(map(type, chain.from_iterable(values))) <= _NUMBER_TYPES:
        try:
            mat = np.fromiter(
                chain.from_iterable(values), dtype=np.float64, count=m * width
            ).reshape(m, width)
        except OverflowError:
            mat = None
        if mat is not None:
            bad = ~np.isfinite(mat)
            if not bad.any():
                return mat, None
            mat[bad] = np.nan
            return mat, (bad * _NOT_FINITE).astype(np.int8)
    flat = list(chain.from_iterable(values))
    converted = list(map(_to_float, flat))
    mat = np.fromiter(
        (math.nan if v is None else v for v in converted), dtype=np.float64, count=m * width
    ).reshape(m, width)
    bad_at = [i for i, v in enumerate(converted) if v is None]
    if not bad_at:
        return mat, None
    kinds = np.zeros(m * width, dtype=np.int8)
    kinds[bad_at] = [_kind(flat[i]) for i in bad_at]
    return mat, kinds.reshape(m, width)


def build_columns(
    rows: Sequence[dict],
    *,
    default_steps: np.ndarray | None = None,
    prev_step: int = -1,
    step_keys: Sequence[str] = STEP_KEYS,
    time_key: str | None = TIME_KEY,
    unused_input: UnusedInput | None = None,
) -> RowColumns:
    """Columns of `rows` (dicts). See the module docstring for the rules; every
    skip is also counted in `unused_input` when one is given."""
    if not rows:
        return RowColumns(steps=np.empty(0, dtype=np.int64))
    entries: list[_Entry] = []
    for keys, idx, values in _group_rows(rows):
        if not keys:
            continue
        mat, kinds = _matrix(values, len(keys))
        for j, key in enumerate(keys):
            k = None if kinds is None else kinds[:, j]
            if k is not None and not k.any():
                k = None
            entries.append(_Entry(key, mat[:, j], idx, k, values, j))
    out = _assemble(len(rows), entries, default_steps, prev_step, step_keys, time_key)
    if unused_input is not None:
        unused_input.merge(out.unused_input)
    return out


def _example(e: _Entry, pos: int) -> str:
    return f"{clean_text(e.key)}={short_repr(e.values[pos][e.j])}"


def step_of(value: Any) -> int | str:
    """A step as an int, or the skip reason when `value` is not a valid step."""
    t = type(value)
    if t is int:
        number = value
    elif t is float and math.isfinite(value) and value == int(value):
        number = int(value)
    else:
        return INVALID_STEP
    if abs(number) >= _MAX_STEP_INT:
        return INVALID_STEP
    return NEGATIVE_STEP if number < 0 else number


def _step_codes(e: _Entry, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int64 steps, 0 ok / 1 invalid / 2 negative) of `e` at group positions `pos`."""
    v = e.col[pos]
    with np.errstate(invalid="ignore"):
        exact = not (np.abs(v) >= _EXACT).any()  # NaN compares False
    if exact:  # every integer here is exact in a float64
        with np.errstate(invalid="ignore"):
            integral = (v == np.floor(v)) & (np.abs(v) < _MAX_STEP)
        negative = integral & (v < 0)
        ok = integral & ~negative
        code = np.where(ok, 0, np.where(negative, 2, 1)).astype(np.int8)
        return np.where(ok, v, 0).astype(np.int64), code
    # Large integers: read them from the values themselves, not their floats.
    got = [step_of(e.values[p][e.j]) for p in pos.tolist()]
    code = np.fromiter(
        (0 if type(g) is int else 2 if g == NEGATIVE_STEP else 1 for g in got),
        dtype=np.int8, count=len(got),
    )
    steps = np.fromiter((g if type(g) is int else 0 for g in got), dtype=np.int64, count=len(got))
    return steps, code


def _steps(
    n: int, entries: list[_Entry], step_keys: Sequence[str], local: UnusedInput
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(int64 step per row (0 where none), row has a step key, row is kept)."""
    rank_of = {k: r for r, k in enumerate(step_keys)}
    steps = np.zeros(n, dtype=np.int64)
    rank = np.full(n, len(step_keys), dtype=np.int16)
    bad = np.zeros(n, dtype=np.int8)  # 1 invalid step, 2 negative step
    ordered = sorted((e for e in entries if e.key in rank_of), key=lambda e: rank_of[e.key])
    for e in ordered:
        r = rank_of[e.key]
        rows = np.arange(n) if e.idx is None else e.idx
        take = rank[rows] > r  # the first step key present decides
        if not take.any():
            continue
        pos = np.flatnonzero(take)
        sel = rows[pos]
        values, code = _step_codes(e, pos)
        rank[sel] = r
        steps[sel] = values
        bad[sel] = code
        for c, reason in ((1, INVALID_STEP), (2, NEGATIVE_STEP)):
            hit = np.flatnonzero(code == c)
            if hit.size:
                local.skip(reason, _example(e, int(pos[hit[0]])), int(hit.size))
    has_key = rank < len(step_keys)
    return steps, has_key, bad == 0


def _assemble(
    n: int,
    entries: list[_Entry],
    default_steps: np.ndarray | None,
    prev_step: int,
    step_keys: Sequence[str],
    time_key: str | None,
) -> RowColumns:
    """RowColumns from the entries (one per raw key and group of rows)."""
    local = UnusedInput()
    steps, has_key, kept = _steps(n, entries, step_keys, local)
    all_kept = bool(kept.all())
    step_set = set(step_keys)
    columns, times, metrics = _metric_columns(n, entries, kept, step_set, time_key, local)
    known = has_key
    if default_steps is not None:
        use = ~has_key & (default_steps >= 0)
        steps = np.where(use, default_steps, steps)
        known = has_key | use
    kept_idx = None
    if not all_kept:
        kept_idx = np.flatnonzero(kept)
        steps, known = steps[kept], known[kept]
        columns = {k: v[kept] for k, v in columns.items()}
        if times is not None:
            times = times[kept]
    resolved = _resolve_steps(steps, known, prev_step)
    nonfinite = _nonfinite(metrics, n, kept_idx, resolved)
    if local.total:  # a metric whose every value was skipped adds no series
        columns = {k: v for k, v in columns.items() if not np.isnan(v).all()}
    last_time = None
    if times is not None:
        ok = times[~np.isnan(times)]
        if ok.size:
            last_time = float(ok[-1])
    return RowColumns(steps=resolved, columns=columns, last_time=last_time,
                      skipped=local.total, kept=kept_idx, unused_input=local, times=times,
                      nonfinite=nonfinite)


def _metric_columns(
    n: int,
    entries: list[_Entry],
    kept: np.ndarray,
    step_set: set[str],
    time_key: str | None,
    local: UnusedInput,
) -> tuple[dict[str, np.ndarray], np.ndarray | None, list[tuple[str, _Entry]]]:
    """(a float64 column per canonical metric name, each row's time or None when
    `time_key` is None, the metric entries kept with their names), over all n rows;
    the invalid names and values of the kept rows counted in `local`."""
    all_kept = bool(kept.all())
    times = np.full(n, np.nan) if time_key is not None else None
    columns: dict[str, np.ndarray] = {}
    metrics: list[tuple[str, _Entry]] = []
    for e in entries:
        if e.key in step_set:
            continue
        is_time = e.key == time_key
        if not is_time and not is_metric_key(e.key):
            continue
        name = e.key if is_time else canonical(e.key)
        if not is_time and not valid_name(name):
            present = int(kept.sum()) if e.idx is None else int(kept[e.idx].sum())
            local.skip(INVALID_NAME, short_repr(e.key), present)
            continue
        if e.kinds is not None:
            _count_values(e, kept, all_kept, local)
        if is_time:
            _assign(times, e.col, e.idx)
            continue
        metrics.append((name, e))
        out = columns.get(name)
        if out is None:
            if e.idx is None:
                columns[name] = np.ascontiguousarray(e.col)
                continue
            out = columns[name] = np.full(n, np.nan)
        _assign(out, e.col, e.idx)
    return columns, times, metrics


MAX_NONFINITE = 100  # per block: enough to raise an alert and say where


def _nonfinite(metrics: list[tuple[str, _Entry]], n: int, kept_idx: np.ndarray | None,
               resolved: np.ndarray) -> tuple[tuple[str, int], ...]:
    """(metric, step) of the values logged as NaN or infinite, in the kept rows, of the
    metrics `_metric_columns` kept."""
    step_of_row = np.full(n, -1, dtype=np.int64)
    step_of_row[kept_idx if kept_idx is not None else slice(None)] = resolved
    out: list[tuple[str, int]] = []
    for name, e in metrics:
        if e.kinds is None:
            continue
        pos = np.flatnonzero(e.kinds == _NOT_FINITE)
        rows = pos if e.idx is None else e.idx[pos]
        for step in step_of_row[rows].tolist():
            if step >= 0 and len(out) < MAX_NONFINITE:
                out.append((name, int(step)))
    return tuple(out)


def _count_values(e: _Entry, kept: np.ndarray, all_kept: bool, local: UnusedInput) -> None:
    """Count the invalid values of `e` in the kept rows, by reason."""
    kinds = e.kinds
    assert kinds is not None
    if not all_kept:
        kinds = np.where(kept if e.idx is None else kept[e.idx], kinds, _OK)
    for code, reason in _VALUE_REASONS.items():
        hit = np.flatnonzero(kinds == code)
        if hit.size:
            local.skip(reason, _example(e, int(hit[0])), int(hit.size))
    for pos in np.flatnonzero(kinds == _MEDIA).tolist():
        local.note(media_kind(e.values[pos][e.j]))


def _assign(out: np.ndarray, col: np.ndarray, idx: np.ndarray | None) -> None:
    """Write the valid values of `col` into `out` (at `idx`); later keys win."""
    valid = ~np.isnan(col)
    if idx is None:
        out[valid] = col[valid]
    else:
        out[idx[valid]] = col[valid]


def _resolve_steps(steps: np.ndarray, known: np.ndarray, prev_step: int) -> np.ndarray:
    """int64 steps: the known ones, else the previous step + 1 (exact integers)."""
    if known.all():
        return steps.astype(np.int64, copy=False)
    n = steps.shape[0]
    idx = np.arange(n)
    last_known = np.maximum.accumulate(np.where(known, idx, -1))
    base = np.where(last_known >= 0, steps[np.maximum(last_known, 0)], np.int64(prev_step))
    offset = np.where(last_known >= 0, idx - last_known, idx + 1)
    return np.where(known, steps, base + offset).astype(np.int64, copy=False)
