"""Play a recorded stream (the JSONL format of `sources.jsonl`) back in time.

Each line is released when its recorded `time` (relative to the first line's)
has elapsed on `clock`, scaled by `speed` (2.0 = twice as fast). Lines without
a `time` (meta, markers, logs) go out with the line before them. `speed` 0 or
infinity releases everything at the first poll. Wall times in the batches are
shifted so the recording appears to happen now. `finished` becomes True after
the last line. Default run identity: source "replay", project = the file's
folder name, run_id = the file's stem (a meta line may set them).

The recording is read whole at the first poll. Lines are skipped and counted
in `unused_input` by the rules of `sources.jsonl` (a UTF-8 byte order mark at the
start is accepted; the last line needs no newline). A missing file is waited
for; a directory, a pipe (FIFO: follow it with `--watch` instead) or a device
is refused at once with a plain message (`SourceError(..., retry=False)`).
"""

from __future__ import annotations

import math
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from carl_tui.events import Event, RunRef
from carl_tui.identity import file_run
from carl_tui.sources.base import WAITING, Source, SourceError
from carl_tui.sources.jsonl import StreamParser
from carl_tui.sources.rows import TIME_KEY
from carl_tui.sources.tail import BOM, stat_path, unusable
from carl_tui.sources.unused_input import UnusedInput

MAX_INTERVAL = 0.25
_O_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def _line_time(line: bytes) -> float | None:
    if TIME_KEY.encode() not in line:
        return None
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    value = obj.get(TIME_KEY) if type(obj) is dict else None
    if type(value) in (int, float) and math.isfinite(value):
        return float(value)
    return None


class ReplaySource(Source):
    """Releases the lines of a recording as their recorded time comes."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        speed: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        run: RunRef | None = None,
        wall_clock: Callable[[], float] = time.time,
    ):
        self.path = Path(path)
        self.name = f"replay: {self.path.name}"
        self.speed = float(speed)
        self.clock = clock
        self.wall_clock = wall_clock
        explicit = run is not None
        self.unused_input = UnusedInput()
        self.parser = StreamParser(
            run or file_run(self.path, "replay"), explicit=explicit, unused_input=self.unused_input
        )
        self.finished = False
        self.limitation = ""
        self._lines: list[bytes] | None = None
        self._due: list[float] = []  # seconds after the start at which each line is due
        self._next = 0
        self._start: float | None = None
        self._time_offset = 0.0

    @property
    def run(self) -> RunRef:
        return self.parser.run

    @property
    def skipped(self) -> int:
        return self.unused_input.total

    @property
    def fast(self) -> bool:
        return self.speed <= 0 or math.isinf(self.speed)

    @property
    def interval(self) -> float:
        """Time until the next line is due (at most MAX_INTERVAL)."""
        if self.finished or self._start is None or self.fast or self._lines is None:
            return 0.0 if not self.finished else MAX_INTERVAL
        wait = self._due[self._next] / self.speed - (self.clock() - self._start)
        return min(MAX_INTERVAL, max(0.0, wait))

    def _read(self) -> bytes:
        st = stat_path(self.path)
        if st is None:
            raise SourceError(f"waiting for {self.path}", kind=WAITING)
        if stat.S_ISFIFO(st.st_mode):
            raise SourceError(
                f"{self.path} is a pipe (FIFO), not a recording; follow it with --watch",
                retry=False, kind="invalid",
            )
        err = unusable(self.path, st, fifo_ok=False)
        if err is not None:
            raise err
        try:
            # Non-blocking: a FIFO put there since the stat must not block the open.
            with os.fdopen(os.open(self.path, _O_FLAGS), "rb") as fh:
                if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):  # changed since the stat
                    raise SourceError(f"{self.path} is not a file", retry=False, kind="invalid")
                return fh.read()
        except FileNotFoundError:
            raise SourceError(f"waiting for {self.path}", kind=WAITING) from None
        except IsADirectoryError:  # became one since the stat
            raise SourceError(f"{self.path} is a directory, not a file; give the path of a file",
                              retry=False, kind="invalid") from None
        except OSError as exc:
            raise SourceError(f"cannot read {self.path}: {exc.strerror or exc}") from None

    def _load(self) -> None:
        data = self._read().removeprefix(BOM)
        lines = [line for line in data.split(b"\n") if line.strip()]
        first: float | None = None
        due, last = [], 0.0
        for line in lines:
            t = _line_time(line)
            if t is not None:
                if first is None:
                    first = t
                last = max(last, t - first)
            due.append(last)
        self._lines, self._due = lines, due
        self._time_offset = self.wall_clock() - first if first is not None else 0.0

    def poll(self) -> list[Event]:
        if self._lines is None:
            self._load()
        assert self._lines is not None
        if self._start is None:
            self._start = self.clock()
        if self.fast:
            end = len(self._lines)
        else:
            elapsed = (self.clock() - self._start) * self.speed
            end = self._next
            while end < len(self._lines) and self._due[end] <= elapsed:
                end += 1
        events = self.parser.parse(self._lines[self._next : end], time_offset=self._time_offset)
        self._next = end
        if end >= len(self._lines):
            self.finished = True
            self.report_run_state(self.run, "finished")  # the recording's end: its run has ended
        return events

    def close(self) -> None:
        pass
