"""The fleet's columns, once: every reader of a `FleetRow` by column reads this table.

- the fleet screen (`ui/fleet_columns.py`): the columns with a `place`, left to right
  by it; `priority` says which give way first on a narrow terminal (0: always shown),
  `width` the most each takes; a column's key is what the user hides with `c` (kept in
  the settings), sorts and groups by;
- the filter (`fleet_filter.py`): the `filterable` columns' keys, read with `value`;
- `carl-tui fleet | cat` (`report/fleet_listing.py`): the columns with a `listed`
  header, in this table's order, as `text` gives them (numbers `align`ed right).

Adding a column is one entry here: it is shown, filtered on and listed where it says.
How a cell looks (colours, sparklines, the preview's marks) is the screen's, by key.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from carl_tui.store.fleet import FleetRow
from carl_tui.store.health import SEVERITY_RANK

#: The most a value's cell takes on the screen: `value_text`'s longest, a negative value
#: in scientific notation, marked as the preview's ("≈-2.980e-05"); a column is as wide
#: as its longest cell up to this (a cut number reads as another number).
VALUE_WIDTH = 11
SPARK_WIDTH = 10  # a sparkline's blocks


@dataclass(frozen=True)
class FleetColumn:
    """One column of the fleet: what it reads of a row and where it appears."""

    key: str  # the filter's key, the screen's (hidden, sorted on, kept in the settings)
    header: str  # the screen's
    value: Callable[[FleetRow], Any]  # what is filtered on (and sorted on, and shown)
    sort: Callable[[FleetRow], Any] | None = None  # sorted on, where not `value` (None last)
    align: Literal["left", "right"] = "left"  # the listing's
    fmt: str | None = None  # a number's text on the screen ("{:.0f}%"); None: as measured
    newest: bool = False  # a newest value: exact while a preview holds the run's newest rows
    place: int | None = None  # the screen's order, left to right; None: not on the screen
    priority: int = 0  # 0: always on the screen; the highest give way first when narrow
    width: int = 12  # the most it takes on the screen
    filterable: bool = True
    listed: str | None = None  # its header in `fleet | cat`; None: not listed
    text: Callable[[FleetRow, float], str] | None = None  # its listing text (row, now)

    def sort_on(self, row: FleetRow) -> Any:
        return (self.sort or self.value)(row)


def ago(seconds: float | None) -> str:
    """"12s ago", "3m ago", "5h ago", "2d ago"; "-" when unknown."""
    if seconds is None:
        return "-"
    s = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{int(s // size)}{unit} ago"
    return f"{int(s)}s ago"


def health_rank(row: FleetRow) -> str:
    """Worst first: an error, a warning, an audit, then "ok"; by name within each."""
    rank = SEVERITY_RANK.get(row.health_severity or "", len(SEVERITY_RANK))
    return f"{rank} {row.worst_flag}"


def _updated(row: FleetRow, now: float) -> str:
    return ago(None if row.updated_at is None else now - row.updated_at)


def _phase_at(row: FleetRow, _now: float) -> str:
    return "-" if row.phase is None else f"{row.phase}@{row.phase_from}"


# In the listing's order (and the filter's, in its list of keys). On the screen, by
# `place`: what tells a run's state and progress first (an 80-column terminal shows run,
# state, step, updated, the task metric and the phase), the rest to the right, reached
# by scrolling sideways.
COLUMNS: tuple[FleetColumn, ...] = (
    FleetColumn("name", "run", lambda r: r.run.label, place=0, width=28, listed="run"),
    FleetColumn("run", "id", lambda r: r.run.run_id),
    FleetColumn("project", "project", lambda r: r.run.project),
    FleetColumn("source", "source", lambda r: r.source, place=11, priority=2,
                listed="source"),
    FleetColumn("state", "state", lambda r: r.state, place=1, width=8, listed="state",
                text=lambda r, _now: r.state_text),
    FleetColumn("step", "step", lambda r: r.last_step, align="right", newest=True,
                place=2, priority=1, width=9, listed="step"),
    FleetColumn("first_step", "first step", lambda r: r.first_step, align="right"),
    FleetColumn("updated", "updated", lambda r: r.updated_at,
                lambda r: -(r.updated_at or 0.0) if r.updated_at else None, place=3,
                priority=1, width=9, filterable=False, listed="updated", text=_updated),
    FleetColumn("phase", "phase", lambda r: r.phase, place=5, width=28, listed="phase",
                text=_phase_at),
    FleetColumn("stage", "stage", lambda r: r.stage),
    FleetColumn("gate", "gate", lambda r: r.gate_step, align="right", place=7, priority=2,
                width=9, listed="gate"),
    FleetColumn("task_metric", "task metric", lambda r: r.task_metric, filterable=False,
                listed="task"),
    FleetColumn("task", "task", lambda r: r.task_last, align="right", newest=True,
                place=4, priority=1, width=VALUE_WIDTH, listed="last"),
    FleetColumn("best", "best", lambda r: r.task_best, align="right", place=8, priority=2,
                width=VALUE_WIDTH, listed="best"),
    FleetColumn("trend", "trend", lambda r: r.task_trend, lambda r: r.task_last, place=9,
                priority=2, width=SPARK_WIDTH, filterable=False),
    FleetColumn("loss", "loss", lambda r: r.loss, align="right", newest=True, place=10,
                priority=3, width=VALUE_WIDTH),
    FleetColumn("gpu", "gpu", lambda r: r.gpu_percent, align="right", fmt="{:.0f}%",
                place=12, priority=4, width=5),
    FleetColumn("flavor", "flavor", lambda r: r.flavor, place=13, priority=4),
    FleetColumn("cost", "cost", lambda r: r.cost_usd, align="right", fmt="${:.2f}",
                place=14, priority=4, width=8),
    # every flag standing: `health:truncation` holds for a run with that flag among them,
    # `health:ok` for a run with none; worst first on the screen, the worst one listed
    FleetColumn("health", "health", lambda r: r.health or ("ok",), health_rank, place=6,
                priority=1, width=21, listed="health", text=lambda r, _now: r.worst_flag),
)


def columns() -> tuple[FleetColumn, ...]:
    """The table as it stands (read at each use: a column added is seen everywhere)."""
    return COLUMNS


def on_screen() -> list[FleetColumn]:
    """The screen's columns, left to right."""
    return sorted((c for c in COLUMNS if c.place is not None), key=lambda c: c.place)


def listed() -> list[FleetColumn]:
    """The listing's columns, in order."""
    return [c for c in COLUMNS if c.listed is not None]


def filter_fields() -> dict[str, Callable[[FleetRow], Any]]:
    """The keys a filter can name (the config's aside), and how each is read."""
    return _fields(COLUMNS)


@lru_cache(maxsize=4)
def _fields(table: tuple[FleetColumn, ...]) -> dict[str, Callable[[FleetRow], Any]]:
    return {c.key: c.value for c in table if c.filterable}
