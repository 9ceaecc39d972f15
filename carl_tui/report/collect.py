"""Read what sources hold now into a store, without a screen.

Each source is polled until it is caught up: finished, or a poll brought
nothing new after it had brought something (and the source was not behind),
or nothing arrived for `settle` seconds (a job whose log streams in from
threads). A live source that keeps producing is read until `timeout`.
Retryable failures of a remote source (`patient`) are retried with backoff until
`timeout`, after saying once (through `say`) what is awaited; the last one is then
reported. A local source (a file, a folder, a store) that fails or brings nothing for
`settle` seconds holds what it holds: nothing more can come by waiting. A failure that
retrying cannot fix is reported at once.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from carl_tui.errors import CarlError, describe
from carl_tui.events import Event, SourceStatus
from carl_tui.sources.base import Backoff, status_of
from carl_tui.store import RunStore


@dataclass
class _Progress:
    source: object
    got_data: bool = False
    last_data: float = 0.0
    started: float = 0.0
    backoff: Backoff = field(default_factory=lambda: Backoff(base=0.2, cap=2.0))
    last_error: str = ""
    next_poll: float = 0.0
    said: bool = False


def collect(
    sources: Sequence[object],
    store: RunStore,
    *,
    timeout: float = 60.0,
    settle: float = 2.0,
    on_events: Callable[[Sequence[Event]], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    patient: bool = True,
    say: Callable[[str], None] | None = None,
) -> None:
    """Poll `sources` into `store` until each is caught up. Raises CarlError (kind
    "empty" for a local source that holds nothing)."""
    start = clock()
    deadline = start + timeout
    pending = [_Progress(s, started=start, last_data=start) for s in sources]
    waiting = _Waiting(deadline, settle, patient, say, clock)
    try:
        while pending:
            now = clock()
            for p in list(pending):
                if now < p.next_poll:
                    continue
                if _poll(p, store, on_events, waiting):
                    pending.remove(p)
            if pending:
                if clock() > deadline:
                    stuck = [p for p in pending if p.last_error]
                    if stuck:
                        raise CarlError(f"{stuck[0].source.name}: {stuck[0].last_error}")
                    return  # live sources: what they hold now has been read
                wait = min(p.next_poll for p in pending) - clock()
                if wait > 0:  # a source that is behind is read on at once
                    time.sleep(min(wait, 0.2))
    finally:
        for s in sources:
            drain = getattr(s, "drain", None)
            held = drain() if callable(drain) else []
            if held:
                store.apply(held)
                if on_events is not None:
                    on_events(held)
            store.apply([status_of(s, "finished" if getattr(s, "finished", False) else "live")])
            with contextlib.suppress(Exception):  # closing must not hide the result
                s.close()


@dataclass
class _Waiting:
    """How long a source is waited for, and who is told about it."""

    deadline: float
    settle: float
    patient: bool
    say: Callable[[str], None] | None
    clock: Callable[[], float]

    def failed(self, p: _Progress, exc: Exception) -> bool:
        """A failed poll: True when the source is done (a local one that has data)."""
        src, message = p.source, describe(exc)
        if not getattr(exc, "retry", True):
            raise CarlError(f"{src.name}: {message}", retry=False) from None
        p.last_error = message
        now = self.clock()
        if not self.patient and now - p.last_data >= self.settle:
            if p.got_data:
                return True  # what it held has been read
            raise CarlError(f"{src.name} holds no run yet ({message})", retry=False,
                            kind="empty")
        if self.patient and not p.said and self.say is not None:
            p.said = True
            self.say(f"waiting up to {max(self.deadline - now, 0):.0f} s (--timeout) for "
                     f"{src.name}: {message}")
        p.next_poll = min(now + p.backoff.next_delay(), self.deadline)
        return False


def _poll(p: _Progress, store: RunStore, on_events, wait: _Waiting) -> bool:
    """One poll; True when this source is done."""
    src = p.source
    clock, settle = wait.clock, wait.settle
    try:
        events = src.poll()
    except Exception as exc:  # noqa: BLE001 - every failure becomes a message
        return wait.failed(p, exc)
    p.backoff.reset()
    p.last_error = ""
    data = [e for e in events if not isinstance(e, SourceStatus)]
    if events:
        store.apply(events)
        if on_events is not None:
            on_events(events)
    now = clock()
    if getattr(src, "finished", False):
        return True
    interval = float(getattr(src, "interval", 0.5))
    if data:
        p.got_data, p.last_data = True, now
        p.next_poll = now if interval == 0 else now + min(interval, 0.2)
        return False
    if interval == 0:  # behind, but this poll brought nothing: poll again soon
        p.next_poll = now + 0.05
        return False
    if p.got_data and not _threaded(src):
        return True
    if now - p.last_data >= settle:
        return True
    p.next_poll = now + min(interval, 0.2)
    return False


def _threaded(src: object) -> bool:
    """Sources fed by background threads may bring nothing on one poll and data on the next."""
    return hasattr(src, "job_id")

