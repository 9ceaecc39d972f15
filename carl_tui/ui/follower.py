"""Following runs: sources feed the store in worker threads; the UI thread takes
snapshots of the run on screen when the store changed.

`Follower` owns the store, the source runners and the run on screen, chosen by one
intent (`run_choice.Want`: the newest, the run named, a run to follow as soon as it
appears, a project just opened, the user's pick) through `run_choice.choose_run`;
`pacing.Pacer` paces its snapshots and `companion.Companions` opens the source that
reads only the run in view.
It talks to the UI only by posting messages: `StoreChanged` from the source threads
(one collapsing message: it replaces a queued older one) and, from `pull` on the UI
thread, one `SnapshotUpdated` per update (the snapshot of the run on screen, the runs
compared with it, the notices to raise). It never calls into the app or its widgets.

Every write to the store goes through `emit` (the sources' threads, and the actions'
results: a launched job's meta, a job's new state), so every write wakes the UI.

Newest first, coarse to fine: every source that can (`Source.previews`) is
asked for a coarse preview of a long history before reading it all (see
`store/preview.py`); the first snapshot of a run is shown at once, later ones are
paced while a backlog is read (`pacing.py`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from carl_tui.sources.base import Source, SourceRunner
from carl_tui.store import Notice, RunSnapshot, RunStore
from carl_tui.store.notice_groups import (
    HISTORY_SOURCES,
    NoticeGrouper,
    history_line,
    is_history,
)
from carl_tui.ui.companion import Companions
from carl_tui.ui.format import age_text
from carl_tui.ui.messages import SnapshotUpdated, StoreChanged
from carl_tui.ui.pacing import Pacer
from carl_tui.ui.run_choice import NEWEST, PICKED, Intent, Want, choose_run

if TYPE_CHECKING:  # pragma: no cover
    from textual.message import Message

    from carl_tui.events import Event, RunRef

MAX_HISTORY = 50  # notices of history kept per run (the line names each kind's latest)
# Notices from runs not on screen interrupt only for these.
ALWAYS_SHOWN = ("phase_transition", "job")


def enable_preview(source: Source, preview_shown: threading.Event | None = None) -> Source:
    """Ask `source` for a coarse preview of a long history first, when it can give one
    (a wrapper that picks its reader later passes the wish on), and to read the rest
    once `preview_shown` is set (the preview is on screen)."""
    source.want_preview(preview_shown)
    return source


MAX_COMPARED = 7  # runs overlaid on the run on screen, at most


class Follower:
    def __init__(self, post: Callable[[Message], object], store: RunStore,
                 sources: Sequence[Source], preferred: str | None,
                 clock: Callable[[], float] = time.time):
        self.post = post  # where its messages go (the app's queue: thread-safe)
        self.store = store
        # What happened before the dashboard opened is history: recorded (the events
        # view) and said in one quiet line, never rung, toasted or sent to the desktop.
        self.opened_at = clock()
        self.history: dict[str, list[Notice]] = {}  # run key -> its notices of history
        self.first_snapshot_shown = threading.Event()  # the first snapshot of a run is on screen
        self.runners = [SourceRunner(enable_preview(s, self.first_snapshot_shown), self.emit)
                        for s in sources]
        self.current_run: str | None = None
        self.snapshot: RunSnapshot | None = None
        self._seen_version: object = -1
        self._seen_store_version = -1
        self.compare: tuple[str, ...] = ()  # run keys overlaid on the run on screen
        self.overlay = False  # every run of its project overlaid
        self.pacer = Pacer()
        self._started = False
        # No run named: the most recently active run (the rule `summary` follows too);
        # --run NAME: that run once read, another meanwhile.
        self.want = NEWEST if preferred is None else Want(Intent.NAMED, preferred)
        self._told: str | None = None  # the automatic choice last announced
        self.grouper = NoticeGrouper()  # "12 runs crystallised", not 12 notices
        self.companions = Companions(self.runners, self.add_source, self.emit)
        # No run is in view (the fleet table covers the dashboard, before a run was
        # opened): no snapshot is taken, no companion opened.
        self.hidden = False

    # -- sources ---------------------------------------------------------------

    def start(self) -> None:
        """Start reading every source (once; a source added later starts at once)."""
        if self._started:
            return
        self._started = True
        for runner in self.runners:
            self._start(runner)

    def _start(self, runner: SourceRunner) -> None:
        # A daemon thread of the runner's own rather than a Textual worker: a source
        # blocked in I/O (a hung server, a FIFO nobody writes) must never hold up quitting.
        runner.start()

    def add_source(self, source: Source, *, follow: str | None = None) -> SourceRunner:
        """Start polling another source (a launched job, a chosen project); with
        `follow`, switch to that run key as soon as it has data."""
        runner = SourceRunner(enable_preview(source, self.first_snapshot_shown), self.emit)
        self.runners.append(runner)
        if self._started:
            self._start(runner)
        if follow:
            self.follow(follow)
        return runner

    def follows_job(self, job_id: str) -> bool:
        return any(r.source.job_id == job_id for r in self.runners)

    def follows_file(self, path: str | os.PathLike) -> bool:
        """A source already reads this file (whether or not it has written a line yet)."""
        want = Path(path).resolve()
        return any(r.source.path is not None
                   and Path(r.source.path).resolve() == want for r in self.runners)

    def stop(self, timeout: float = 0.3) -> None:
        """Stop every runner without waiting on their I/O for long (a hung server
        must not hold up quitting: runner threads are daemons)."""
        self.first_snapshot_shown.set()
        for runner in self.runners:
            runner.stop(timeout=0)
        deadline = time.monotonic() + timeout
        for runner in self.runners:
            runner.join(max(0.0, deadline - time.monotonic()))

    def emit(self, events: Iterable[Event]) -> None:
        """The one way into the store (source threads, the actions' workers, the UI
        thread): store the events, wake the UI (a queued StoreChanged is replaced by the
        newer one: a burst wakes it once)."""
        self.store.apply(list(events))
        self.post(StoreChanged())

    @property
    def catching_up(self) -> bool:
        return any(r.catching_up for r in self.runners)

    @property
    def all_heard(self) -> bool:
        """Every source has answered once (with data, nothing, or a fault): only then is
        the count of runs the count there is (14 sources: "of 5 runs" was said)."""
        return all(r.last_good is not None or r.last_state not in (None, "connecting")
                   for r in self.runners)

    # -- the run on screen -----------------------------------------------------

    @property
    def companion(self) -> SourceRunner | None:
        """The source reading only the run in view (a job's log), while one is open."""
        return self.companions.runner

    def follow(self, run_key: str) -> None:
        """Show this run now, or as soon as its first event arrives."""
        self.want = Want(Intent.RUN, run_key)
        self._seen_store_version = -1

    def follow_project(self, project: str) -> None:
        self.want = Want(Intent.PROJECT, project)
        self._seen_store_version = -1

    def switch_run(self, key: str) -> None:
        self.want = PICKED
        self.current_run = key
        self._seen_version = -1
        self._seen_store_version = -1

    def reveal(self) -> None:
        """The run on screen is in view again (the fleet table closed): its snapshot is
        taken at the next pull (none is taken while hidden)."""
        self.hidden = False
        self._seen_version = -1
        self._seen_store_version = -1
        self._view()

    def _view(self) -> None:
        """The run in view may have changed: its companion source opens (none is opened
        while hidden)."""
        if not self.hidden:
            self.companions.view(self.current_run)

    def compare_with(self, keys: Sequence[str], overlay: bool) -> None:
        """Overlay these runs (or, with `overlay`, every run of the project) on the run on
        screen, from the next update on."""
        self.compare, self.overlay = tuple(keys), overlay
        self._seen_version = -1
        self._seen_store_version = -1

    def pull(self, max_points: int, render_cost: float = 0.0) -> bool:
        """When the store changed: post one `SnapshotUpdated` (a new snapshot of the run
        on screen, when it changed, and the notices to raise). False when there was
        nothing new. `render_cost`: what drawing the last snapshot took (paces a backlog)."""
        store = self.store
        due = collapse(self.grouper.due())  # other runs' notices: grouped, after a moment
        if self._seen_store_version == store.version or self.pacer.holding(self.catching_up):
            # Nothing new; or loading a backlog of history: show progress about once a
            # second and leave the CPU to the loading; the moment it is done, paint.
            if due:
                self.post(SnapshotUpdated(None, (), tuple(store.runs()), tuple(due),
                                          tuple(self.grouper.grouped)))
            return bool(due)
        self._seen_store_version = store.version
        runs = store.runs()
        self._choose_run(runs)
        self._view()
        told = self._tell_choice()
        shown = [n for n in self._news(store.take_notices())
                 if self.current_run is None or n.run.key == self.current_run
                 or n.kind in ALWAYS_SHOWN]
        notices = (due + ([told] if told is not None else [])
                   + collapse(self.grouper.take(shown, self.current_run)))
        # Under the fleet table no run is on screen: no snapshot (a big project loading
        # would have the hidden dashboard drawn again and again).
        if self.hidden:
            snap, others = None, ()
            self.pacer.looked_hidden()
        else:
            snap, others = self._take_snapshot(max_points, render_cost)
        self.post(SnapshotUpdated(snap, others, tuple(runs), tuple(notices),
                                  tuple(self.grouper.grouped)))
        return True

    def _news(self, notices: list[Notice]) -> list[Notice]:
        """`notices` less those of history (kept per run for `history_line`)."""
        news = []
        for n in notices:
            if is_history(n, self.opened_at, self.store.data_time):
                kept = self.history.setdefault(n.run.key, [])
                if n.run.source in HISTORY_SOURCES:  # a recording's times are shifted to
                    n = replace(n, at=None)         # now: no age worth saying
                elif n.at is None:
                    n = replace(n, at=self.store.data_time(n.run.key))
                kept.append(n)
                del kept[:-MAX_HISTORY]
            else:
                news.append(n)
        return news

    def history_line(self, now: float) -> str:
        """The run on screen's history in one quiet line ("" when none)."""
        kept = self.history.get(self.current_run or "", [])
        snap = self.snapshot
        view = snap.phase if snap is not None and snap.run.key == self.current_run else None
        phase = (view.phase, view.since_step) if view is not None and not view.too_few else None
        return history_line(kept, now, age_text, phase)

    def _take_snapshot(self, max_points: int, render_cost: float
                       ) -> tuple[RunSnapshot | None, tuple[RunSnapshot | None, ...]]:
        """A new snapshot of the run on screen (and of the runs compared with it) when
        any of them changed since the last one; (None, ()) when none did."""
        if self.current_run is None:
            return None, ()
        keys = self._compared_keys()
        store = self.store
        version = (store.run_version(self.current_run),
                   tuple(store.run_version(k) for k in keys))
        if version == self._seen_version:
            return None, ()
        self._seen_version = version
        t0 = time.perf_counter()
        self.snapshot = store.snapshot(self.current_run, max_points=max_points)
        if self.snapshot is None:
            return None, ()
        others = tuple(store.snapshot(k, max_points=500) for k in keys)
        self.pacer.drawn(time.perf_counter() - t0 + render_cost)
        return self.snapshot, others

    def _compared_keys(self) -> list[str]:
        """The runs overlaid on the run on screen (their colours follow this order)."""
        current = self.current_run
        if self.compare:
            keys = [k for k in self.compare if k != current]
        elif self.overlay:
            runs = self.store.runs()
            project = next((r.project for r in runs if r.key == current), None)
            keys = [r.key for r in runs if r.project == project and r.key != current]
        else:
            return []
        return keys[:MAX_COMPARED]

    def _choose_run(self, runs: list[RunRef]) -> None:
        choice = choose_run(self.want, self.current_run, runs, self.store.most_recent)
        self.want = choice.want
        if choice.moved:
            self.current_run, self._seen_version = choice.run, -1

    def _tell_choice(self) -> Notice | None:
        """Once the history is read, say which run the screen chose and why (when there
        is a choice): "showing X, the most recently active of N runs"."""
        if (self.want.intent is not Intent.NEWEST or self.catching_up
                or self.current_run is None or not self.all_heard):
            return None
        self.want = PICKED  # chosen: new data of another run no longer moves the screen
        runs = self.store.runs()
        run = next((r for r in runs if r.key == self.current_run), None)
        if run is None or len(runs) < 2 or self._told == run.key:
            return None
        self._told = run.key
        text = (f"showing {run.label}: the most recently active of {len(runs)} runs "
                "(r or --run picks another)")
        return Notice(0, run, "run_choice", None, text, "information")


MAX_PER_KIND = 3  # notices of one kind for one run shown from one pull; the rest are summed


def collapse(notices: list[Notice]) -> list[Notice]:
    """A history read in one go can hold hundreds of alerts of one kind: show the first
    few and one line saying how many more (all of them are in the run's events, `e`)."""
    groups: dict[tuple[str, str], list[Notice]] = {}
    for n in notices:
        groups.setdefault((n.run.key, n.kind), []).append(n)
    out: list[Notice] = []
    for group in groups.values():
        out.extend(group[: MAX_PER_KIND - 1] if len(group) > MAX_PER_KIND else group)
        if len(group) > MAX_PER_KIND:
            last, more = group[-1], len(group) - (MAX_PER_KIND - 1)
            kind = last.kind.replace("_", " ")
            out.append(replace(last, text=f"{more} more {kind} notices, the last at step "
                                          f"{last.step}: press e for the run's events"))
    return sorted(out, key=lambda n: n.seq)
