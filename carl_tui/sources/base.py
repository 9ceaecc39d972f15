"""What a source is (the written contract), and the one engine that polls any source.

A source subclasses `Source`. `poll()` does one bounded unit of I/O (read what is
new, one HTTP round trip, ...) and returns the events it produced. It raises
`SourceError` (or OSError / httpx errors) on failure, and must then leave its resume
position untouched, so the next successful poll continues exactly where the last good
one stopped: no gaps, no duplicates. Everything else a caller may ask of a source is
declared on `Source` with its default; callers ask it, never probe for it.

`Poller` is the engine: one poll of one source, and what follows from it (the events,
the source's word on its runs' lives, the failure and how long to wait after it:
backoff, a file to appear, an error retrying cannot fix). `SourceRunner` loops a
`Poller` in a background thread for the dashboard; `report/collect.py` loops several
for `summary`, `export` and `fleet`, with its own "caught up" rule. No Textual import here.
"""

from __future__ import annotations

import logging
import random
import stat
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from carl_tui.errors import (
    SourceError,  # noqa: F401  (sources import it from here)
    describe,
)
from carl_tui.events import (
    SLOW_POLL_S,
    Event,
    Life,
    RunLife,
    RunMeta,
    RunRef,
    ScalarBatch,
    SourceStatus,
)
from carl_tui.sources.unused_input import UnusedInput

if TYPE_CHECKING:  # line_marks imports tail, which imports this module
    from carl_tui.sources.line_marks import Marks

#: SourceError.kind of a wait for a local file or folder to appear: looked at again
#: every WAIT_POLL_S, with no growing backoff (checking costs a stat, and a file that
#: appears is read at once).
WAITING = "waiting"
WAIT_POLL_S = 1.0

#: The longest a source that sent a preview waits for the screen to show it (its
#: `hold` event, set by the dashboard) before it reads the rest of the history.
HOLD_MAX_S = 2.0

#: The key of a Trainer's end-of-training summary (its last record).
END_OF_TRAINING = "train_runtime"

log = logging.getLogger(__name__)


class Source:
    """The contract every source keeps; each member has a default that fits a source
    that does not say more.

    - `name`: shown in the status bar, e.g. "jsonl: run.jsonl" (the status bar keys
      sources by it). `interval`: seconds between polls while live (0: a backlog is
      waiting, poll again at once).
    - `poll()` -> events; `close()` ends its I/O (no-op); `drain()` -> the events it
      holds back waiting for more input (a Trainer dict waiting for its bar): readers
      that stop at what is there now (`summary`, `export`) call it once before closing.
    - `finished`: True once nothing more can come (the end of a replay, a Trainer's
      end of training, a job that ended): polling stops. `limitation`: a reduced mode
      the status bar names ("" if none).
    - `unused_input`: what it read but could not use or does not plot (an `UnusedInput`, made
      on first use); `skipped` is its total.
    - `threaded`: fed by background threads (a poll may bring nothing and the next one
      data): readers wait for it to settle rather than stop at the first empty poll.
    - what it follows: `path` (a file or folder it reads) and `job_id` (a Hugging Face
      job), None where not.
    - `previews`: it can send a coarse preview of a long history first; `want_preview`
      asks for one (`preview`), read the rest once `hold` is set (the preview drawn).
    - `companion(run_key)`: a source that lists runs without reading each one's data
      (your Hugging Face jobs) gives the source that reads the run in view (its log);
      the dashboard asks when the run in view changes and closes the previous one.
      None (the default): the source reads its runs itself.
    - its runs' states: `report_run_state(run, state)` when it learns or changes one
      (live, finished, failed, queued); a run it sends data for and reported nothing of is
      live. `take_run_states(events)` gives what was reported since, as `RunLife` events
      (the engine calls it after each poll).
    - `completions_lines`: where the completions are in the file it reads, marked as it
      reads them (a JSONL stream's lines, a Trainer log's printed tables: `Marks`): the
      completions view reads them there, not the file a second time. None (the
      default): it marks none.
    - `slow_after_s`: a poll still running after this many seconds is said to be
      waiting, not live (a server that trickles its reply: given up on only later);
      None (the default): no poll of it is watched.
    """

    name: str = ""
    interval: float = 1.0
    finished: bool = False
    limitation: str = ""
    threaded: bool = False
    path: Path | None = None
    job_id: str | None = None
    previews: bool = False
    preview: bool = False
    hold: threading.Event | None = None
    slow_after_s: float | None = None
    completions_lines: Marks | None = None

    def poll(self) -> list[Event]:
        raise NotImplementedError

    def close(self) -> None:
        """End the source's I/O; a poll in flight may then fail (not a fault)."""

    def drain(self) -> list[Event]:
        return []

    def companion(self, run_key: str) -> Source | None:
        return None

    @property
    def unused_input(self) -> UnusedInput:
        unused_input = self.__dict__.get("_unused_input")
        if unused_input is None:
            unused_input = self.__dict__["_unused_input"] = UnusedInput()
        return unused_input

    @unused_input.setter
    def unused_input(self, value: UnusedInput) -> None:
        self.__dict__["_unused_input"] = value

    @property
    def skipped(self) -> int:
        return self.unused_input.total

    def want_preview(self, preview_shown: threading.Event | None = None) -> None:
        """Ask for a coarse preview of a long history first, and to read the rest once
        `preview_shown` is set; a source that cannot preview ignores it."""
        if self.previews:
            self.preview = True
            if preview_shown is not None:
                self.hold = preview_shown

    # -- its runs' states ------------------------------------------------------

    def _run_states(self) -> tuple[dict[str, RunLife], dict[str, RunLife]]:
        """(the last state reported per run key, those not yet taken)."""
        book = self.__dict__.get("_life_book")
        if book is None:
            book = self.__dict__["_life_book"] = ({}, {})
        return book

    def report_run_state(self, run: RunRef, state: Life, updated_at: float | None = None,
                         reason: str = "") -> None:
        """Report a run's state; reported again only when it changes."""
        said, pending = self._run_states()
        life = RunLife(run, state, updated_at, reason)
        if said.get(run.key) != life:
            said[run.key] = pending[run.key] = life

    def data_time(self) -> float | None:
        path = self.path
        if path is None:
            return None
        try:
            st = path.stat()
        except OSError:
            return None
        return st.st_mtime if stat.S_ISREG(st.st_mode) else None

    def finish_runs_at_training_end(self, events: Sequence[Event]) -> None:
        """A run whose end-of-training record is among `events` is finished: a Trainer's
        summary (`train_runtime`: a metrics line of a stream, a log's `train_summary`)."""
        for ev in events:
            if ((isinstance(ev, ScalarBatch) and END_OF_TRAINING in ev.columns)
                    or (isinstance(ev, RunMeta) and "train_summary" in ev.meta)):
                self.report_run_state(ev.run, "finished")

    def take_run_states(self, events: Sequence[Event] = ()) -> list[RunLife]:
        """The states reported since the last call; a run in `events` that was never
        reported is live. A run with data in `events` is reported with the source's
        `data_time()` (its file's time), where it has one."""
        said, pending = self._run_states()
        runs = {ev.run.key: ev.run for ev in events
                if not isinstance(ev, (SourceStatus, RunLife))}
        when = self.data_time() if runs else None
        for key, run in runs.items():
            life = said.get(key)
            if life is None:
                self.report_run_state(run, "live", when)
            elif when is not None and life.updated_at != when:
                self.report_run_state(life.run, life.state, when, life.reason)
        taken = list(pending.values())
        pending.clear()
        return taken


class PolledSource(Source):
    """What the polled sources share: `interval` is 0 while `behind` (a backlog is waiting:
    poll again at once), else the configured interval; `skipped` is the unused input's total."""

    behind = False
    _interval = 1.0

    @property
    def interval(self) -> float:  # type: ignore[override]
        return 0.0 if self.behind else self._interval

    @interval.setter
    def interval(self, value: float) -> None:
        self._interval = value


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


def status_of(source: Source, state: str, message: str = "", **kw) -> SourceStatus:
    """The source's health as the status bar shows it: state, message, what it skipped
    (by reason) and what it read but does not plot."""
    unused_input = source.unused_input
    return SourceStatus(
        source=source.name or type(source).__name__,
        state=state,  # type: ignore[arg-type]
        message=message,
        skipped=source.skipped,
        limitation=source.limitation,
        skip_reasons=tuple((r.reason, r.count, r.example) for r in unused_input.reasons()),
        not_plotted=unused_input.notes(),
        follows=source.path is not None,
        **kw,
    )


def placed(events: Sequence[Event], lives: Sequence[RunLife]) -> list[Event]:
    """`events` with each life right after its run's last event (the store orders runs
    by their latest event: a life must not move a run ahead of the others)."""
    if not lives:
        return list(events)
    last = {ev.run.key: i for i, ev in enumerate(events) if not isinstance(ev, SourceStatus)}
    after: dict[int, list[Event]] = {}
    tail: list[Event] = []
    for life in lives:
        i = last.get(life.run.key)
        (tail if i is None else after.setdefault(i, [])).append(life)
    out: list[Event] = []
    for i, ev in enumerate(events):
        out.append(ev)
        out.extend(after.get(i, ()))
    return out + tail


@dataclass
class Outcome:
    """What one poll came to. `events`: what to apply, lives placed among them; `data`:
    the poll brought more than status; on failure `error`, with `state` ("retrying", or
    "error" where retrying cannot help) and `delay` (how long to wait first)."""

    events: list[Event] = field(default_factory=list)
    data: bool = False
    error: Exception | None = None
    state: str = "live"
    delay: float = 0.0

    @property
    def message(self) -> str:
        return "" if self.error is None else describe(self.error)

    @property
    def retry(self) -> bool:
        return self.error is None or self.state != "error"


class Poller:
    """The engine: one poll of one source at a time, and what follows from it."""

    #: how long to wait after an error retrying cannot fix (in case the user fixes it)
    GIVE_UP_S = 30.0

    def __init__(self, source: Source, backoff: Backoff | None = None):
        self.source = source
        self.backoff = backoff or Backoff()

    def poll(self) -> Outcome:
        source = self.source
        try:
            events = source.poll()
        except Exception as exc:  # noqa: BLE001  (any failure becomes a visible status)
            return self.failed(exc)
        self.backoff.reset()
        data = any(not isinstance(e, SourceStatus) for e in events)
        return Outcome(placed(events, source.take_run_states(events)), data)

    def failed(self, exc: Exception) -> Outcome:
        """A failed poll: whether retrying can help, and how long to wait first."""
        if not getattr(exc, "retry", True):
            # A directory, a wrong name, a refused token: say so, and look again only
            # rarely, in case the user fixes it outside.
            return Outcome(error=exc, state="error", delay=max(self.backoff.cap, self.GIVE_UP_S))
        if getattr(exc, "kind", "") == WAITING:
            delay = WAIT_POLL_S  # a file to appear: no growing backoff
        else:
            delay = self.backoff.next_delay()
        return Outcome(error=exc, state="retrying", delay=delay)

    def drain(self) -> list[Event]:
        """What the source held back, with its lives (the reader stops here)."""
        held = self.source.drain()
        return placed(held, self.source.take_run_states(held))

    def status(self, message: str = "", **kw) -> SourceStatus:
        """The source's health now: finished or live."""
        state = "finished" if self.source.finished else "live"
        return status_of(self.source, state, message, **kw)

    @property
    def done(self) -> bool:
        return self.source.finished


class SourceRunner:
    """Polls one source in a daemon thread until stopped (a `Poller` in a loop).

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
        self.poller = Poller(source, backoff)
        self.backoff = self.poller.backoff
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_good: float | None = None
        self.last_state: str | None = None
        self._last_skipped = 0
        self.slow = False  # the last poll was slow (SLOW_POLL_S): "answering slowly"
        # True while the source reports a backlog (interval 0): history is loading.
        self.catching_up = False
        # A watched poll (slow_after_s): its number, and one status at a time.
        self._polls = 0
        self._said = threading.Lock()

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
        with self._said:
            self.last_state = state
            self.emit([status_of(self.source, state, message, last_good=self.last_good,
                                 **kw)])

    def _slow(self, poll: int, after: float) -> None:
        """A watched poll still running after `after` s: the source is waiting, not live
        (said only while that poll runs; its outcome is said after it)."""
        with self._said:
            if poll != self._polls:
                return
            self.last_state = "connecting"
            self.emit([status_of(
                self.source, "connecting", f"no whole reply within {after:g} s; still "
                "waiting", last_good=self.last_good)])

    def _watched_poll(self) -> Outcome:
        after = self.source.slow_after_s
        if not after:
            return self.poller.poll()
        with self._said:
            self._polls += 1
            poll = self._polls
        timer = threading.Timer(after, self._slow, (poll, after))
        timer.daemon = True
        timer.start()
        try:
            return self.poller.poll()
        finally:
            timer.cancel()
            with self._said:
                self._polls += 1  # a late timer of this poll says nothing

    def poll_once(self) -> float:
        """One poll; returns how long to wait before the next one."""
        began = time.monotonic()
        out = self._watched_poll()
        slow = time.monotonic() - began > SLOW_POLL_S
        if out.error is not None:
            if self._stop.is_set():
                return 0.0  # stopped mid-poll (the source was closed under it): not a fault
            # "retrying" (with backoff, or every WAIT_POLL_S for a file to appear), or
            # "error" where retrying cannot help: then looked at again only rarely.
            self._status(out.state, out.message, retry_in=out.delay)
            return out.delay
        self.last_good = time.time()
        self.catching_up = bool(out.events) and self.source.interval == 0
        if out.events:
            try:
                self.emit(out.events)
            except Exception as exc:
                log.exception("applying events of %s", self.source.name)
                self._status("error", f"could not apply data: {describe(exc)}")
                return self.source.interval
        state = "finished" if self.poller.done else "live"
        skipped = self.source.skipped
        # Report health on every change, and whenever new data arrived (fresh
        # last-update time) or more input was skipped.
        if (state != self.last_state or out.events or skipped != self._last_skipped
                or slow != self.slow):
            self._last_skipped, self.slow = skipped, slow
            self._status(state, slow=slow)
        return self.source.interval

    def run(self) -> None:
        """The polling loop; returns when stopped or when the source is finished."""
        self._status("connecting")
        while not self._stop.is_set():
            delay = self.poll_once()
            if self.poller.done:
                return
            self._stop.wait(delay)


def short_path(p: Path) -> str:
    """A path's last two parts (`runs/sft`), for a source's name in the status bar."""
    parts = p.parts[-2:] if len(p.parts) > 1 else p.parts
    return str(Path(*parts)) if parts else str(p)
