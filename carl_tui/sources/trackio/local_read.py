"""Reading blocks of a Trackio metrics table into columns, in this process or in
helper processes.

`run_columns(rows)` turns rows `(id, run key, step, metrics JSON)` of one run into
columns (the rules of `sources.rows`: `train/global_step` is the x axis, else
Trackio's step). `read_range(path, key, lo, hi)` reads the rows `lo < id <= hi`
of a database and returns one `RunBlock` per run, in id order: a pure function
of the file, so a long history can be read by several processes at once
(`RangeReader`) while this one feeds the store and draws. Each block is
reassembled here in id order: the gates and phases still see every row in order.

`RangeReader` keeps a few ranges in flight in helper processes (fresh
interpreters running this module: no state of this one is copied, none of its
threads can hold a lock there, no main module is imported again). Any failure
of a helper (it cannot start, it dies) is reported as `None` and the caller
reads in-process instead: helpers only ever make reading faster, never different.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import sqlite3
import struct
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import groupby
from operator import itemgetter
from pathlib import Path

import carl_tui

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Windows
    fcntl = None  # type: ignore[assignment]

import numpy as np
import orjson

from carl_tui.sources.rows import build_columns, short_repr
from carl_tui.sources.trackio.db import connect
from carl_tui.sources.trackio.system_tables import X_KEY
from carl_tui.sources.unused_input import UnusedInput

STEP_KEYS = (X_KEY,)


@dataclass
class RunBlock:
    """The rows of one run in a range: columns ready for a ScalarBatch."""

    key: str  # run_id (run_name in old databases)
    name: str  # run name of its last row in the range
    stamp: str | None  # timestamp of that row
    steps: np.ndarray
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    unused_input: UnusedInput = field(default_factory=UnusedInput)  # skipped input, by reason
    parsed: int = 0  # rows that are JSON objects
    nonfinite: tuple[tuple[str, int], ...] = ()  # (metric, step) logged as NaN or infinite

    @property
    def skipped(self) -> int:
        return self.unused_input.total


def _loads(blob):
    try:
        obj = orjson.loads(blob)
    except (orjson.JSONDecodeError, TypeError):
        return None
    return obj if type(obj) is dict else None


def parse_all(blobs: Sequence) -> list[dict | None]:
    """Each JSON object of `blobs`; None for one that is not a JSON object."""
    try:
        parsed = list(map(orjson.loads, blobs))
    except (orjson.JSONDecodeError, TypeError):
        return list(map(_loads, blobs))
    if set(map(type, parsed)) != {dict}:
        return [p if type(p) is dict else None for p in parsed]
    return parsed


NOT_OBJECT = "row metrics not a JSON object"


def run_columns(
    rows: Sequence[tuple], step_at: int = 2, metrics_at: int = 3
) -> tuple[np.ndarray, dict[str, np.ndarray], UnusedInput, int, tuple[tuple[str, int], ...]]:
    """(steps, columns, what was skipped (by reason), rows that were not JSON objects,
    values logged as NaN or infinite) of rows `(id, key, step, metrics)` of one run (or
    other tuples: the step and the metrics JSON at `step_at` and `metrics_at`)."""
    unused_input = UnusedInput()
    blobs = list(map(itemgetter(metrics_at), rows))
    parsed = parse_all(blobs)
    bad = 0
    if None in parsed:
        bad = parsed.count(None)
        first = next(i for i, p in enumerate(parsed) if p is None)
        unused_input.skip(NOT_OBJECT, short_repr(blobs[first]), bad)
        keep = [i for i, p in enumerate(parsed) if p is not None]
        rows = [rows[i] for i in keep]
        parsed = [parsed[i] for i in keep]
        if not parsed:
            return np.empty(0, dtype=np.int64), {}, unused_input, bad, ()
    steps = list(map(itemgetter(step_at), rows))
    if set(map(type, steps)) == {int}:
        default_steps = np.array(steps, dtype=np.int64)
    else:
        default_steps = np.fromiter(
            (s if type(s) is int else -1 for s in steps), dtype=np.int64, count=len(steps)
        )
    cols = build_columns(parsed, default_steps=default_steps, step_keys=STEP_KEYS, time_key=None,
                         unused_input=unused_input)
    return cols.steps, cols.columns, unused_input, bad, cols.nonfinite


def group_by_run(rows: list[tuple], key_at: int = 1) -> dict[str, list[tuple]]:
    """Rows by run key (column `key_at`), each in id order; runs in order of appearance."""
    if not rows:
        return {}
    keys = list(map(itemgetter(key_at), rows))
    if keys.count(keys[0]) == len(keys):
        return {str(keys[0]): rows}
    # One stretch of consecutive rows of a run at a time (a run logs many rows in a row).
    by_run: dict[str, list[tuple]] = {}
    for key, stretch in groupby(rows, key=itemgetter(key_at)):
        by_run.setdefault(str(key), []).extend(stretch)
    return by_run


_CONNECTIONS: dict[str, sqlite3.Connection] = {}


def _connection(path: str) -> sqlite3.Connection:
    """This process's read-only connection to `path` (one per database, reused)."""
    conn = _CONNECTIONS.get(path)
    if conn is None:
        conn = _CONNECTIONS[path] = connect(Path(path))
    return conn


def row_columns(key: str) -> list[str]:
    """The columns a row of the metrics table (`m`, its runs keyed by `key`) is read with:
    `run_columns`'s four (id, run key, step, metrics JSON), then the run's name and the
    row's time (a run's newest row read names and dates its batch)."""
    return ["m.id", f"m.{key}", "m.step", "m.metrics", "m.run_name", "m.timestamp"]


def named_and_dated(row: tuple) -> tuple[str, str | None]:
    """(the run's name, the row's timestamp) of a row read with `row_columns`."""
    return str(row[4]), row[5]


def read_range(path: str, key: str, lo: int, hi: int) -> list[RunBlock]:
    """The rows `lo < id <= hi` of the metrics table of `path`, per run (in a helper
    process: its only thread, read row by row)."""
    conn = _connection(path)
    rows = conn.execute(
        f"SELECT {', '.join(row_columns(key))} FROM metrics AS m WHERE m.id > ? "
        "AND m.id <= ? ORDER BY m.id", (lo, hi),
    ).fetchall()
    out = []
    for run_key, run_rows in group_by_run(rows).items():
        name, stamp = named_and_dated(run_rows[-1])  # the run's last row in the range
        steps, columns, unused_input, bad, nonfinite = run_columns(run_rows)
        out.append(RunBlock(run_key, name, stamp, steps, columns, unused_input,
                            len(run_rows) - bad, nonfinite))
    return out


class _Worker:
    """One helper process (`python -m carl_tui.sources.trackio.local_read`): reads a range
    per request line on its stdin, answers each with a length-prefixed pickle. A
    thread of ours takes its answers as they come, so it never waits on a full pipe
    for us to ask for them."""

    def __init__(self) -> None:
        root = str(Path(carl_tui.__file__).resolve().parents[1])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "carl_tui.sources.trackio.local_read"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=env, close_fds=True,
        )
        _widen(self.proc.stdout)
        self._answers: queue.Queue[bytes | None] = queue.Queue()
        self._reader = threading.Thread(target=self._take_answers, daemon=True,
                                        name="trackio-read-answers")
        self._reader.start()

    def _take_answers(self) -> None:
        out = self.proc.stdout
        assert out is not None
        try:
            while True:
                head = out.read(8)
                if len(head) < 8:
                    break
                size = struct.unpack("<Q", head)[0]
                data = out.read(size)
                if len(data) < size:
                    break
                self._answers.put(data)
        except (OSError, ValueError):
            pass
        self._answers.put(None)  # the process ended

    def ask(self, path: str, key: str, lo: int, hi: int) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(orjson.dumps([path, key, lo, hi]) + b"\n")
        self.proc.stdin.flush()

    def answer(self) -> list[RunBlock]:
        data = self._answers.get()
        if data is None:
            self._answers.put(None)
            raise EOFError("the reader process ended")
        status, result = pickle.loads(data)
        if status != "ok":
            raise RuntimeError(str(result))
        return result

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            self.proc.wait(timeout=1.0)


#: A helper's answers pass through a pipe this large where the system allows (Linux: up
#: to /proc/sys/fs/pipe-max-size, 1 MiB by default; 64 KiB otherwise). Each piece read
#: from a pipe has the reading thread take the interpreter's lock back, waiting up to its
#: switch interval (5 ms) while this process applies the last answer: an answer of a
#: megabyte came in 16 pieces, now in one or two.
PIPE_BYTES = 1 << 20


def _widen(pipe) -> None:
    setsize = getattr(fcntl, "F_SETPIPE_SZ", None) if fcntl is not None else None
    if pipe is None or setsize is None:
        return
    with contextlib.suppress(OSError):
        fcntl.fcntl(pipe.fileno(), setsize, PIPE_BYTES)


def serve() -> None:
    """The helper process: one range per request line, until stdin closes."""
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        try:
            path, key, lo, hi = orjson.loads(line)
            result: tuple = ("ok", read_range(path, key, int(lo), int(hi)))
        except Exception as exc:  # noqa: BLE001 - said to the parent, which reads in-process
            result = ("error", f"{type(exc).__name__}: {exc}")
        data = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
        out.write(struct.pack("<Q", len(data)) + data)
        out.flush()


class RangeReader:
    """Reads the id ranges of a long history in helper processes, in order.

    Range i goes to worker i % workers; each answers in the order asked, so the
    ranges come back in id order. `next()` returns the blocks of the next range
    (waiting for it), [] when every range was handed out, or None when the helpers
    failed (then read in-process from `position`). `position` is the last id of
    the ranges handed out.
    """

    def __init__(self, path: Path, key: str, start: int, end: int, *, rows: int,
                 workers: int = 2, ahead: int = 2, ask: bool = True):
        self.path, self.key = str(path), key
        self.position = start  # everything up to here was handed out
        self.end = end
        self.rows = rows
        self._next_lo = start
        self._asked = 0  # ranges asked so far
        self._answered = 0
        self._his: list[int] = []  # upper id of each range asked, not yet answered
        self._workers = [_Worker() for _ in range(max(1, workers))]
        self._depth = max(1, ahead) * len(self._workers)
        if ask:
            self._fill()

    @property
    def done(self) -> bool:
        return self.position >= self.end

    def _fill(self) -> None:
        while len(self._his) < self._depth and self._next_lo < self.end:
            hi = min(self.end, self._next_lo + self.rows)
            self._workers[self._asked % len(self._workers)].ask(
                self.path, self.key, self._next_lo, hi)
            self._asked += 1
            self._his.append(hi)
            self._next_lo = hi

    def next(self) -> list[RunBlock] | None:
        self._fill()
        if not self._his:
            return []
        try:
            blocks = self._workers[self._answered % len(self._workers)].answer()
            self._answered += 1
            self.position = self._his.pop(0)
            self._fill()
        except Exception:  # noqa: BLE001 - the helpers only speed reading up
            self.close()
            return None
        return blocks

    def close(self) -> None:
        for w in self._workers:
            w.close()
        self._workers = []
        self._his = []


class HelperReading:
    """A source's long history read by helper processes, range by range.

    Tried once (again after `close`): `start` starts the helpers when the history
    has at least `min_rows` rows; `next()` gives the blocks of the next range and the
    last id they reach, or None when nothing is read this way (no helpers, or one
    failed: the caller reads the rest itself, from where they stopped)."""

    def __init__(self) -> None:
        self.reader: RangeReader | None = None
        self.tried = False

    def start(self, path: Path, key: str, last_id: int, top: int | None, *, workers: int,
              min_rows: int, block_rows: int, ask: bool = True) -> None:
        """Helpers for the rows `last_id < id <= top`, if there are enough of them;
        `ask=False` starts them (they take a moment to start) without asking yet."""
        if self.tried or workers <= 0:
            return
        self.tried = True
        if top is None or top - last_id < min_rows:
            return
        try:
            self.reader = RangeReader(path, key, last_id, int(top), rows=block_rows,
                                      workers=workers, ask=ask)
        except OSError:
            self.reader = None

    def next(self) -> tuple[list[RunBlock], int] | None:
        if self.reader is None:
            return None
        blocks = self.reader.next()
        if blocks is None:  # a helper failed
            self.reader = None
            return None
        position = self.reader.position
        if self.reader.done:
            self.reader.close()
            self.reader = None
        return blocks, position

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
            self.reader = None
            self.tried = False  # a reopened source may use them again


if __name__ == "__main__":
    # Through the imported module, so that what is pickled names its real classes.
    from carl_tui.sources.trackio import local_read  # noqa: PLW0406

    local_read.serve()
