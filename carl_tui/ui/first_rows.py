"""A big fleet's first screen of rows, read on the machine's second core while the
screen starts (`carl-tui fleet` on a local Trackio project).

Python, Textual and the app take about 0.4 s to their first frame; the project's runs
take about as long to read (their configs and newest rows, `local_preview`), and both
hold the interpreter's lock, so a thread gains nothing. `FirstRows` forks the command
before Textual is imported: the child reads the sources once (as the app's first poll
reads them), keeps them in a store of its own and sends back the rows a screen shows
(`fleet_rows(first=...)`, the newest) and the number of runs, then exits. The fleet
table shows them until the app's own store holds the runs; from then on every row is
the app's own reading, as without it.

Nothing depends on the child: where fork is missing, or the child fails, is slow or
finds nothing, the table reads its rows as it always does. The child never writes to
the terminal, and is stopped after `CHILD_LIMIT_S` whatever it is doing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

#: A fleet of more runs than this, or than the screen has lines, shows the rows a screen
#: holds first (the newest), then every row at once: a thousand runs' rows take a while.
FIRST_ROWS = 64
#: The child's time limit (a project locked by a writer for long: the app reads it anyway).
CHILD_LIMIT_S = 20


class FirstRows:
    """Forked at once: `result()` is (rows, runs) once the child sent them, ([], 0) once
    it ended without (or where there is no fork), None meanwhile."""

    def __init__(self, make_sources: Callable[[], list[Any]], rows: int) -> None:
        self._got: tuple[list, int] | None = None
        self._pid = 0
        if not hasattr(os, "fork"):
            self._got = ([], 0)
            return
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.close(read_end)
            _child(make_sources, rows, write_end)
        os.close(write_end)
        self._pid = pid
        self._thread = threading.Thread(target=self._take, args=(read_end,), daemon=True,
                                        name="first-rows")
        self._thread.start()

    def result(self) -> tuple[list, int] | None:
        return self._got

    def _take(self, fd: int) -> None:
        """Read the child's answer (none: it found nothing, failed or was stopped) and
        reap it; nothing it sends can fail the app (this thread writes nothing)."""
        try:
            with os.fdopen(fd, "rb") as pipe:
                data = pipe.read()
            if data:
                self._got = pickle.loads(data)  # our own child, through our own pipe
        except Exception as exc:  # noqa: BLE001 - a cut answer: the app reads its rows itself
            log.debug("the rows read ahead were lost: %s", exc)
        finally:
            if self._got is None:
                self._got = ([], 0)
            with contextlib.suppress(OSError):
                os.waitpid(self._pid, 0)


def _child(make_sources: Callable[[], list[Any]], rows: int, fd: int) -> None:
    """Read the sources once, send the first `rows` rows and the run count, and exit
    (`os._exit`: none of the parent's exit handlers, buffers or terminal state)."""
    import signal

    code = 1
    try:
        signal.alarm(CHILD_LIMIT_S)
        devnull = os.open(os.devnull, os.O_RDWR)
        for std in (0, 1, 2):  # never the terminal: the parent is about to draw on it
            os.dup2(devnull, std)
        # numpy's BLAS threads spin for a while once started, on the core the parent needs
        os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = "1"
        from carl_tui.store.fleet import first_rows_of

        got = first_rows_of(make_sources(), rows, now=time.time())
        if got[1]:
            data = pickle.dumps(got)
            with os.fdopen(fd, "wb") as pipe:
                pipe.write(data)
        code = 0
    finally:
        os._exit(code)
