"""The remote source's preview pass: newest first, coarse to fine.

Before paging through a long history, one query reads the newest id, one its
newest rows and one a strided sample of the rest (`id IN (...)`: point lookups
on the server, whatever the history's length); see `newest_first.py`. A project
of several runs also gets each run's newest rows, in one query (`tail` batches, as
the local source's `local_preview.py`). A preview counts nothing it cannot read: its
rows are read again, in order.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from carl_tui.errors import SourceError
from carl_tui.events import ScalarBatch
from carl_tui.sources.trackio.newest_first import (
    METRICS_INDEXES_SQL,
    PreviewSizes,
    newest_ids_sql,
    plan_preview,
    run_time_indexed,
)
from carl_tui.sources.trackio.remote_rows import RunPoints, points_by_run, run_key
from carl_tui.sources.unused_input import UnusedInput

if TYPE_CHECKING:  # pragma: no cover
    from carl_tui.sources.trackio.remote_sql import RemoteProject

log = logging.getLogger(__name__)


def read_preview(remote: RemoteProject, last_id: int, sizes: PreviewSizes
                 ) -> tuple[list[ScalarBatch], int] | None:
    """(a preview batch per run, the newest id previewed) of the history after
    `last_id` (the runs `remote` filters on); None for a short one."""
    top_rows = remote.query(f"SELECT MAX(id) AS top FROM metrics WHERE id > {int(last_id)}"
                            f"{remote.run_filter()}")
    top = top_rows[0].get("top") if top_rows else None
    plan = plan_preview(last_id, top if isinstance(top, int) else None, sizes)
    if plan is None:
        return None
    ids = ", ".join(map(str, plan.sample_ids))
    sample = remote.query(remote.metrics_sql(f"id IN ({ids})"))
    tail = remote.query(remote.metrics_sql(f"id > {plan.tail_from}"))
    shape = [*sample, *tail]
    newest = _newest_rows(remote, int(top)) if len({run_key(r) for r in shape}) >= 2 else []
    sent = {row.get("id") for row in newest}
    shape = [row for row in shape if row.get("id") not in sent]
    batches = (_batches(remote, points_by_run(shape, UnusedInput()), tail=False)
               + _batches(remote, points_by_run(newest, UnusedInput()), tail=True))
    return batches, int(top)


def _batches(remote: RemoteProject, got: RunPoints, *, tail: bool) -> list[ScalarBatch]:
    batches = []
    for rid, points in got.by_run.items():
        ref = remote.ref(rid, got.names.get(rid, rid))
        batch = ScalarBatch.from_rows(ref, points, wall_time=got.newest.get(rid))
        if len(batch):
            batches.append(replace(batch, preview=True, tail=tail))
    return batches


def _newest_rows(remote: RemoteProject, top: int) -> list[dict]:
    """Each run's newest rows, where the server can give them cheaply; none where it cannot
    (no such index, or a database whose tables answer otherwise: the preview goes without,
    its rows are read in order anyway)."""
    try:
        indexes = remote.query(METRICS_INDEXES_SQL)
        if not run_time_indexed((row.get("sql") for row in indexes), remote.run_col):
            return []
        return remote.query(_newest_rows_sql(remote, top))
    except SourceError as exc:
        log.info("no newest rows of each run from %s: %s", remote.url, exc)
        return []


def _newest_rows_sql(remote: RemoteProject, top: int) -> str:
    """Each run's RUN_TAIL_ROWS newest rows up to id `top`, in one query: a lookup per run
    of the (run, timestamp) index on the server (the runs of the configs table; a page
    holds them for up to 1,250 runs)."""
    col = remote.run_col
    runs = f"SELECT {col} AS rid FROM configs WHERE 1 = 1{remote.run_filter()}"
    return remote.metrics_sql(f"id IN ({newest_ids_sql(col, top, runs)})")
