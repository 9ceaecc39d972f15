"""Trackio's databases on this machine: where they are, each project's file, the
columns of its tables and its newest run.

This is what the CLI needs to check what the user named (`--project`, the most
recently active run) before the dashboard's first frame, so it imports sqlite3 and
nothing heavy (no numpy: the readers, `local.py` and `local_read.py`, load it).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from urllib.parse import quote

from carl_tui.errors import SourceError

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


def connect(path: Path) -> sqlite3.Connection:
    """A read-only connection to a project's database (it is written by the training
    process); SourceError while the file does not exist yet."""
    if not path.exists():
        # lazy: sources.base off the first frame (the CLI checks a project first)
        from carl_tui.sources.base import WAITING

        raise SourceError(f"waiting for {path}", kind=WAITING)
    uri = f"file:{quote(str(path))}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
    conn.execute("PRAGMA query_only = ON")
    return conn


def retry(fn, *args):
    """Run fn, retrying briefly while the writer holds a lock."""
    for attempt in range(BUSY_RETRIES):
        try:
            return fn(*args)
        except sqlite3.OperationalError as exc:
            if not _busy(exc) or attempt == BUSY_RETRIES - 1:
                raise SourceError(f"trackio database: {exc}") from exc
            time.sleep(BUSY_SLEEP_S * (attempt + 1))
    raise AssertionError("unreachable")


def fetch_all(conn: sqlite3.Connection, columns: Sequence[str], rest: str,
              params: Sequence = ()) -> list[tuple]:
    """The rows of `SELECT columns rest`, in the order of their first column (an id), each
    a tuple, BLOBs as their text; fetched in one step of SQLite, as one JSON array.

    Python's sqlite3 lets go of the interpreter's lock around each step of a statement
    (each row) and must take it back after: while the screen's thread is busy, a reading
    thread waits up to the switch interval (5 ms) for every row. A thousand runs' newest
    rows (8,000) took 0.05 s read alone, and 74 s beside a busy thread; as one value,
    0.07 s. Where SQLite cannot (no JSON functions, a value that is not UTF-8), the rows
    are fetched one by one."""
    import orjson  # lazy: orjson off the first frame (only once rows are read)

    inner = f"SELECT {', '.join(f'{c} AS c{i}' for i, c in enumerate(columns))} {rest}"
    cells = ", ".join(f"CASE typeof(c{i}) WHEN 'blob' THEN CAST(c{i} AS TEXT) ELSE c{i} END"
                      for i in range(len(columns)))
    try:
        (got,) = conn.execute(f"SELECT json_group_array(json_array({cells})) FROM ({inner})",
                              params).fetchone()
    except sqlite3.OperationalError as exc:
        if _busy(exc):
            raise
        return conn.execute(inner, params).fetchall()
    rows = list(map(tuple, orjson.loads(got)))
    rows.sort(key=itemgetter(0))
    return rows


def _busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def newest_run(project: str, root: Path | None = None) -> str | None:
    """The run (id, or name in old databases) of the newest row of a project: one
    lookup of the largest id, whatever the project's size."""
    conn = connect(db_path(project, root))
    try:
        key = run_column(retry(table_columns, conn, "metrics"))
        row = retry(lambda: conn.execute(
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


def table_columns(conn: sqlite3.Connection, table: str) -> set[str]:
    """The column names of `table` (empty when the database has no such table)."""
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def run_column(columns) -> str:
    """The column a table names its run by: `run_id`, or `run_name` in databases
    written before Trackio had run ids."""
    return "run_id" if "run_id" in columns else "run_name"
