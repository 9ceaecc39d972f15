"""Read what sources hold now into a store, without a screen.

Each source is polled (by the engine, `sources.base.Poller`, as the dashboard polls
it) until it is caught up: finished, or a poll brought nothing new after it had
brought something (and the source was not behind), or nothing arrived for `settle`
seconds (a source fed by threads: a job whose log streams in). A live source that
keeps producing is read until `timeout`.
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
from dataclasses import dataclass

from carl_tui.errors import CarlError
from carl_tui.events import Event
from carl_tui.sources.base import Backoff, Outcome, Poller, Source
from carl_tui.store import RunStore


@dataclass
class _Progress:
    poller: Poller
    got_data: bool = False
    last_data: float = 0.0
    last_error: str = ""
    next_poll: float = 0.0
    said: bool = False

    @property
    def source(self) -> Source:
        return self.poller.source


def collect(
    sources: Sequence[Source],
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
    pending = [_Progress(Poller(s, Backoff(base=0.2, cap=2.0)), last_data=start)
               for s in sources]
    pollers = [p.poller for p in pending]
    waiting = _Waiting(deadline, settle, patient, say, clock)

    def apply(events: Sequence[Event]) -> None:
        if events:
            store.apply(events)
            if on_events is not None:
                on_events(events)

    try:
        while pending:
            now = clock()
            for p in list(pending):
                if now < p.next_poll:
                    continue
                if _poll(p, apply, waiting):
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
        for poller in pollers:
            apply(poller.drain())
            store.apply([poller.status()])
            with contextlib.suppress(Exception):  # closing must not hide the result
                poller.source.close()


@dataclass
class _Waiting:
    """How long a source is waited for, and who is told about it."""

    deadline: float
    settle: float
    patient: bool
    say: Callable[[str], None] | None
    clock: Callable[[], float]

    def failed(self, p: _Progress, out: Outcome) -> bool:
        """A failed poll: True when the source is done (a local one that has data)."""
        src, message = p.source, out.message
        if not out.retry:
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
        p.next_poll = min(now + out.delay, self.deadline)
        return False


def _poll(p: _Progress, apply: Callable[[Sequence[Event]], None], wait: _Waiting) -> bool:
    """One poll; True when this source is done."""
    src = p.source
    clock, settle = wait.clock, wait.settle
    out = p.poller.poll()
    if out.error is not None:
        return wait.failed(p, out)
    p.last_error = ""
    apply(out.events)
    now = clock()
    if p.poller.done:
        return True
    interval = float(src.interval)
    if out.data:
        p.got_data, p.last_data = True, now
        p.next_poll = now if interval == 0 else now + min(interval, 0.2)
        return False
    if interval == 0:  # behind, but this poll brought nothing: poll again soon
        p.next_poll = now + 0.05
        return False
    if p.got_data and not src.threaded:
        return True
    if now - p.last_data >= settle:
        return True
    p.next_poll = now + min(interval, 0.2)
    return False
