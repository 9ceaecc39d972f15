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
"""

from __future__ import annotations

import math
import os
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import numpy as np
import orjson

from carl_tui.events import Event, RunMeta, RunRef, ScalarBatch
from carl_tui.sources import trackio_system as ts
from carl_tui.sources.base import SourceError
from carl_tui.sources.rows import build_columns, iso_to_epoch

SOURCE = "trackio"
X_KEY = "train/global_step"
STEP_KEYS = (X_KEY,)
BUSY_RETRIES = 5
BUSY_SLEEP_S = 0.05
BUSY_TIMEOUT_S = 1.0  # SQLite's own wait for a lock, per attempt


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


def most_recent(root: Path | None = None) -> tuple[str, str] | None:
    """(project, run_id) of the most recently written run, or None."""
    for info in list_projects(root):
        try:
            runs = list_runs(info.name, info.path.parent)
        except (SourceError, sqlite3.Error):
            continue
        if runs:
            return info.name, runs[0].run_id
    return None


class TrackioLocalSource:
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
        self.skipped = 0
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

    @property
    def interval(self) -> float:
        return 0.0 if self.behind else self._interval

    @interval.setter
    def interval(self, value: float) -> None:
        self._interval = value

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
            rows = _retry(self._fetch, conn)
            configs = _retry(self._fetch_configs, conn) if self._has_configs else []
        except SourceError:
            self.close()  # reopen next time: the file may have been replaced
            raise
        system, alerts = self._fetch_extras(conn)
        events: list[Event] = []
        events.extend(self._config_events(configs))
        if rows:
            events.extend(self._batches(rows))
            self.last_id = rows[-1][0]
        if system:
            events.extend(self._system_events(system))
            self.last_system_id = system[-1][0]
        if alerts:
            events.extend(self._alert_events(alerts))
            self.last_alert_id = alerts[-1][0]
        self.behind = (
            len(rows) >= self.batch_rows
            or len(system) >= self.batch_rows
            or len(alerts) >= self.alert_rows
        )
        return events

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
        return conn.execute(
            f"SELECT id, {self._key}, run_name, step, timestamp, metrics FROM metrics "
            "WHERE id > ? ORDER BY id LIMIT ?",
            (self.last_id, self.batch_rows),
        ).fetchall()

    def _fetch_configs(self, conn: sqlite3.Connection) -> list[tuple]:
        key = "run_id" if self._key == "run_id" else "run_name"
        return conn.execute(
            f"SELECT id, {key}, run_name, config FROM configs WHERE id > ? ORDER BY id",
            (self.last_config_id,),
        ).fetchall()

    def _fetch_system(self, conn: sqlite3.Connection) -> list[tuple]:
        sql = ts.system_sql(self._system_key or "run_id", self.last_system_id, self.batch_rows)
        return conn.execute(sql).fetchall()

    def _fetch_alerts(self, conn: sqlite3.Connection) -> list[tuple]:
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
                self.skipped += 1
                continue
            sample, bad = ts.system_sample(self._ref(key), metrics, iso_to_epoch(stamp))
            self.skipped += bad
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
                self.skipped += 1
                continue
            self._meta_sent.add(key)
            meta = {"config": cfg, "trackio_project": self.project, "trackio_dir": str(self.root)}
            events.append(RunMeta(self._ref(key), meta))
        return events

    def _batches(self, rows: list[tuple]) -> list[Event]:
        by_run: dict[str, list[tuple]] = {}
        for row in rows:
            by_run.setdefault(str(row[1]), []).append(row)
        events: list[Event] = []
        for key, run_rows in by_run.items():
            name = str(run_rows[-1][2])
            if not self._wanted(key, name):
                continue
            self._names.setdefault(key, name)
            parsed = list(map(_loads, (r[5] for r in run_rows)))
            if None in parsed:
                self.skipped += parsed.count(None)
                keep = [i for i, p in enumerate(parsed) if p is not None]
                run_rows = [run_rows[i] for i in keep]
                parsed = [parsed[i] for i in keep]
                if not parsed:
                    continue
            default_steps = np.fromiter(
                (s if type(s) is int else -1 for s in (r[3] for r in run_rows)),
                dtype=np.int64,
                count=len(run_rows),
            )
            cols = build_columns(
                parsed, default_steps=default_steps, step_keys=STEP_KEYS, time_key=None
            )
            self.skipped += cols.skipped
            if len(cols.steps):
                newest = int(cols.steps.max())
                self._last_x[key] = max(newest, self._last_x.get(key, newest))
            batch = ScalarBatch(
                self._ref(key), cols.steps, cols.columns, wall_time=iso_to_epoch(run_rows[-1][4])
            )
            events.append(batch)
        return events

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
