"""The source that reads only the run in view (`Source.companion`: a job's log, where a
source lists jobs): opened when a run comes into view, the previous run's closed."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from carl_tui.events import Event, SourceStatus
from carl_tui.sources.base import Source, SourceRunner


class Companions:
    """`view(key)` on the UI thread each time the run on screen may have changed. The
    follower's `runners` list is shared: the companion is one of them while open."""

    def __init__(self, runners: list[SourceRunner], add: Callable[[Source], SourceRunner],
                 emit: Callable[[Iterable[Event]], None]) -> None:
        self.runners, self._add, self._emit = runners, add, emit
        self.runner: SourceRunner | None = None  # the companion open now
        self.viewed: str | None = None  # the run it was chosen for

    def view(self, key: str | None) -> None:
        if key == self.viewed:
            return
        self.viewed = key
        if self.runner is not None:
            # its poll only drains a queue: its thread ends at once (waited for briefly, so
            # that its last word on the status bar is this one)
            self.runner.stop(timeout=0.2)
            self.runners.remove(self.runner)
            self._emit([SourceStatus(self.runner.source.name, "idle", "not in view")])
            self.runner = None
        for runner in list(self.runners) if key is not None else ():
            source = runner.source.companion(key)
            if source is not None:
                self.runner = self._add(source)
                return
