"""The newest-first preview of a long Trackio history, shared by the local and the
remote source.

Before reading a long metrics table in id order, a source reads its newest
`tail_rows` rows and a strided sample of about `sample_rows` of the rest, by id
(point lookups: the same cost for 100k rows or 10M), and sends them as preview
batches. `plan_preview` says which ids; `PreviewState` keeps the preview from the
first poll until the history read in order reaches the newest row previewed (or
nothing more is waiting), when `end()` gives an empty preview batch per run.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from carl_tui.events import Event, RunRef, ScalarBatch


@dataclass(frozen=True)
class PreviewSizes:
    """How long a history must be to be previewed, and how many rows a preview reads."""

    min_rows: int  # a history of this many rows or fewer is simply read
    tail_rows: int  # the newest rows (the table's values, the trend)
    sample_rows: int  # a strided sample of the rest (the shape of the whole run)


@dataclass(frozen=True)
class PreviewPlan:
    """The ids of a preview: `sample_ids` (strided), then every id above `tail_from`."""

    first: int  # the first id not read yet
    tail_from: int
    stride: int

    @property
    def sample_ids(self) -> range:
        return range(self.first, self.tail_from + 1, self.stride)


#: The previews of both sources: a history of over 30,000 rows is previewed by its
#: newest 1,000 rows (the table's values, the trend) and 1,500 strided rows of the rest
#: (the shape of the whole run).
SIZES = PreviewSizes(min_rows=30_000, tail_rows=1_000, sample_rows=1_500)
#: In a project of several runs, each run's newest rows previewed too (`tail` batches):
#: its latest values, step and time from the first frame.
RUN_TAIL_ROWS = 8


def run_time_indexed(index_sqls: Iterable[str | None], run_column: str) -> bool:
    """Whether one of the metrics table's indexes (their `CREATE INDEX` statements, as
    `sqlite_master` keeps them) leads with the run and the time: each run's newest rows
    are then a lookup per run, where without it each would scan the table."""
    want = re.compile(rf"\(\s*{run_column}\s*,\s*timestamp\s*[,)]", re.IGNORECASE)
    return any(want.search(sql or "") for sql in index_sqls)


def newest_ids_sql(run_column: str, top: int, runs_sql: str) -> str:
    """A query of the ids of each run's RUN_TAIL_ROWS newest rows up to id `top`, in one
    statement (`runs_sql` selects the runs' keys as `rid`): a lookup per run of the (run,
    time) index (`run_time_indexed`), a few milliseconds for a thousand runs, where a
    query per run costs the reading thread a wait for the interpreter's lock each."""
    newest = (f"SELECT y.id FROM metrics AS y WHERE y.{run_column} = c.rid "
              f"AND y.id <= {int(top)} ORDER BY y.timestamp DESC LIMIT {RUN_TAIL_ROWS}")
    return f"SELECT x.id FROM ({runs_sql}) AS c JOIN metrics AS x ON x.id IN ({newest})"


#: The statements of the metrics table's indexes (for `run_time_indexed`).
METRICS_INDEXES_SQL = "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'metrics'"


def plan_preview(last_id: int, top: int | None, sizes: PreviewSizes) -> PreviewPlan | None:
    """The preview of the rows `last_id < id <= top`; None when there are too few."""
    if top is None or top - last_id <= sizes.min_rows:
        return None
    tail_from = max(last_id, top - sizes.tail_rows)
    stride = max(1, (tail_from - last_id) // sizes.sample_rows)
    return PreviewPlan(last_id + 1, tail_from, stride)


class PreviewState:
    """A source's preview, from its first poll to its end (see the module doc)."""

    def __init__(self) -> None:
        self.tried = False  # the first poll looked for a long history
        self.until: int | None = None  # the newest id previewed, until read in order
        self.runs: dict[str, RunRef] = {}  # run key -> the run previewed

    @property
    def standing(self) -> bool:
        """A preview was sent and the history has not caught up with it yet."""
        return self.until is not None

    def shown(self, until: int, refs: Iterable[RunRef]) -> None:
        """A preview up to id `until` was sent for these runs (and those of an earlier
        step of it: all of them are ended, in order of their keys)."""
        self.until = until
        self.runs.update((ref.run_id, ref) for ref in refs)
        self.runs = dict(sorted(self.runs.items()))

    def ends(self, last_id: int, more: bool) -> bool:
        """The history read in order reached the preview, or nothing more is waiting."""
        return self.until is not None and (last_id >= self.until or not more)

    def end(self) -> list[Event]:
        """An empty preview batch per run previewed: the previews end."""
        self.until = None
        done: list[Event] = [
            ScalarBatch(ref, np.empty(0, dtype=np.int64), {}, preview=True)
            for ref in self.runs.values()
        ]
        self.runs = {}
        return done
