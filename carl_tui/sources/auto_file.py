"""A file read as a JSONL stream or a Trainer log, decided by its first bytes (the
dashboard's `--watch FILE` with no `--file-format`). Its own module: it loads the source
contract, which the dashboard's first frame does without (`open.py` imports it lazily)."""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path

from carl_tui.events import Event, RunLife
from carl_tui.sources.base import WAITING, Source, SourceError
from carl_tui.sources.file_format import SNIFF_BYTES, file_source, sniff_format
from carl_tui.sources.tail import stat_path, unusable
from carl_tui.sources.unused_input import UnusedInput


class AutoFileSource(Source):
    """Reads a file as a JSONL stream or a Trainer log, decided by its first bytes.

    Until the file exists and has a first line, it waits (and says so). A FIFO
    cannot be looked into without consuming it: it is read as a JSONL stream.
    Its name stays `file: NAME` (the status bar keys sources by name). Once decided, the
    reader it chose (`inner`) answers for it: what it declares below is the reader's.
    """

    previews = True  # passed on to the reader it picks (a JSONL stream previews)

    def __init__(self, path: Path, *, run=None):
        self.path = Path(path)
        self.name = f"file: {self.path.name}"
        self._run = run
        self.inner: Source | None = None
        self._since = time.time()  # lines rotated away after this are read (tail.py)
        self._wish: tuple[threading.Event | None] | None = None  # a preview asked for

    def _decide(self) -> str | None:
        st = stat_path(self.path)
        if st is None:
            return None
        error = unusable(self.path, st)
        if error is not None:
            raise error
        if stat.S_ISFIFO(st.st_mode):
            return "jsonl"
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
            with os.fdopen(fd, "rb") as fh:
                head = fh.read(SNIFF_BYTES)
        except OSError:
            return None
        return sniff_format(head)

    def want_preview(self, preview_shown: threading.Event | None = None) -> None:
        self._wish = (preview_shown,)  # asked by the dashboard, maybe before the file exists
        if self.inner is not None:
            self.inner.want_preview(preview_shown)

    def poll(self) -> list[Event]:
        if self.inner is None:
            fmt = self._decide()
            if fmt is None:
                raise SourceError(f"waiting for {self.path}", kind=WAITING)
            self.inner = file_source(self.path, fmt, self._run, self._since)
            if self._wish is not None:
                self.inner.want_preview(*self._wish)
        return self.inner.poll()

    # -- the chosen reader's, once there is one ----------------------------------

    @property
    def finished(self) -> bool:  # type: ignore[override]
        return self.inner is not None and self.inner.finished

    @property
    def interval(self) -> float:  # type: ignore[override]
        return 0.5 if self.inner is None else self.inner.interval

    @property
    def completions_lines(self):  # type: ignore[override]
        return None if self.inner is None else self.inner.completions_lines

    @property
    def limitation(self) -> str:  # type: ignore[override]
        return "" if self.inner is None else self.inner.limitation

    @property
    def unused_input(self) -> UnusedInput:  # type: ignore[override]
        return Source.unused_input.fget(self) if self.inner is None else self.inner.unused_input

    @property
    def skipped(self) -> int:
        return 0 if self.inner is None else self.inner.skipped

    def drain(self) -> list[Event]:
        return [] if self.inner is None else self.inner.drain()

    def take_run_states(self, events=()) -> list[RunLife]:
        return [] if self.inner is None else self.inner.take_run_states(events)

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()
