"""The fleet table's columns on the screen: how each of the fleet's one column table
(`store/fleet_columns.py`: what each reads of a `FleetRow`, how it sorts, which give way
first on a narrow terminal) looks, and how a run's rows become cells.

Plain data and functions (Rich text, no widget): the screen (`screens/fleet_table.py`) lays
them out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from rich.text import Text

from carl_tui.store import fleet_columns
from carl_tui.store.fleet import FleetRow
from carl_tui.store.fleet_columns import SPARK_WIDTH, VALUE_WIDTH, FleetColumn
from carl_tui.store.fleet_filter import as_number, value_of
from carl_tui.ui.format import DASH, PROVISIONAL, STATE_COLORS, age_text, value_text

SPARKS = "▁▂▃▄▅▆▇█"
# A health flag's colour by its severity (as on the phase panel); "ok" when none stands.
HEALTH_COLORS = {"error": "status-bad", "warning": "status-wait", "information": "status-done"}
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


def _health(row: FleetRow, _now: float, colors: Mapping[str, str]) -> str | Text:
    """The worst flag standing ("+2": two more stand), or "ok"."""
    if not row.health:
        return Text("ok", style=colors.get("status-good", ""), justify="left")
    more = f" +{len(row.health) - 1}" if len(row.health) > 1 else ""
    color = colors.get(HEALTH_COLORS.get(row.health_severity or "", "status-wait"), "")
    return Text(row.health[0] + more, style=f"bold {color}".strip(), justify="left")


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


def _task_named(row: FleetRow, now: float, colors: Mapping[str, str]) -> str | Text:
    """The task metric's last value, and which metric it is (`task_name`): for runs that
    do not all have the same one (a sweep of GRPO and SFT runs: reward 1.87 beside
    accuracy 0.9994)."""
    cell = _value(lambda r: r.task_last, newest=True)(row, now, colors)
    if not row.task_metric or row.task_last is None:
        return cell
    return Text.assemble(as_cell(cell), (f" {task_name(row.task_metric)}", "dim"))


def as_cell(cell: str | Text) -> Text:
    return cell if isinstance(cell, Text) else Text(cell)


def task_name(metric: str) -> str:
    """A task metric's short name: reward, accuracy, or its last part that names it
    (`rewards/reverse_reward/mean`: reverse_reward)."""
    if metric in TASK_NAMES:
        return TASK_NAMES[metric]
    parts = [p for p in metric.split("/") if p not in ("mean", "avg", "value", "")]
    return parts[-1] if parts else metric


TASK_NAMES = {"reward": "reward", "mean_token_accuracy": "accuracy",
              "eval_mean_token_accuracy": "eval accuracy"}

def _updated(row: FleetRow, now: float, _colors: Mapping[str, str]) -> str:
    return age_text(row.updated_at, now)


def _text(get: Callable[[FleetRow], Any]):
    return lambda row, *_: DASH if (v := get(row)) is None or v == "" else str(v)


#: How a cell looks where its value's text does not say enough, by column key; the rest:
#: numbers (aligned right) as measured, or in the column's `fmt`, and text as it is.
LOOKS = {"state": _state, "updated": _updated, "phase": _phase, "health": _health,
         "trend": _trend}


def _column(c: FleetColumn) -> Column:
    if c.key in LOOKS:
        cell = LOOKS[c.key]
    elif c.fmt is not None:
        cell = lambda r, *_: _num(c.value(r), c.fmt)
    elif c.align == "right":
        cell = _value(c.value, newest=c.newest)
    else:
        cell = _text(c.value)
    return Column(c.key, c.header, c.priority, cell, c.sort_on, c.width)


def base_columns() -> tuple[Column, ...]:
    """The screen's columns of the fleet's one column table (`store/fleet_columns.py`),
    left to right."""
    return _built(fleet_columns.COLUMNS)


@lru_cache(maxsize=4)
def _built(_table: tuple[FleetColumn, ...]) -> tuple[Column, ...]:
    return tuple(_column(c) for c in fleet_columns.on_screen())


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


def columns_for(config_keys: Sequence[str], rows: Sequence[FleetRow] = ()) -> list[Column]:
    """Every column there is for `rows`: the base ones, the task metric's named (its name
    in the header where every run has the same one, else in each cell), then one for each
    config key (`config_keys`: the runs' axes)."""
    base = base_columns()
    task = next(c for c in base if c.key == "task")
    metrics = {r.task_metric for r in rows if r.task_metric}
    if len(metrics) == 1:
        task = replace(task, label=task_name(next(iter(metrics))))
    elif metrics:
        task = replace(task, cell=_task_named, width=VALUE_WIDTH + 14)
    return [task if c.key == "task" else c for c in base] + [
        config_column(k) for k in config_keys]


def shown_columns(columns: Sequence[Column], rows: Sequence[FleetRow], now: float,
                  hidden: Collection[str] = ()) -> list[Column]:
    """The columns shown, in their order: those the user has not hidden (`hidden`: column
    keys, chosen with `c`; the run and its state always) and that some run has a value
    for. As many as there are: the table scrolls sideways (left/right), the run's name
    staying in place."""
    empty = {c.key for c in columns if rows and c.priority
             and all(plain(c.cell(r, now, {})) in ("", DASH) for r in rows)}
    return [c for c in columns
            if c.key in ALWAYS or (c.key not in hidden and c.key not in empty)]


ALWAYS = frozenset({"name", "state"})  # columns that cannot be hidden


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
