"""What a source is, and the one loop that polls any source with backoff.

A source is a plain object with `poll() -> list[Event]`. `poll` does one
bounded unit of I/O (read what is new, one HTTP round trip, ...) and returns
the events it produced. It raises `SourceError` (or OSError / httpx errors) on
failure, and must then leave its resume position untouched, so the next
successful poll continues exactly where the last good one stopped: no gaps, no
duplicates.

`SourceRunner` drives a source from a background thread: poll, hand events to
a callback, sleep the source's interval; on failure retry with capped
exponential backoff and report `SourceStatus` events for the status bar.
No Textual import here.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from carl_tui.errors import (
    SourceError,  # noqa: F401  (sources import it from here)
    describe,
)
from carl_tui.events import Event, SourceStatus
from carl_tui.sources.tally import InputTally

#: SourceError.kind of a wait for a local file or folder to appear: looked at again
#: every WAIT_POLL_S, with no growing backoff (checking costs a stat, and a file that
#: appears is read at once).
WAITING = "waiting"
WAIT_POLL_S = 1.0

#: The longest a source that sent a preview waits for the screen to show it (its
#: `hold` event, set by the dashboard) before it reads the rest of the history.
HOLD_MAX_S = 2.0

log = logging.getLogger(__name__)


@runtime_checkable
class Source(Protocol):
    name: str  # shown in the status bar, e.g. "jsonl: run.jsonl"
    interval: float  # seconds between polls while live

    def poll(self) -> list[Event]: ...

    def close(self) -> None: ...


# Optional: `drain() -> list[Event]` releases what a source holds back waiting for more
# input (a Trainer log dict waiting for the bar that places it). Readers that stop at the
# end of what is there now (`summary`, `export`) call it once before closing.


class PolledSource:
    """What the polled sources share: `interval` is 0 while `behind` (a backlog is waiting:
    poll again at once), else the configured interval; `skipped` is the tally's total."""

    behind = False
    _interval = 1.0
    tally: InputTally

    @property
    def interval(self) -> float:
        return 0.0 if self.behind else self._interval

    @interval.setter
    def interval(self, value: float) -> None:
        self._interval = value

    @property
    def skipped(self) -> int:
        return self.tally.total


class Backoff:
    """Capped exponential backoff with jitter: base, 2*base, 4*base, ... <= cap."""

    def __init__(self, base: float = 0.5, cap: float = 30.0, jitter: float = 0.1):
        self.base, self.cap, self.jitter = base, cap, jitter
        self.failures = 0

    def next_delay(self) -> float:
        delay = min(self.cap, self.base * (2**self.failures))
        self.failures += 1
        return delay * (1 + random.uniform(-self.jitter, self.jitter))

    def reset(self) -> None:
        self.failures = 0




def status_of(source: object, state: str, message: str = "", **kw) -> SourceStatus:
    """The source's health as the status bar shows it: state, message, what it skipped
    (by reason) and what it read but does not plot."""
    tally = getattr(source, "tally", None)
    reasons: tuple[tuple[str, int, str], ...] = ()
    notes: tuple[tuple[str, int], ...] = ()
    if isinstance(tally, InputTally):
        reasons = tuple((r.reason, r.count, r.example) for r in tally.reasons())
        notes = tally.notes()
    return SourceStatus(
        source=getattr(source, "name", type(source).__name__),
        state=state,  # type: ignore[arg-type]
        message=message,
        skipped=_skipped(source),
        limitation=getattr(source, "limitation", ""),
        skip_reasons=reasons,
        not_plotted=notes,
        **kw,
    )


def _skipped(source: object) -> int:
    """Skipped input so far: the source's tally, else its `skipped` count."""
    tally = getattr(source, "tally", None)
    if isinstance(tally, InputTally):
        return tally.total
    return int(getattr(source, "skipped", 0) or 0)


class SourceRunner:
    """Polls one source in a daemon thread until stopped.

    `emit(events)` is called from the runner thread with each non-empty batch
    of events, followed by status events when the health changes. A source
    that sets `finished = True` stops being polled (after a last status).
    """

    def __init__(
        self,
        source: Source,
        emit: Callable[[Sequence[Event]], None],
        *,
        backoff: Backoff | None = None,
    ):
        self.source = source
        self.emit = emit
        self.backoff = backoff or Backoff()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_good: float | None = None
        self.last_state: str | None = None
        self._last_skipped = 0
        # True while the source reports a backlog (interval 0): history is loading.
        self.catching_up = False

    def start(self) -> SourceRunner:
        self._thread = threading.Thread(
            target=self.run, name=f"source:{self.source.name}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        """Ask the loop to end and close the source; wait up to `timeout` for the thread."""
        self._stop.set()
        try:
            self.source.close()
        except Exception:  # closing must never raise into the UI
            log.exception("closing source %s", self.source.name)
        self.join(timeout)

    def join(self, timeout: float) -> None:
        if (
            timeout > 0
            and self._thread is not None
            and self._thread is not threading.current_thread()
        ):
            self._thread.join(timeout)

    def _status(self, state: str, message: str = "", **kw) -> None:
        self.last_state = state
        self.emit([status_of(self.source, state, message, last_good=self.last_good, **kw)])

    def poll_once(self) -> float:
        """One poll; returns how long to wait before the next one."""
        try:
            events = self.source.poll()
        except Exception as exc:  # noqa: BLE001  (any failure becomes a visible status)
            if self._stop.is_set():
                return 0.0  # stopped mid-poll (the source was closed under it): not a fault
            if not getattr(exc, "retry", True):
                # Retrying cannot help (a directory, a wrong name, a refused token): say so,
                # and look again only rarely, in case the user fixes it outside.
                delay = max(self.backoff.cap, 30.0)
                self._status("error", describe(exc), retry_in=delay)
                return delay
            if getattr(exc, "kind", "") == WAITING:
                delay = WAIT_POLL_S  # a file to appear: no growing backoff
            else:
                delay = self.backoff.next_delay()
            self._status("retrying", describe(exc), retry_in=delay)
            return delay
        self.backoff.reset()
        self.last_good = time.time()
        self.catching_up = bool(events) and self.source.interval == 0
        if events:
            try:
                self.emit(events)
            except Exception as exc:
                log.exception("applying events of %s", self.source.name)
                self._status("error", f"could not apply data: {describe(exc)}")
                return self.source.interval
        finished = bool(getattr(self.source, "finished", False))
        state = "finished" if finished else "live"
        skipped = _skipped(self.source)
        # Report health on every change, and whenever new data arrived (fresh
        # last-update time) or more input was skipped.
        if state != self.last_state or events or skipped != self._last_skipped:
            self._last_skipped = skipped
            self._status(state)
        return self.source.interval

    def run(self) -> None:
        """The polling loop; returns when stopped or when the source is finished."""
        self._status("connecting")
        while not self._stop.is_set():
            delay = self.poll_once()
            if getattr(self.source, "finished", False):
                return
            self._stop.wait(delay)


def short_path(p: Path) -> str:
    """A path's last two parts (`runs/sft`), for a source's name in the status bar."""
    parts = p.parts[-2:] if len(p.parts) > 1 else p.parts
    return str(Path(*parts)) if parts else str(p)
