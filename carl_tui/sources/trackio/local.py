"""Follow the runs of a local Trackio project by reading its SQLite database.

Trackio 0.43 keeps one database per project, `<dir>/<project>.db`, where
`<dir>` is `$TRACKIO_DIR`, else `$HF_HOME/trackio`, else
`~/.cache/huggingface/trackio` (`$XDG_CACHE_HOME` replaces `~/.cache`), and
the file name keeps only `[A-Za-z0-9_-]` of the project name. Tables read:

    metrics(id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT, timestamp TEXT,
            run_name TEXT, step INTEGER, metrics TEXT|BLOB (JSON), ...)
    configs(id, run_id, run_name, config TEXT|BLOB (JSON), created_at)
    system_metrics, alerts (see `system_tables.py`: GPU/CPU samples, alerts)

Databases written before Trackio 0.24 have no `run_id`; runs are then keyed by
`run_name`. Runs are keyed by `run_id` otherwise (names repeat).

The database is opened read-only (`mode=ro`) while the training process writes
it (Trackio uses WAL). Each poll reads `WHERE id > last ORDER BY id LIMIT n`,
so a poll costs what arrived; rows become visible in id order, so nothing is
skipped or repeated. A busy or locked database is retried, then reported.

The x axis is `train/global_step` when a row has it (Trainer runs: Trackio's
own step also counts TRL's profiling rows), else Trackio's step. Trackio
writes NaN/Infinity as the strings "NaN"/"Infinity"; like other invalid values
they are skipped and counted. A run's config becomes a `RunMeta` when Trackio
has stored it. System rows become `SystemSample`s and alerts `Marker(kind="alert")`s,
each read once by id like the metrics; a database without those tables (written
before Trackio had them) is read without them until they appear.

Newest first, coarse to fine (`preview = True`, which the dashboard sets; readers
that need every row exactly once, `summary` and `export`, leave it off): when the
history to read is long, the first poll sends a preview of it
(`ScalarBatch(preview=True)`): its newest rows and a strided
sample of the rest (`preview.SIZES`), found by id (point lookups, so
a preview costs the same for 100k rows or 10M; see `newest_first.py`); a project of
several runs sends each run's newest rows first (`local_preview.py`). Then the
history is read in id order as usual, and once it reaches the newest row
previewed, an empty preview batch per run says so. A history of more than
`HELPER_MIN_ROWS` rows is read by helper processes too (`local_read.py`).
System metrics and alerts are read in `local_extras.py`.

Following a live run costs what arrived: `PRAGMA data_version` changes only when
another connection commits, so a poll of an unchanged database runs no query.
"""

from __future__ import annotations

import math
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from carl_tui.events import Event, RunMeta, RunRef, ScalarBatch
from carl_tui.sources.base import HOLD_MAX_S, WAITING, PolledSource, SourceError
from carl_tui.sources.rows import iso_to_epoch
from carl_tui.sources.tally import InputTally
from carl_tui.sources.trackio.db import (
    connect,
    db_path,
    fetch_all,
    retry,
    run_column,
    table_columns,
    trackio_dir,
)
from carl_tui.sources.trackio.local_extras import LocalExtras
from carl_tui.sources.trackio.local_preview import PreviewReader
from carl_tui.sources.trackio.local_read import (
    HelperReading,
    RangeReader,
    RunBlock,
    group_by_run,
    named_and_dated,
    row_columns,
    run_columns,
)
from carl_tui.sources.trackio.newest_first import PreviewState
from carl_tui.sources.trackio.system_tables import X_KEY, load_json

SOURCE = "trackio"
HELPER_MIN_ROWS = 200_000  # a longer history is read by helper processes too
HELPER_BLOCK_ROWS = 10_000


@dataclass(frozen=True, slots=True)
class RunInfo:
    run_id: str
    name: str
    rows: int
    last_step: int | None
    last_time: float | None


def _last_step(step, metrics) -> int | None:
    obj = load_json(metrics)
    x = obj.get(X_KEY) if obj else None
    if type(x) is int or (type(x) is float and math.isfinite(x) and x == int(x)):
        return int(x)
    return step if isinstance(step, int) else None


def list_runs(project: str, root: Path | None = None) -> list[RunInfo]:
    """Runs of a project, the one written most recently first."""
    path = db_path(project, root)
    conn = connect(path)
    try:
        key = run_column(table_columns(conn, "metrics"))
        rows = retry(
            lambda: conn.execute(
                f"SELECT m.{key}, m.run_name, g.n, m.step, m.timestamp, m.metrics "
                f"FROM (SELECT {key} AS k, COUNT(*) AS n, MAX(id) AS last FROM metrics "
                f"GROUP BY {key}) AS g JOIN metrics AS m ON m.id = g.last ORDER BY m.id DESC"
            ).fetchall()
        )
    finally:
        conn.close()
    return [
        RunInfo(str(rid), str(name), int(n), _last_step(step, blob), iso_to_epoch(ts))
        for rid, name, n, step, ts, blob in rows
    ]


class TrackioLocalSource(PolledSource):
    """Polls one local Trackio project; emits a ScalarBatch per run per poll.

    `runs` limits it to runs whose id or name is listed.
    """

    previews = True  # a long history: a coarse view first (`newest_first.py`)

    def __init__(
        self,
        project: str,
        *,
        root: Path | str | None = None,
        interval: float = 1.0,
        runs: Sequence[str] | None = None,
        batch_rows: int = 10_000,
    ):
        self.project = project
        self.root = Path(root) if root is not None else trackio_dir()
        self.path = db_path(project, self.root)
        self.runs = set(runs) if runs else None
        self.batch_rows = max(1, batch_rows)
        self.name = f"trackio: {project}"
        self._interval = interval
        self.finished = False
        self.tally = InputTally()
        self.limitation = ""
        self.last_id = 0  # resume position in the metrics table
        self.last_config_id = 0
        self.behind = False
        self._conn: sqlite3.Connection | None = None
        self._key = "run_id"
        self._has_configs = True
        self._names: dict[str, str] = {}  # run key -> run name
        self._extras = LocalExtras(self.batch_rows, max(1, min(self.batch_rows, 1000)))
        self._last_x: dict[str, int] = {}  # run key -> newest step seen (alerts without one)
        self._base_limitation = ""
        self.preview = False  # send a coarse view of a long history first (the dashboard)
        self._preview = PreviewState()
        self._previewer = PreviewReader(self)  # its newest rows first, then its shape
        # Set by the dashboard: the preview is on screen. The history is read after it,
        # so that reading never competes with drawing the first useful frame.
        self.hold: threading.Event | None = None
        self._data_version: int | None = None  # PRAGMA data_version at the last poll
        # Helper processes for a long history (0: read it all here, as on one core).
        cpus = os.cpu_count() or 1
        self.helpers = min(4, cpus) if cpus >= 2 else 0
        self._helped = HelperReading()
        self._in_poll = threading.Lock()  # held by a poll under way
        self._poller: int | None = None  # the thread of that poll
        self._close_due = False  # closed while a poll was under way: it closes at its end
        self._queries = 0

    @property
    def queries(self) -> int:
        """Statements that read tables (for tests and benchmarks)."""
        return self._queries + self._extras.queries

    @property
    def _reader(self) -> RangeReader | None:
        """The helper processes' reader while they read the history."""
        return self._helped.reader

    def _open(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = connect(self.path)
            try:
                cols = retry(table_columns, conn, "metrics")
                if not cols:
                    raise SourceError(f"waiting for the metrics table in {self.path}",
                                      kind=WAITING)
                self._key = run_column(cols)
                self._has_configs = bool(retry(table_columns, conn, "configs"))
            except BaseException:
                conn.close()
                raise
            old = self._key != "run_id"
            self._base_limitation = "old Trackio database: runs keyed by name" if old else ""
            self.limitation = self._base_limitation
            self._conn = conn
        return self._conn

    def poll(self) -> list[Event]:
        with self._in_poll:
            self._poller = threading.get_ident()
            try:
                return self._poll()
            finally:
                self._poller = None
                if self._close_due:
                    self._close_now()

    def _poll(self) -> list[Event]:
        conn = self._open()
        try:
            version = retry(self._version, conn)
            if version is not None and version == self._data_version and not self.behind:
                return []  # nothing was committed since the last poll
            due = self._previewer.shape_due
            if self.preview and (not self._preview.tried or due is not None):
                if due is not None:
                    self._wait_painted()  # the runs' newest rows drawn first
                events = self._previewer.events(conn)  # the runs' newest rows, then the shape
                self._preview.tried = True
                if events:
                    self.behind = True
                    self._data_version = version
                    return events
            if self._preview.standing:
                self._wait_painted()
            events, more = self._read_metrics(conn)
        except SourceError:
            self.close()  # reopen next time: the file may have been replaced
            raise
        if self._preview.ends(self.last_id, more):
            events.extend(self._preview.end())
        system, alerts = self._extras.fetch(conn, retry, self._key)
        self.limitation = "; ".join(x for x in (self._base_limitation, self._extras.error) if x)
        events.extend(self._extras.events(system, alerts, self._run_of, self.tally,
                                          self._last_x))
        self.behind = more or self._extras.full(system, alerts)
        self._data_version = version
        return events

    def _wait_painted(self) -> None:
        """Wait (once, HOLD_MAX_S at most) for the preview to be on screen."""
        if self.hold is not None:
            self.hold.wait(HOLD_MAX_S)
            self.hold = None

    def _read_metrics(self, conn: sqlite3.Connection) -> tuple[list[Event], bool]:
        """New configs and metrics rows (by helper processes while they read a long
        history), and whether more rows are waiting."""
        configs = retry(self._fetch_configs, conn) if self._has_configs else []
        events: list[Event] = list(self._config_events(configs))
        more = self._read_helped(conn, events)
        if more is None:
            rows = retry(self._fetch, conn)
            if rows:
                events.extend(self._batches(rows))
                self.last_id = rows[-1][0]
            more = len(rows) >= self.batch_rows
        return events, more

    def _read_helped(self, conn: sqlite3.Connection, events: list[Event]) -> bool | None:
        """The next range of a long history, read by helper processes (appended to
        `events`); returns whether more is waiting, or None to read in-process."""
        if self._helped.reader is None and not self._helped.tried and self.helpers > 0:
            top = retry(lambda: conn.execute("SELECT MAX(id) FROM metrics").fetchone()[0])
            self._queries += 1
            self._helped.start(self.path, self._key, self.last_id, top, workers=self.helpers,
                               min_rows=HELPER_MIN_ROWS, block_rows=HELPER_BLOCK_ROWS)
        got = self._helped.next()
        if got is None:
            return None
        blocks, position = got
        events.extend(self._block_events(blocks))
        self.last_id = max(self.last_id, position)
        return True

    def _block_events(self, blocks: list[RunBlock]) -> list[Event]:
        events: list[Event] = []
        for b in blocks:
            self._names.setdefault(b.key, b.name)
            if not self._wanted(b.key, self._names[b.key]):
                continue
            self.tally.merge(b.tally)
            if not b.parsed:
                continue  # not one JSON object
            if len(b.steps):
                newest = int(b.steps.max())
                self._last_x[b.key] = max(newest, self._last_x.get(b.key, newest))
            events.append(ScalarBatch(self._ref(b.key), b.steps, b.columns,
                                      wall_time=iso_to_epoch(b.stamp), nonfinite=b.nonfinite))
        return events

    def _version(self, conn: sqlite3.Connection) -> int | None:
        row = conn.execute("PRAGMA data_version").fetchone()
        return int(row[0]) if row else None

    # -- reading rows --------------------------------------------------------------

    def _fetch(self, conn: sqlite3.Connection) -> list[tuple]:
        self._queries += 1
        return fetch_all(conn, row_columns(self._key),
                         "FROM metrics AS m WHERE m.id > ? ORDER BY m.id LIMIT ?",
                         (self.last_id, self.batch_rows))

    def _fetch_configs(self, conn: sqlite3.Connection) -> list[tuple]:
        self._queries += 1
        return fetch_all(conn, ["id", self._key, "run_name", "config"],
                         "FROM configs WHERE id > ? ORDER BY id", (self.last_config_id,))

    # -- rows to events ------------------------------------------------------------

    def _wanted(self, key: str, name: str) -> bool:
        return self.runs is None or key in self.runs or name in self.runs

    def _wanted_runs(self, rows: list[tuple]) -> Iterator[tuple[str, list[tuple], str | None]]:
        """(run key, its rows, its newest row's timestamp) of each followed run of `rows`
        (`local_read.row_columns`), in order."""
        for key, run_rows in group_by_run(rows).items():
            name, stamp = named_and_dated(run_rows[-1])
            self._names.setdefault(key, name)
            if self._wanted(key, self._names[key]):
                yield key, run_rows, stamp

    def _ref(self, key: str) -> RunRef:
        return RunRef(SOURCE, self.project, key, self._names.get(key, key))

    def _run_of(self, key, name) -> RunRef | None:
        """The run of a config, system or alert row (its name remembered), or None when
        the run is not followed."""
        key, name = str(key), str(name)
        if not self._wanted(key, name):
            return None
        self._names.setdefault(key, name)
        return self._ref(key)

    def _config_events(self, configs: list[tuple]) -> list[Event]:
        events: list[Event] = []
        for cid, key, name, blob in configs:
            self.last_config_id = cid
            ref = self._run_of(key, name)
            if ref is None:
                continue
            cfg = load_json(blob)
            if cfg is None:
                self.tally.skip("config not a JSON object", blob)
                continue
            meta = {"config": cfg, "trackio_project": self.project, "trackio_dir": str(self.root)}
            events.append(RunMeta(ref, meta))
        return events

    def _batches(self, rows: list[tuple]) -> list[Event]:
        """One ScalarBatch per run of `rows` (`local_read.row_columns`), in order."""
        events: list[Event] = []
        for key, run_rows, stamp in self._wanted_runs(rows):
            steps, columns, tally, bad, nonfinite = run_columns(run_rows)
            self.tally.merge(tally)
            if bad == len(run_rows):
                continue  # not one JSON object
            if len(steps):
                newest = int(steps.max())
                self._last_x[key] = max(newest, self._last_x.get(key, newest))
            events.append(ScalarBatch(self._ref(key), steps, columns,
                                      wall_time=iso_to_epoch(stamp), nonfinite=nonfinite))
        return events

    def close(self) -> None:
        """Close the database; from another thread while a poll is under way (quitting),
        its statement is interrupted and the poll's thread closes it (closing a connection
        under a statement of another thread crashes the interpreter)."""
        self._helped.close()
        self._close_due = True
        if self._in_poll.acquire(blocking=False):
            try:
                self._close_now()
            finally:
                self._in_poll.release()
            return
        conn = self._conn
        if conn is not None and self._poller not in (None, threading.get_ident()):
            conn.interrupt()

    def _close_now(self) -> None:
        self._close_due = False
        if self._conn is not None:
            self._conn.close()
            self._conn = None
