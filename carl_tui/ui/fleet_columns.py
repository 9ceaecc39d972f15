"""The fleet table's columns: what each shows of a `FleetRow`, how it sorts, which give way
first on a narrow terminal, and how a run's rows become cells.

Plain data and functions (Rich text, no widget): the screen (`screens/fleet_table.py`) lays
them out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.text import Text

from carl_tui.store.fleet import FleetRow
from carl_tui.store.fleet_filter import as_number, value_of
from carl_tui.ui.format import DASH, PROVISIONAL, STATE_COLORS, age_text, value_text

SPARKS = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 10
CONFIG_PRIORITY = 5


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    priority: int  # 0: always shown; the highest give way first on a narrow terminal
    cell: Callable[[FleetRow, float, Mapping[str, str]], str | Text]  # (row, now, colors)
    sort: Callable[[FleetRow], Any]  # the value sorted on (None sorts last)
    width: int = 12  # the most it takes

    def sort_key(self, row: FleetRow) -> tuple:
        return sort_value(self.sort(row))


def sort_value(v: Any) -> tuple:
    """Numbers by value, text by text, none last (in either direction)."""
    if v is None:
        return (1, 0, 0.0, "")
    n = as_number(v) if not isinstance(v, str) else None
    if n is not None:
        return (0, 0, n, "")
    return (0, 1, 0.0, str(v).lower())


def sparkline(values: Sequence[float], width: int = SPARK_WIDTH) -> str:
    """`values` resampled to `width` unicode blocks, low to high."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return ""
    if len(vals) > width:
        vals = [vals[round(i * (len(vals) - 1) / (width - 1))] for i in range(width)]
    lo, hi = min(vals), max(vals)
    span = hi - lo
    top = len(SPARKS) - 1
    return "".join(SPARKS[round((v - lo) / span * top) if span else top // 2] for v in vals)


def _num(v: Any, fmt: str = "{}") -> str:
    return DASH if v is None else fmt.format(v)


def _state(row: FleetRow, _now: float, colors: Mapping[str, str]) -> Text:
    color = colors.get(STATE_COLORS.get(row.state, ""), "")
    return Text(row.state, style=f"bold {color}".strip(), justify="left")


def _phase(row: FleetRow, *_: Any) -> str | Text:
    if not row.phase:
        # a coarse preview of its history too thin to tell a phase: it comes once read
        return Text("reading history", style="dim italic") if row.provisional else DASH
    text = f"{row.phase} · {row.stage}" if row.stage else row.phase
    return Text(f"{PROVISIONAL} {text}", style="dim") if row.provisional else text


def _value(get: Callable[[FleetRow], float | None], *, newest: bool = False):
    """A cell of a number read from the run's history: the coarse preview's while the
    history is read (a big project's preview can hold a value or two of a run, not its
    newest), marked so and dim; `newest`: a newest value (the step, the last task value,
    the loss), exact where the preview holds the run's newest rows."""
    def cell(row: FleetRow, *_: Any) -> str | Text:
        v = get(row)
        if v is None:
            return DASH
        text = str(v) if isinstance(v, int) else value_text(v)
        if row.provisional and not (newest and row.newest_read):
            return Text(PROVISIONAL + text, style="dim")
        return text
    return cell


def _trend(row: FleetRow, *_: Any) -> str | Text:
    """The task metric across the run; dim while it is the preview's (a sample of the
    run, or only its newest rows)."""
    spark = sparkline(row.task_trend)
    return Text(spark, style="dim") if row.provisional and spark else spark


#: The most a value's cell takes: `value_text`'s longest, a negative value in scientific
#: notation, marked as the preview's ("≈-2.980e-05"); a column is as wide as its longest
#: cell up to this (a cut number reads as another number).
VALUE_WIDTH = 11

BASE_COLUMNS: tuple[Column, ...] = (
    Column("name", "run", 0, lambda r, *_: r.run.label, lambda r: r.run.label, 28),
    Column("source", "source", 2, lambda r, *_: r.source, lambda r: r.source, 12),
    Column("state", "state", 0, _state, lambda r: r.state, 8),
    Column("step", "step", 1, _value(lambda r: r.last_step, newest=True),
           lambda r: r.last_step, 9),
    Column("updated", "updated", 1, lambda r, now, _c: age_text(r.updated_at, now),
           lambda r: -(r.updated_at or 0.0) if r.updated_at else None, 9),
    Column("phase", "phase", 0, _phase, lambda r: r.phase, 28),
    Column("gate", "gate", 2, _value(lambda r: r.gate_step),
           lambda r: r.gate_step, 9),
    Column("task", "task", 1, _value(lambda r: r.task_last, newest=True),
           lambda r: r.task_last, VALUE_WIDTH),
    Column("best", "best", 2, _value(lambda r: r.task_best),
           lambda r: r.task_best, VALUE_WIDTH),
    Column("trend", "trend", 2, _trend, lambda r: r.task_last, SPARK_WIDTH),
    Column("loss", "loss", 3, _value(lambda r: r.loss, newest=True), lambda r: r.loss,
           VALUE_WIDTH),
    Column("gpu", "gpu", 4, lambda r, *_: _num(r.gpu_percent, "{:.0f}%"),
           lambda r: r.gpu_percent, 5),
    Column("flavor", "flavor", 4, lambda r, *_: r.flavor or DASH, lambda r: r.flavor, 12),
    Column("cost", "cost", 4, lambda r, *_: _num(r.cost_usd, "${:.2f}"),
           lambda r: r.cost_usd, 8),
)


def config_text(v: Any) -> str:
    if v is None:
        return DASH
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def config_column(key: str) -> Column:
    """The column of one config key that differs between the runs."""
    return Column(f"config:{key}", key, CONFIG_PRIORITY,
                  lambda r, *_: config_text(r.config.get(key)),
                  lambda r: value_of(r, key) if key in r.config else None, 14)


def columns_for(config_keys: Sequence[str]) -> list[Column]:
    return [*BASE_COLUMNS, *(config_column(k) for k in config_keys)]


def fit_columns(columns: Sequence[Column], rows: Sequence[FleetRow], width: int,
                now: float) -> list[Column]:
    """The columns that fit `width` cells, in their order: priority 0 always, then each
    priority in turn until one does not fit (at 80 wide, config, GPU, cost, flavor and loss
    give way first); a column no run has a value for gives way before any other."""
    widths = {c.key: column_width(c, rows, now) for c in columns}
    empty = {c.key for c in columns
             if c.priority and all(plain(c.cell(r, now, {})) in ("", DASH) for r in rows)}
    kept: set[str] = set()
    used = 3 + 2  # the selection mark, and the scrollbar
    ranked = sorted(columns, key=lambda c: (c.key in empty, c.priority))
    for c in ranked:
        need = widths[c.key] + 2  # a cell's padding
        if c.priority and used + need > width:
            break
        kept.add(c.key)
        used += need
    return [c for c in columns if c.key in kept]


def column_width(column: Column, rows: Sequence[FleetRow], now: float) -> int:
    longest = max((len(plain(column.cell(r, now, {}))) for r in rows[:200]), default=0)
    return min(max(len(column.label), longest), column.width)


def plain(cell: str | Text) -> str:
    return cell.plain if isinstance(cell, Text) else cell


def group_label(row: FleetRow, key: str) -> str:
    return f"{key}={config_text(row.config.get(key))}" if key in row.config else f"{key}: none"


def arrange(rows: Sequence[FleetRow], sort: Column | None, reverse: bool,
            group: str | None) -> list[tuple[FleetRow, str]]:
    """The rows in the order shown, each with its group's label on the first row of its
    group ("" elsewhere, and everywhere when not grouped). Sorted by `sort` (the source's
    order when None), runs without a value last either way; grouped by config key `group`
    first (groups in their value's order, the run count in each label)."""
    ordered = list(rows)
    if sort is not None:
        present = [r for r in ordered if sort.sort(r) is not None]
        absent = [r for r in ordered if sort.sort(r) is None]
        present.sort(key=sort.sort_key, reverse=reverse)
        ordered = present + absent
    if group is None:
        return [(r, "") for r in ordered]
    counts: dict[str, int] = {}
    for r in ordered:
        counts[group_label(r, group)] = counts.get(group_label(r, group), 0) + 1
    position = {r.run.key: i for i, r in enumerate(ordered)}
    ordered.sort(key=lambda r: (sort_value(r.config.get(group)), position[r.run.key]))
    out, last = [], None
    for r in ordered:
        label = group_label(r, group)
        out.append((r, f"{label} ({counts[label]})" if label != last else ""))
        last = label
    return out
