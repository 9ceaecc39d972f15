"""The remote source's preview pass: newest first, coarse to fine.

Before paging through a long history, one query reads the newest id, one its
newest rows and one a strided sample of the rest (`id IN (...)`: point lookups
on the server, whatever the history's length); see `newest_first.py`. A
preview counts nothing it cannot read: its rows are read again, in order.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from carl_tui.events import ScalarBatch
from carl_tui.sources.tally import InputTally
from carl_tui.sources.trackio.newest_first import PreviewSizes, plan_preview
from carl_tui.sources.trackio.remote_rows import points_by_run

if TYPE_CHECKING:  # pragma: no cover
    from carl_tui.sources.trackio.remote_sql import RemoteProject


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
    got = points_by_run([*sample, *tail], InputTally())
    batches = []
    for rid, points in got.by_run.items():
        ref = remote.ref(rid, got.names.get(rid, rid))
        batch = ScalarBatch.from_rows(ref, points, wall_time=got.newest.get(rid))
        if len(batch):
            batches.append(replace(batch, preview=True))
    return batches, int(top)
