"""The store: every run's state, fed by events, read as snapshots.

Thread-safe: sources apply events from worker threads, the UI reads
snapshots from its own thread. Every event is made secret-free on the way in
(`sanitize.py`). Notices (gate fired, phase changed, job state)
queue up until the UI takes them.
"""

from __future__ import annotations

import heapq
import math
import threading
from collections.abc import Collection, Iterable
from contextlib import nullcontext

import numpy as np

from carl_tui import metric_names as mn
from carl_tui.events import (
    Event,
    Job,
    LogLines,
    Marker,
    Progress,
    RunLife,
    RunMeta,
    RunRef,
    ScalarBatch,
    SourceStatus,
    SystemSample,
)
from carl_tui.store.health import HealthFlag
from carl_tui.store.run import RunState
from carl_tui.store.run_snapshot import data_time
from carl_tui.store.sanitize import clean_events
from carl_tui.store.snapshot import Notice, RunSnapshot, StoreSummary


def updated_at(run: RunState | RunSnapshot) -> float | None:
    """When a run (its state, or a snapshot of it) was last updated: the wall time of its
    newest record, else the time of its source's word on its life (a file's time, for
    records with none: None where neither is known). Never the time it was read."""
    return data_time(run.updated_at, getattr(run, "newest_timeless", False), run.life)


def newest_first(updated: float | None) -> float:
    """The sort key of the fleet's order: the newest update first, runs with none last."""
    return -updated if updated is not None else math.inf


class RunStore:
    def __init__(
        self,
        *,
        vocab_size: int | None = None,
        gate_metric: str = mn.ACCURACY,
        recent: int = 4096,
        max_buckets: int = 1024,
    ):
        self._lock = threading.RLock()
        self._runs: dict[str, RunState] = {}
        self._order: list[str] = []  # most recently updated last
        self._sources: dict[str, SourceStatus] = {}
        self._notices: list[Notice] = []
        self._seq = 0
        # The health flags said since the guard last took them (None: no guard watches)
        self._flags: list[tuple[RunRef, HealthFlag]] | None = None
        self._flags_taken: dict[str, int] = {}  # run key -> flags said and passed on
        self.version = 0  # changes with anything: a run's data, a source's status
        self.runs_version = 0  # changes with the runs only (what the fleet's rows read)
        self._kw = {
            "vocab_size": vocab_size, "gate_metric": gate_metric,
            "recent": recent, "max_buckets": max_buckets,
        }

    # -- writing -------------------------------------------------------------

    def _state(self, run: RunRef) -> RunState:
        st = self._runs.get(run.key)
        if st is None:
            st = self._runs[run.key] = RunState(run, notify=self._notice, **self._kw)
        elif run.name and run.name != st.run.name:
            st.run = run
        return st

    def _notice(self, run: RunRef, kind: str, step: int | None, text: str, severity: str) -> None:
        self._seq += 1
        st = self._runs.get(run.key)
        at = st.time_at(step) if st is not None else None
        self._notices.append(Notice(self._seq, run, kind, step, text, severity, at))

    def apply(self, events: Iterable[Event]) -> None:
        """Apply a source's events in order. The lock is taken for each event, not for
        all of them: a reader (the screen's thread) waits for one event at most, not for
        a poll of a long history (hundreds of runs' batches); but a poll that holds a
        preview is applied whole (a thousand runs appear at once, each with its values)."""
        # Finite values near the float limit (1e308) overflow in sums and products: the
        # results are inf, shown as such, never a numpy warning on stderr.
        events = list(events)
        # A preview is one view: a reader sees all of it or none (the lock is reentrant).
        whole = any(isinstance(ev, ScalarBatch) and ev.preview for ev in events)
        with np.errstate(over="ignore", invalid="ignore"), \
                (self._lock if whole else nullcontext()):
            for ev in clean_events(events):
                with self._lock:
                    self._apply_one(ev)

    def _apply_one(self, ev: Event) -> None:
        if isinstance(ev, SourceStatus):
            self._sources[ev.source] = ev
            self.version += 1
            return
        st = self._state(ev.run)
        if isinstance(ev, ScalarBatch):
            st.add_batch(ev)
            if self._flags is not None:
                self._pass_flags(st)
        elif isinstance(ev, RunMeta):
            st.add_meta(dict(ev.meta))
        elif isinstance(ev, LogLines):
            st.add_lines(ev.lines)
        elif isinstance(ev, Marker):
            st.add_marker(ev)
        elif isinstance(ev, Job):
            st.set_job(ev)
        elif isinstance(ev, Progress):
            st.set_progress(ev)
        elif isinstance(ev, SystemSample):
            st.add_system(ev)
        elif isinstance(ev, RunLife):
            st.set_life(ev)
        else:  # an unknown event is a programming error, not user input
            raise TypeError(f"unknown event {type(ev).__name__}")
        key = ev.run.key
        if not self._order or self._order[-1] != key:
            if key in self._order:
                self._order.remove(key)
            self._order.append(key)
        self.version += 1
        self.runs_version += 1

    # -- reading -------------------------------------------------------------

    def runs(self) -> list[RunRef]:
        """Runs, most recently updated first."""
        with self._lock:
            return [self._runs[k].run for k in reversed(self._order)]

    def newest_runs(self, n: int) -> list[RunRef]:
        """The `n` runs with the newest records, newest first (`newest_first`; among
        equals, the run updated last): the order of `fleet.fleet_rows`, taken without a
        snapshot of each run (a big fleet's first rows)."""
        with self._lock:
            states = [self._runs[k] for k in reversed(self._order)]
        return [st.run for st in heapq.nsmallest(
            n, states, key=lambda st: newest_first(updated_at(st)))]

    def most_recent(self) -> RunRef | None:
        """The run opened by default, on screen and in `summary`: the most recently
        active one (the newest wall time of its data; among equals, the one updated
        last). None when there is no run."""
        with self._lock:
            states = [self._runs[k] for k in reversed(self._order)]
            if not states:
                return None
            return max(states, key=lambda st: st.updated_at or 0.0).run

    def snapshot(self, run_key: str, max_points: int = 2000,
                 series: Collection[str] | None = None) -> RunSnapshot | None:
        """The run's snapshot (None for a run not held); `series`: only those, where not
        all (and its current progress metric)."""
        with self._lock, np.errstate(over="ignore", invalid="ignore"):
            st = self._runs.get(run_key)
            return st.snapshot(max_points, series) if st is not None else None

    @property
    def run_count(self) -> int:
        """How many runs it holds (read without the lock, as `run_version`)."""
        return len(self._runs)

    def run_version(self, run_key: str) -> int:
        """The run's version (-1: not held), read without the lock: a reader that asks
        for it of every run (the fleet table) never waits on a source's batch. A version
        read just before a change is simply read again at the next look."""
        st = self._runs.get(run_key)
        return st.version if st is not None else -1

    def summary(self) -> StoreSummary:
        with self._lock:
            sources = dict(self._sources)
            return StoreSummary(
                sources=sources,
                skipped=sum(s.skipped for s in sources.values()),
            )

    def _pass_flags(self, st: RunState) -> None:
        said = st.health.said
        new = said - self._flags_taken.get(st.run.key, 0)
        if new > 0:
            self._flags_taken[st.run.key] = said
            self._flags.extend((st.run, f) for f in st.health.flags[-new:])

    def watch_flags(self) -> None:
        """From now on, keep the health flags said (`take_flags`): a guard watches."""
        with self._lock:
            if self._flags is None:
                self._flags = []
                for st in self._runs.values():
                    self._pass_flags(st)

    def take_flags(self) -> list[tuple[RunRef, HealthFlag]]:
        """The (run, flag) pairs said since the last call, in order (see `watch_flags`)."""
        with self._lock:
            if not self._flags:
                return []
            out, self._flags = self._flags, []
            return out

    def data_time(self, run_key: str) -> float | None:
        """When the run was last updated, by its data's own time (`updated_at`)."""
        with self._lock:
            st = self._runs.get(run_key)
            return None if st is None else updated_at(st)

    def take_notices(self) -> list[Notice]:
        with self._lock:
            out, self._notices = self._notices, []
            return out
