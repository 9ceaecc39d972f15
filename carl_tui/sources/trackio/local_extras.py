"""System metrics and alerts of a local Trackio project, read by id like the metrics.

A database written before Trackio had those tables is read without them until
they appear. Reading them is best effort: a failure never stops the metrics; it
is said in `error` (the source's limitation) until a read succeeds. Each system
row becomes a `SystemSample`, each alert a `Marker(kind="alert")` (see
`system_tables.py`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from carl_tui.events import Event, RunRef
from carl_tui.sources.base import SourceError
from carl_tui.sources.trackio import system_tables as ts
from carl_tui.sources.trackio.db import run_column, table_columns
from carl_tui.sources.unused_input import UnusedInput

#: The run of a row (key, name) -> its RunRef, or None when the run is not followed.
RunOf = Callable[[Any, Any], "RunRef | None"]


class LocalExtras:
    """Which of the two tables exist (and their run column), where the source is in
    each, and what could not be read. `queries` counts the statements run."""

    def __init__(self, batch_rows: int, alert_rows: int) -> None:
        self.batch_rows = batch_rows  # system rows per read
        self.alert_rows = alert_rows  # alerts per read
        self.last_system_id = 0  # resume position in the system_metrics table
        self.last_alert_id = 0  # resume position in the alerts table
        self.system_key: str | None = None  # run column of system_metrics, None: no table
        self.alert_key: str | None = None  # run column of alerts, None: no table
        self.error = ""
        self.queries = 0

    def fetch(self, conn: sqlite3.Connection, retry: Callable[..., Any], metrics_key: str
              ) -> tuple[list[tuple], list[tuple]]:
        """New system rows and alerts, each statement run through `retry` (the source's
        wait for a writer's lock); `metrics_key` is the metrics table's run column."""
        system: list[tuple] = []
        alerts: list[tuple] = []
        try:
            if self.system_key is None or self.alert_key is None:
                retry(self._find_tables, conn)
            system = retry(self._fetch_system, conn) if self.system_key else []
            alerts = retry(self._fetch_alerts, conn, metrics_key) if self.alert_key else []
        except SourceError as exc:
            self.error = f"system metrics and alerts not read: {exc}"
        else:
            self.error = ""
        return system, alerts

    def full(self, system: list[tuple], alerts: list[tuple]) -> bool:
        """A read came back full: more rows are waiting."""
        return len(system) >= self.batch_rows or len(alerts) >= self.alert_rows

    def events(self, system: list[tuple], alerts: list[tuple], run_of: RunOf,
               unused_input: UnusedInput, last_x: dict[str, int]) -> list[Event]:
        """The samples and alert markers of the rows `fetch` read (of the runs followed);
        bad input counted in `unused_input`; `last_x` places an alert that has no step."""
        events: list[Event] = []
        for _id, key, name, stamp, blob in system:
            ref = run_of(key, name)
            if ref is None:
                continue
            sample = ts.system_event(ref, blob, stamp, unused_input)
            if sample is not None:
                events.append(sample)
        if system:
            self.last_system_id = system[-1][0]
        for _id, key, name, title, text, level, step, stamp, at_metrics in alerts:
            ref = run_of(key, name)
            if ref is None:
                continue
            events.append(ts.alert_marker(
                ref, title=title, text=text, level=level, step=step, timestamp=stamp,
                at_metrics=at_metrics, fallback_step=last_x.get(ref.run_id),
            ))
        if alerts:
            self.last_alert_id = alerts[-1][0]
        return events

    def _find_tables(self, conn: sqlite3.Connection) -> None:
        """Which of the system_metrics and alerts tables exist yet, and their run column."""
        for attr, table in (("system_key", "system_metrics"), ("alert_key", "alerts")):
            if getattr(self, attr) is None:
                cols = table_columns(conn, table)
                if cols:
                    setattr(self, attr, run_column(cols))

    def _fetch_system(self, conn: sqlite3.Connection) -> list[tuple]:
        self.queries += 1
        sql = ts.system_sql(self.system_key or "run_id", self.last_system_id, self.batch_rows)
        return conn.execute(sql).fetchall()

    def _fetch_alerts(self, conn: sqlite3.Connection, metrics_key: str) -> list[tuple]:
        self.queries += 1
        sql = ts.alerts_sql(
            self.alert_key or "run_id", metrics_key, self.last_alert_id, self.alert_rows
        )
        return conn.execute(sql).fetchall()
