"""The newest-first preview of a local Trackio project (`TrackioLocalSource.preview`).

A long history (more than `newest_first.SIZES.min_rows` rows) is previewed before it is
read in id order, in up to two polls:

1. A project of several runs first sends each run's newest rows (`RUN_TAIL_ROWS`, found by
   the (run, timestamp) index Trackio keeps: a point lookup per run) as `tail` preview
   batches, with the runs' configs: every run's name, latest values, step and time (its
   state) on screen at once, for a thousand runs as for one.
2. Then the shape of the whole history: a strided sample by id and the table's newest
   rows (`newest_first.plan_preview`), as preview batches.

A project of one run (or a database without that index: a scan of the table per run)
sends only the second. The history is then read in id order, and the preview ends once
that read reaches its newest row (`newest_first.PreviewState`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from carl_tui.events import Event, ScalarBatch
from carl_tui.sources.rows import iso_to_epoch
from carl_tui.sources.trackio import newest_first as pv
from carl_tui.sources.trackio.db import fetch_all, retry
from carl_tui.sources.trackio.local_read import (
    row_columns,
    run_columns,
)
from carl_tui.sources.trackio.newest_first import (
    METRICS_INDEXES_SQL,
    PreviewPlan,
    newest_ids_sql,
    plan_preview,
    run_time_indexed,
)

if TYPE_CHECKING:  # pragma: no cover
    from carl_tui.sources.trackio.local import TrackioLocalSource


def newest_rows_of_runs(conn: sqlite3.Connection, key: str, runs: Sequence[str],
                        until: int) -> list[tuple]:
    """The RUN_TAIL_ROWS newest rows (`row_columns`) of each run of the configs table up to id
    `until`, in id order, in one statement; none for fewer than two `runs` (the table's
    newest rows are that run's), and none where no index leads with the run and the
    time (a scan of the table per run)."""
    if len(runs) < 2 or not run_time_indexed(
            (row[0] for row in conn.execute(METRICS_INDEXES_SQL)), key):
        return []
    ids = newest_ids_sql(key, until, f"SELECT DISTINCT {key} AS rid FROM configs")
    return fetch_all(conn, row_columns(key), f"FROM metrics AS m WHERE m.id IN ({ids})")


def columns_by_run(rows_of: dict[str, list[tuple]]
                   ) -> dict[str, tuple[np.ndarray, dict[str, np.ndarray]]]:
    """(steps, columns) of each run's rows (id, run key, step, metrics JSON), as
    `run_columns` gives them, parsed in one pass where that gives the same (every row a
    JSON object with an integer step, none left out): each call costs about as much as its
    rows do in a preview of a thousand runs of eight rows."""
    flat = [row for rows in rows_of.values() for row in rows]
    if all(type(row[2]) is int for row in flat):
        steps, columns, _, bad, _ = run_columns(flat)
        if not bad and len(steps) == len(flat):
            out, at = {}, 0
            for key, rows in rows_of.items():
                part = slice(at, at + len(rows))
                at += len(rows)
                out[key] = (steps[part], {name: values[part] for name, values in columns.items()
                                          if not np.isnan(values[part]).all()})
            return out
    return {key: run_columns(rows)[:2] for key, rows in rows_of.items()}


class PreviewReader:
    """A `TrackioLocalSource`'s preview (see the module doc), a part the source holds:
    `events` is called by its poll while `preview` is asked and the preview is not sent
    whole yet (`shape_due`: the runs' newest rows were sent, not the shape)."""

    def __init__(self, source: TrackioLocalSource) -> None:
        self.source = source
        self.shape_due: PreviewPlan | None = None
        self.listed: frozenset[int] = frozenset()  # ids of the rows sent with them

    def events(self, conn: sqlite3.Connection) -> list[Event]:
        """The next step of the preview of a long history; [] for a short one."""
        if self.shape_due is not None:
            plan, self.shape_due = self.shape_due, None
            return self._shape_events(conn, plan)
        top = retry(lambda: conn.execute("SELECT MAX(id) FROM metrics").fetchone()[0])
        self.source._queries += 1
        plan = plan_preview(self.source.last_id, top, pv.SIZES)
        if plan is None:
            return []
        configs = retry(self.source._fetch_configs, conn) if self.source._has_configs else []
        events: list[Event] = list(self.source._config_events(configs))
        runs = sorted({str(c[1]) for c in configs})
        newest = retry(newest_rows_of_runs, conn, self.source._key, runs, top)
        if not newest:
            return events + self._shape_events(conn, plan)
        self.source._queries += 2  # the indexes, the newest rows
        self.shape_due, self.listed = plan, frozenset(r[0] for r in newest)
        batches = self._batches_of(newest, tail=True)
        self.source._preview.shown(top, (b.run for b in batches))
        return events + batches

    def _shape_events(self, conn: sqlite3.Connection, plan: PreviewPlan) -> list[Event]:
        """The strided sample of the history and the table's newest rows."""
        cols = row_columns(self.source._key)
        sample = retry(fetch_all, conn, cols,
                       "FROM (WITH RECURSIVE s(x) AS (SELECT ? UNION ALL SELECT x + ? FROM s "
                       "WHERE x + ? <= ?) SELECT x FROM s) AS s CROSS JOIN metrics AS m "
                       "ON m.id = s.x", (plan.first, plan.stride, plan.stride, plan.tail_from))
        tail = retry(fetch_all, conn, cols, "FROM metrics AS m WHERE m.id > ?",
                     (plan.tail_from,))
        self.source._queries += 2
        rows = [r for r in sample + tail if r[0] not in self.listed]
        batches = self._batches_of(rows, tail=False)
        if batches:
            self.source._preview.shown(int(tail[-1][0]) if tail else plan.tail_from,
                                (b.run for b in batches))
        # Helpers start once the preview is drawn: started with it, they cost the first
        # useful frame about 0.1 s on two cores and gain the whole history nothing.
        return batches

    def _batches_of(self, rows: list[tuple], *, tail: bool) -> list[Event]:
        """A preview batch per run of `rows` (`local_read.row_columns`); its input
        problems are not counted (its rows are read again)."""
        events: list[Event] = []
        wanted = list(self.source._wanted_runs(rows))
        parsed = columns_by_run({key: run_rows for key, run_rows, _ in wanted})
        for key, _, stamp in wanted:
            steps, columns = parsed[key]
            if len(steps):
                events.append(ScalarBatch(self.source._ref(key), steps, columns, preview=True,
                                          wall_time=iso_to_epoch(stamp), tail=tail))
        return events
