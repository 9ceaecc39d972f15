"""Follow the runs of a local Trackio project by reading its SQLite database.

Trackio 0.43 keeps one database per project, `<dir>/<project>.db`, where
`<dir>` is `$TRACKIO_DIR`, else `$HF_HOME/trackio`, else
`~/.cache/huggingface/trackio` (`$XDG_CACHE_HOME` replaces `~/.cache`), and
the file name keeps only `[A-Za-z0-9_-]` of the project name. Tables read:

    metrics(id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT, timestamp TEXT,
            run_name TEXT, step INTEGER, metrics TEXT|BLOB (JSON), ...)
    configs(id, run_id, run_name, config TEXT|BLOB (JSON), created_at)
    system_metrics, alerts (see `trackio_system.py`: GPU/CPU samples, alerts)

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
(`ScalarBatch(preview=True)`): its newest `PREVIEW_TAIL_ROWS` rows and a strided
sample of `PREVIEW_SAMPLE_ROWS` rows of the rest, found by id (point lookups, so
a preview costs the same for 100k rows or 10M). Then the history is read in id
order as usual, and once it reaches the newest row previewed, an empty preview
batch per run says so.

Following a live run costs what arrived: `PRAGMA data_version` changes only when
another connection commits, so a poll of an unchanged database runs no query.
"""

from __future__ import annotations

import math
import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import numpy as np
import orjson

from carl_tui.events import Event, RunMeta, RunRef, ScalarBatch
from carl_tui.sources import trackio_system as ts
from carl_tui.sources.base import PolledSource, SourceError
from carl_tui.sources.rows import iso_to_epoch
from carl_tui.sources.tally import InputTally
from carl_tui.sources.trackio_read import RangeReader, RunBlock, group_by_run, run_columns

SOURCE = "trackio"
X_KEY = "train/global_step"
STEP_KEYS = (X_KEY,)
BUSY_RETRIES = 5
BUSY_SLEEP_S = 0.05
BUSY_TIMEOUT_S = 1.0  # SQLite's own wait for a lock, per attempt
PREVIEW_MIN_ROWS = 30_000  # a shorter history is simply read
PREVIEW_TAIL_ROWS = 1_000  # newest rows of the preview (the table's values, the trend)
PREVIEW_SAMPLE_ROWS = 1_500  # strided sample of the rest (the shape of the whole run)
HOLD_MAX_S = 2.0  # longest wait, after a preview, for the screen to show it (`hold`)
HELPER_MIN_ROWS = 200_000  # a longer history is read by helper processes too
HELPER_BLOCK_ROWS = 10_000


def trackio_dir() -> Path:
    """Where Trackio keeps its databases on this machine."""
    if os.environ.get("TRACKIO_DIR"):
        return Path(os.environ["TRACKIO_DIR"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "trackio"
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache).expanduser() / "huggingface" / "trackio"


def db_file_name(project: str) -> str:
    """Trackio's file name for a project: only `[A-Za-z0-9_-]` kept."""
    safe = "".join(c for c in project if c.isalnum() or c in "-_").rstrip()
    return f"{safe or 'default'}.db"


def db_path(project: str, root: Path | None = None) -> Path:
    return Path(root if root is not None else trackio_dir()) / db_file_name(project)


@dataclass(frozen=True, slots=True)
class ProjectInfo:
    name: str
    path: Path
    mtime: float  # newest write, counting the WAL file


@dataclass(frozen=True, slots=True)
class RunInfo:
    run_id: str
    name: str
    rows: int
    last_step: int | None
    last_time: float | None


def _mtime(path: Path) -> float:
    """Newest write: the database, or its WAL while it holds data (a reader
    may create an empty WAL, which is no write)."""
    times = []
    for p in (path, path.with_name(path.name + "-wal")):
        try:
            st = p.stat()
        except OSError:
            continue
        if st.st_size or p is path:
            times.append(st.st_mtime)
    return max(times, default=0.0)


def list_projects(root: Path | None = None) -> list[ProjectInfo]:
    """Projects in the Trackio directory, most recently written first."""
    root = Path(root if root is not None else trackio_dir())
    if not root.is_dir():
        return []
    found = [
        ProjectInfo(p.stem, p, _mtime(p))
        for p in root.glob("*.db")
        if p.is_file() and not p.stem.startswith("registry-")
    ]
    return sorted(found, key=lambda p: p.mtime, reverse=True)


def _connect(path: Path) -> sqlite3.Connection:
    if not path.exists():
        raise SourceError(f"waiting for {path}")
    uri = f"file:{quote(str(path))}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
    conn.execute("PRAGMA query_only = ON")
    return conn


def _retry(fn, *args):
    """Run fn, retrying briefly while the writer holds a lock."""
    for attempt in range(BUSY_RETRIES):
        try:
            return fn(*args)
        except sqlite3.OperationalError as exc:
            text = str(exc).lower()
            if ("locked" not in text and "busy" not in text) or attempt == BUSY_RETRIES - 1:
                raise SourceError(f"trackio database: {exc}") from exc
            time.sleep(BUSY_SLEEP_S * (attempt + 1))
    raise AssertionError("unreachable")


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}



def _loads(blob):
    try:
        obj = orjson.loads(blob)
    except (orjson.JSONDecodeError, TypeError):
        return None
    return obj if type(obj) is dict else None


def _last_step(step, metrics) -> int | None:
    obj = _loads(metrics)
    x = obj.get(X_KEY) if obj else None
    if type(x) is int or (type(x) is float and math.isfinite(x) and x == int(x)):
        return int(x)
    return step if isinstance(step, int) else None


def list_runs(project: str, root: Path | None = None) -> list[RunInfo]:
    """Runs of a project, the one written most recently first."""
    path = db_path(project, root)
    conn = _connect(path)
    try:
        key = "run_id" if "run_id" in _columns(conn, "metrics") else "run_name"
        rows = _retry(
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


def newest_run(project: str, root: Path | None = None) -> str | None:
    """The run (id, or name in old databases) of the newest row of a project: one
    lookup of the largest id, whatever the project's size."""
    conn = _connect(db_path(project, root))
    try:
        key = "run_id" if "run_id" in _retry(_columns, conn, "metrics") else "run_name"
        row = _retry(lambda: conn.execute(
            f"SELECT {key} FROM metrics ORDER BY id DESC LIMIT 1").fetchone())
    finally:
        conn.close()
    return None if row is None else str(row[0])


def most_recent(root: Path | None = None) -> tuple[str, str] | None:
    """(project, run_id) of the most recently written run, or None."""
    for info in list_projects(root):
        try:
            run = newest_run(info.name, info.path.parent)
        except (SourceError, sqlite3.Error):
            continue
        if run is not None:
            return info.name, run
    return None


class TrackioLocalSource(PolledSource):
    """Polls one local Trackio project; emits a ScalarBatch per run per poll.

    `runs` limits it to runs whose id or name is listed.
    """

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
        self.last_system_id = 0  # resume position in the system_metrics table
        self.last_alert_id = 0  # resume position in the alerts table
        self.alert_rows = max(1, min(self.batch_rows, 1000))
        self.behind = False
        self._conn: sqlite3.Connection | None = None
        self._key = "run_id"
        self._has_configs = True
        self._names: dict[str, str] = {}  # run key -> run name
        self._meta_sent: set[str] = set()
        self._system_key: str | None = None  # run column of system_metrics, None: no table
        self._alert_key: str | None = None  # run column of alerts, None: no table
        self._last_x: dict[str, int] = {}  # run key -> newest step seen (alerts without one)
        self._base_limitation = ""
        self._extra_error = ""
        self.preview = False  # send a coarse view of a long history first (the dashboard)
        self._previewed = False
        self._preview_until: int | None = None  # newest id previewed, until read in order
        self._preview_runs: set[str] = set()
        # Set by the dashboard: the preview is on screen. The history is read after it,
        # so that reading never competes with drawing the first useful frame.
        self.hold: threading.Event | None = None
        self._data_version: int | None = None  # PRAGMA data_version at the last poll
        # Helper processes for a long history (0: read it all here, as on one core).
        cpus = os.cpu_count() or 1
        self.helpers = min(4, cpus) if cpus >= 2 else 0
        self._reader: RangeReader | None = None
        self._helpers_tried = False
        self.queries = 0  # statements that read tables (for tests and benchmarks)


    def _open(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = _connect(self.path)
            try:
                cols = _retry(_columns, conn, "metrics")
                if not cols:
                    raise SourceError(f"waiting for the metrics table in {self.path}")
                self._key = "run_id" if "run_id" in cols else "run_name"
                self._has_configs = bool(_retry(_columns, conn, "configs"))
            except BaseException:
                conn.close()
                raise
            old = self._key != "run_id"
            self._base_limitation = "old Trackio database: runs keyed by name" if old else ""
            self.limitation = self._base_limitation
            self._conn = conn
        return self._conn

    def _find_tables(self, conn: sqlite3.Connection) -> None:
        """Which of the system_metrics and alerts tables exist yet, and their run column."""
        for attr, table in (("_system_key", "system_metrics"), ("_alert_key", "alerts")):
            if getattr(self, attr) is None:
                cols = _columns(conn, table)
                if cols:
                    setattr(self, attr, "run_id" if "run_id" in cols else "run_name")

    def poll(self) -> list[Event]:
        conn = self._open()
        try:
            version = _retry(self._version, conn)
            if version is not None and version == self._data_version and not self.behind:
                return []  # nothing was committed since the last poll
            if self.preview and not self._previewed:
                events = self._preview_events(conn)
                self._previewed = True
                if events:
                    self.behind = True
                    self._data_version = version
                    return events
            if self._preview_until is not None and self.hold is not None:
                self.hold.wait(HOLD_MAX_S)
                self.hold = None
            configs = _retry(self._fetch_configs, conn) if self._has_configs else []
            events: list[Event] = list(self._config_events(configs))
            more = self._read_helped(conn, events)
            if more is None:
                rows = _retry(self._fetch, conn)
                if rows:
                    events.extend(self._batches(conn, rows))
                    self.last_id = rows[-1][0]
                more = len(rows) >= self.batch_rows
        except SourceError:
            self.close()  # reopen next time: the file may have been replaced
            raise
        if self._preview_until is not None and (self.last_id >= self._preview_until or not more):
            events.extend(self._preview_done())
        system, alerts = self._fetch_extras(conn)
        if system:
            events.extend(self._system_events(system))
            self.last_system_id = system[-1][0]
        if alerts:
            events.extend(self._alert_events(alerts))
            self.last_alert_id = alerts[-1][0]
        self.behind = (
            more
            or len(system) >= self.batch_rows
            or len(alerts) >= self.alert_rows
        )
        self._data_version = version
        return events

    def _read_helped(self, conn: sqlite3.Connection, events: list[Event]) -> bool | None:
        """The next range of a long history, read by helper processes (appended to
        `events`); returns whether more is waiting, or None to read in-process."""
        if self._reader is None:
            if self._helpers_tried or self.helpers <= 0:
                return None
            top = _retry(lambda: conn.execute("SELECT MAX(id) FROM metrics").fetchone()[0])
            self.queries += 1
            self._start_helpers(top)
            if self._reader is None:
                return None
        blocks = self._reader.next()
        if blocks is None:  # a helper failed: read the rest here, from where it stopped
            self._reader = None
            return None
        events.extend(self._block_events(blocks))
        self.last_id = max(self.last_id, self._reader.position)
        if self._reader.done:
            self._reader.close()
            self._reader = None
        return True

    def _start_helpers(self, top: int | None, *, ask: bool = True) -> None:
        """Helper processes for a history of more than HELPER_MIN_ROWS rows up to `top`;
        `ask=False` starts them (they take a moment to start) without asking yet."""
        if self._helpers_tried or self.helpers <= 0:
            return
        self._helpers_tried = True
        if top is None or top - self.last_id < HELPER_MIN_ROWS:
            return
        try:
            self._reader = RangeReader(self.path, self._key, self.last_id, int(top),
                                       rows=HELPER_BLOCK_ROWS, workers=self.helpers, ask=ask)
        except OSError:
            self._reader = None

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

    # -- the preview: newest first, coarse to fine ---------------------------------

    def _preview_events(self, conn: sqlite3.Connection) -> list[Event]:
        """A coarse view of a long history (see the module doc); [] for a short one."""
        top = _retry(lambda: conn.execute("SELECT MAX(id) FROM metrics").fetchone()[0])
        self.queries += 1
        if top is None or top - self.last_id <= PREVIEW_MIN_ROWS:
            return []
        tail_from = max(self.last_id, top - PREVIEW_TAIL_ROWS)
        stride = max(1, (tail_from - self.last_id) // PREVIEW_SAMPLE_ROWS)
        cols = f"m.id, m.{self._key}, m.step, m.metrics"
        sample = _retry(lambda: conn.execute(
            "WITH RECURSIVE s(x) AS (SELECT ? UNION ALL SELECT x + ? FROM s WHERE x + ? <= ?) "
            f"SELECT {cols} FROM s CROSS JOIN metrics AS m ON m.id = s.x ORDER BY m.id",
            (self.last_id + 1, stride, stride, tail_from),
        ).fetchall())
        tail = _retry(lambda: conn.execute(
            f"SELECT {cols} FROM metrics AS m WHERE m.id > ? ORDER BY m.id", (tail_from,)
        ).fetchall())
        self.queries += 2
        configs = _retry(self._fetch_configs, conn) if self._has_configs else []
        events: list[Event] = list(self._config_events(configs))
        batches = self._batches(conn, sample + tail, preview=True)
        if not batches:
            return events
        self._preview_until = int(tail[-1][0]) if tail else top
        self._preview_runs = {b.run.run_id for b in batches}
        # Helpers start once the preview is drawn: started with it, they cost the first
        # useful frame about 0.1 s on two cores and gain the whole history nothing.
        return events + batches

    def _preview_done(self) -> list[Event]:
        """The history is read up to the newest row previewed: the previews end."""
        self._preview_until = None
        done = [
            ScalarBatch(self._ref(key), np.empty(0, dtype=np.int64), {}, preview=True)
            for key in sorted(self._preview_runs)
        ]
        self._preview_runs = set()
        return done

    def _fetch_extras(self, conn: sqlite3.Connection) -> tuple[list[tuple], list[tuple]]:
        """New system rows and alerts. Best effort: a failure to read them never stops
        the metrics; it shows as the source's limitation until a read succeeds."""
        system: list[tuple] = []
        alerts: list[tuple] = []
        try:
            if self._system_key is None or self._alert_key is None:
                _retry(self._find_tables, conn)
            system = _retry(self._fetch_system, conn) if self._system_key else []
            alerts = _retry(self._fetch_alerts, conn) if self._alert_key else []
        except SourceError as exc:
            self._extra_error = f"system metrics and alerts not read: {exc}"
        else:
            self._extra_error = ""
        self.limitation = "; ".join(x for x in (self._base_limitation, self._extra_error) if x)
        return system, alerts

    def _fetch(self, conn: sqlite3.Connection) -> list[tuple]:
        self.queries += 1
        return conn.execute(
            f"SELECT id, {self._key}, step, metrics FROM metrics "
            "WHERE id > ? ORDER BY id LIMIT ?",
            (self.last_id, self.batch_rows),
        ).fetchall()

    def _row_info(self, conn: sqlite3.Connection, row_id: int) -> tuple[str, str | None]:
        """(run name, timestamp) of one row."""
        self.queries += 1
        row = _retry(lambda: conn.execute(
            "SELECT run_name, timestamp FROM metrics WHERE id = ?", (row_id,)).fetchone())
        return ("", None) if row is None else (str(row[0]), row[1])

    def _fetch_configs(self, conn: sqlite3.Connection) -> list[tuple]:
        self.queries += 1
        key = "run_id" if self._key == "run_id" else "run_name"
        return conn.execute(
            f"SELECT id, {key}, run_name, config FROM configs WHERE id > ? ORDER BY id",
            (self.last_config_id,),
        ).fetchall()

    def _fetch_system(self, conn: sqlite3.Connection) -> list[tuple]:
        self.queries += 1
        sql = ts.system_sql(self._system_key or "run_id", self.last_system_id, self.batch_rows)
        return conn.execute(sql).fetchall()

    def _fetch_alerts(self, conn: sqlite3.Connection) -> list[tuple]:
        self.queries += 1
        sql = ts.alerts_sql(
            self._alert_key or "run_id", self._key, self.last_alert_id, self.alert_rows
        )
        return conn.execute(sql).fetchall()

    def _system_events(self, rows: list[tuple]) -> list[Event]:
        events: list[Event] = []
        for _id, key, name, stamp, blob in rows:
            key, name = str(key), str(name)
            if not self._wanted(key, name):
                continue
            self._names.setdefault(key, name)
            metrics = ts.load_json(blob)
            if metrics is None:
                self.tally.skip("system metrics not a JSON object", blob)
                continue
            sample, bad = ts.system_sample(self._ref(key), metrics, iso_to_epoch(stamp))
            self.tally.skip("system value not a finite number", key, bad)
            if sample is not None:
                events.append(sample)
        return events

    def _alert_events(self, rows: list[tuple]) -> list[Event]:
        events: list[Event] = []
        for _id, key, name, title, text, level, step, stamp, at_metrics in rows:
            key, name = str(key), str(name)
            if not self._wanted(key, name):
                continue
            self._names.setdefault(key, name)
            events.append(
                ts.alert_marker(
                    self._ref(key), title=title, text=text, level=level, step=step,
                    timestamp=stamp, at_metrics=at_metrics, fallback_step=self._last_x.get(key),
                )
            )
        return events

    def _wanted(self, key: str, name: str) -> bool:
        return self.runs is None or key in self.runs or name in self.runs

    def _ref(self, key: str) -> RunRef:
        return RunRef(SOURCE, self.project, key, self._names.get(key, key))

    def _config_events(self, configs: list[tuple]) -> list[Event]:
        events: list[Event] = []
        for cid, key, name, blob in configs:
            self.last_config_id = cid
            key, name = str(key), str(name)
            if not self._wanted(key, name):
                continue
            self._names.setdefault(key, name)
            cfg = _loads(blob)
            if cfg is None:
                self.tally.skip("config not a JSON object", blob)
                continue
            self._meta_sent.add(key)
            meta = {"config": cfg, "trackio_project": self.project, "trackio_dir": str(self.root)}
            events.append(RunMeta(self._ref(key), meta))
        return events

    def _batches(
        self, conn: sqlite3.Connection, rows: list[tuple], *, preview: bool = False
    ) -> list[Event]:
        """One ScalarBatch per run of `rows` (id, run key, step, metrics JSON), in order.
        A preview's input problems are not counted (its rows are read again)."""
        events: list[Event] = []
        for key, run_rows in group_by_run(rows).items():
            name, stamp = self._row_info(conn, run_rows[-1][0])
            self._names.setdefault(key, name)
            if not self._wanted(key, self._names[key]):
                continue
            steps, columns, tally, bad, nonfinite = run_columns(run_rows)
            if preview:
                if len(steps):
                    events.append(ScalarBatch(self._ref(key), steps, columns,
                                              wall_time=iso_to_epoch(stamp), preview=True))
                continue
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
        if self._reader is not None:
            self._reader.close()
            self._reader = None
            self._helpers_tried = False  # a reopened source may use them again
        if self._conn is not None:
            self._conn.close()
            self._conn = None
