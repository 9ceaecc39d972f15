"""System metrics and alerts of a remote Trackio project, read by id like the metrics.

Both tables are read in one more query per poll (a page of each, within the
server's cap; see `system_tables.py`), or, once caught up, their newest ids are asked
in the source's one probe of an unchanged project (`probe_sql`): `SystemSample`s and
`Marker(kind="alert")`s, each once. They are optional: a database without one of
those tables is probed again every `MISSING_TABLE_RECHECK_POLLS` polls, and a
failure to read them never stops the metrics (it is said in `limitation` until it
clears). When the two tables cannot be read together, each is tried alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from carl_tui.events import Event
from carl_tui.sources.base import SourceError
from carl_tui.sources.rows import short_repr
from carl_tui.sources.trackio import system_tables as ts
from carl_tui.sources.trackio.db import run_column
from carl_tui.sources.trackio.remote_http import PAGE_ROWS, UnknownApi
from carl_tui.sources.trackio.remote_rows import run_key

if TYPE_CHECKING:  # pragma: no cover
    from carl_tui.sources.trackio.remote_sql import RemoteProject
    from carl_tui.sources.unused_input import UnusedInput

ALERT_PAGE_ROWS = 1000
SYSTEM_PAGE_ROWS = PAGE_ROWS - ALERT_PAGE_ROWS  # one query holds both, within the cap
MISSING_TABLE_RECHECK_POLLS = 10  # polls between probes for a table the database lacks
EXTRA_TABLES = ("system_metrics", "alerts")


@dataclass(frozen=True)
class _Reading:
    """What one `read` reads through, and tells of what it cannot use."""

    remote: RemoteProject
    unused_input: UnusedInput
    last_x: dict[str, int]


class RemoteExtras:
    """Where the source is in both tables, and what it could not read. `read(remote,
    unused_input, last_x)` once per poll; `full` says a page was full (more are waiting)."""

    def __init__(self) -> None:
        self.last_system_id = 0  # resume position in the system_metrics table
        self.last_alert_id = 0  # resume position in the alerts table
        self.full = False
        self._col: dict[str, str] = {}  # table -> its run column, once known
        self._wait: dict[str, int] = {}  # table -> polls until the next probe
        self._errors: dict[str, str] = {}  # table -> why it could not be read

    @property
    def limitation(self) -> str:
        return "; ".join(f"{table.replace('_', ' ')} not read: {msg}"
                         for table, msg in self._errors.items())

    def read(self, remote: RemoteProject, unused_input: UnusedInput,
             last_x: dict[str, int]) -> list[Event]:
        """New system samples and alerts of `remote`'s project (of the runs it filters
        on; `unused_input` hears of rows it cannot use, `last_x` gives each run's newest step for
        an alert without one); best effort (see the module doc)."""
        self.full = False
        src = _Reading(remote, unused_input, last_x)
        ready: dict[str, str] = {}  # table -> its run column
        for table in EXTRA_TABLES:
            wait = self._wait.get(table, 0)
            if wait > 0:
                self._wait[table] = wait - 1
                continue
            try:
                ready[table] = self._col.get(table) or self._table_col(remote, table)
            except (SourceError, UnknownApi) as exc:
                self._failed([table], exc)
        if not ready:
            return []
        try:
            return self._query(src, ready)
        except (SourceError, UnknownApi) as exc:
            if len(ready) == 1 or ts.is_missing_table(str(exc)):
                self._failed(list(ready), exc)
                return []
        events: list[Event] = []  # one table at a time: what can be read still is
        for table, col in ready.items():
            try:
                events.extend(self._query(src, {table: col}))
            except (SourceError, UnknownApi) as exc1:
                self._failed([table], exc1)
        return events

    def probe_sql(self) -> str | None:
        """Columns of a probe of both tables' newest ids (", (SELECT ...) AS <table>"),
        or None while a table is missing, failing or not read yet."""
        if self._errors or self._wait or any(t not in self._col for t in EXTRA_TABLES):
            return None
        return "".join(f", (SELECT COALESCE(MAX(id), 0) FROM {t}) AS {t}"
                       for t in EXTRA_TABLES)

    def unchanged(self, probe: dict[str, Any]) -> bool:
        """A probe's row says no table has a row past those read."""
        last = {"system_metrics": self.last_system_id, "alerts": self.last_alert_id}
        return all(_at_most(probe.get(t), last[t]) for t in EXTRA_TABLES)

    def _query(self, src: _Reading, ready: dict[str, str]) -> list[Event]:
        remote = src.remote
        system = ready.get("system_metrics")
        alert = ready.get("alerts")
        sql = ts.extras_sql(
            system=(system, self.last_system_id, SYSTEM_PAGE_ROWS, remote.run_filter(system))
            if system else None,
            alerts=(alert, remote.run_col, self.last_alert_id, ALERT_PAGE_ROWS,
                    remote.run_filter(alert)) if alert else None,
        )
        rows = remote.query(sql)
        for table in ready:
            self._errors.pop(table, None)
        return self._events(src, rows)

    def _failed(self, tables: list[str], exc: BaseException) -> None:
        """A table the database lacks is probed again later; other failures are said."""
        message = str(exc) or type(exc).__name__
        if ts.is_missing_table(message):
            named = [t for t in tables if f"no such table: {t}" in message.lower()]
            for table in named or tables:
                self._wait[table] = MISSING_TABLE_RECHECK_POLLS
                self._col.pop(table, None)
                self._errors.pop(table, None)
            return
        for table in tables:
            self._errors[table] = message

    def _table_col(self, remote: RemoteProject, table: str) -> str:
        cols = remote.columns(table)
        if cols is None:
            raise SourceError(f"malformed reply from {remote.url} (query without columns)")
        col = run_column(cols)
        self._col[table] = col
        return col

    def _events(self, src: _Reading, rows: list[dict[str, Any]]) -> list[Event]:
        events: list[Event] = []
        n_system = n_alerts = 0
        for row in rows:
            rid = run_key(row)
            ref = src.remote.ref(rid, str(row.get("run_name") or rid))
            try:
                rowid = int(row["id"])
            except (KeyError, TypeError, ValueError):
                src.unused_input.skip("row without an id", short_repr(row))
                continue
            if row.get("kind") == "system":
                n_system += 1
                self.last_system_id = max(self.last_system_id, rowid)
                blob = row.get("metrics")
                sample = ts.system_event(ref, blob, row.get("timestamp"), src.unused_input,
                                         example=short_repr(blob))
                if sample is not None:
                    events.append(sample)
            elif row.get("kind") == "alert":
                n_alerts += 1
                self.last_alert_id = max(self.last_alert_id, rowid)
                events.append(ts.alert_marker(
                    ref, title=row.get("title"), text=row.get("text"), level=row.get("level"),
                    step=row.get("step"), timestamp=row.get("timestamp"),
                    at_metrics=row.get("at_metrics"), fallback_step=src.last_x.get(rid),
                ))
        if n_system >= SYSTEM_PAGE_ROWS or n_alerts >= ALERT_PAGE_ROWS:
            self.full = True
        return events


def _at_most(value: Any, last: int) -> bool:
    """`value` (a probe's newest id) is an integer no greater than `last`."""
    return type(value) is int and value <= last
