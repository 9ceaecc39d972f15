"""The coarse view of a run shown while its history is read (newest first, coarse
to fine).

A source that reads a long history first sends preview batches
(`ScalarBatch.preview`): a strided sample of the whole run and its newest rows.
They land here, never in the run's series, gates or phases, which see only the
real rows in order. Until the history has been read up to where the preview was
taken (an empty preview batch), a snapshot shows the real rows read so far and,
beyond them, the preview: the newest values are the preview's (exact: they are
real rows), the extremes and the phase are provisional (from the sample, marked
as such). The preview has a phase classifier and a gate of its own, fed the
sample in order.
"""

from __future__ import annotations

import numpy as np

from carl_tui import metric_names as mn
from carl_tui.coherence.gates import PhaseTransitionGate
from carl_tui.coherence.phases import PhaseSettings
from carl_tui.events import ScalarBatch
from carl_tui.store import roles
from carl_tui.store.phases import PhaseTrack

MAX_PREVIEW_ROWS = 100_000  # a preview is small by design; more is ignored
#: Rows a preview holds before its classifier and gate are fed: the fewest from which the
#: classifier tells any phase but baseline (`coherence.phases.seen_enough`).
FEED_AFTER = PhaseSettings().rise_after
#: The preview's classifier reads its segments less often than a run's (every value up to
#: 8, then each quarter more): a preview is a few hundred rows shown once, on the first
#: screen, and its phase is provisional (the run's own is read from every row in order).
PREVIEW_PHASES = PhaseSettings(every_value=8, growth=1.25)


class _Points:
    """Points of one series, in step order (NaN values dropped; a run's newest rows may
    come before the sample of its older ones)."""

    __slots__ = ("_cache", "_steps", "_values")

    def __init__(self) -> None:
        self._steps: list[np.ndarray] = []
        self._values: list[np.ndarray] = []
        self._cache: tuple[np.ndarray, np.ndarray] | None = None

    def __bool__(self) -> bool:
        """It holds a value (`add` keeps only batches with one)."""
        return bool(self._steps)

    def add(self, steps: np.ndarray, values: np.ndarray) -> None:
        nan = np.isnan(values)
        if nan.any():  # rare: a column missing from some rows
            keep = ~nan
            if not keep.any():
                return
            steps, values = steps[keep], values[keep]
        self._steps.append(steps)
        self._values.append(values)
        self._cache = None

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        if self._cache is None:
            if not self._steps:
                self._cache = (np.empty(0), np.empty(0))
            else:
                steps, values = ((self._steps[0], self._values[0]) if len(self._steps) == 1
                                 else (np.concatenate(self._steps), np.concatenate(self._values)))
                if steps.size > 1 and np.less(steps[1:], steps[:-1]).any():
                    order = np.argsort(steps, kind="stable")
                    steps, values = steps[order], values[order]
                self._cache = (steps, values)
                self._steps, self._values = [self._cache[0]], [self._cache[1]]
        return self._cache


class Preview:
    """The provisional view of one run (see the module doc)."""

    def __init__(self, gate_metric: str):
        self._points: dict[str, _Points] = {}
        self._wall = _Points()
        self._tails: list[ScalarBatch] = []  # newest rows not taken into the points yet
        self.gate = PhaseTransitionGate(metric=gate_metric)
        self.phases = PhaseTrack(settings=PREVIEW_PHASES)
        self.rows = 0
        self.newest_read = False  # it holds the run's own newest rows (a `tail` batch)
        self._names: list[str] | None = None  # the series with values (`names`)
        self._held: list[tuple[np.ndarray, dict[str, np.ndarray]]] = []  # not fed yet
        self._carl = False  # a CARL reward was seen (the task reward excludes it)
        self.newest_step: int | None = None  # step of the newest row previewed
        self.oldest_step: int | None = None

    def add(self, batch: ScalarBatch) -> None:
        n = len(batch)
        if n == 0 or self.rows >= MAX_PREVIEW_ROWS:
            return
        self._names = None
        newest = int(batch.steps.max())
        self.newest_step = newest if self.newest_step is None else max(self.newest_step, newest)
        oldest = int(batch.steps.min())
        self.oldest_step = oldest if self.oldest_step is None else min(self.oldest_step, oldest)
        if batch.tail:  # the newest rows only: values, not the run's shape
            self.newest_read = True
            # Taken into the points when first read: a big fleet's first screen reads a
            # few runs of the thousand whose newest rows come in its first poll.
            self._tails.append(batch)
            return
        self._take(batch)
        cols = dict(batch.columns)
        # Its own classifier and gate, fed the sample in order (never the real ones'),
        # from the moment it holds enough rows to tell a phase: the preview of a big
        # project holds a row or two of most runs, on which they would only cost time.
        self.rows += n
        self._held.append((batch.steps, cols))
        if self.rows >= FEED_AFTER:
            for steps, columns in self._held:
                self._feed(steps, columns)
            self._held.clear()

    @property
    def points(self) -> dict[str, _Points]:
        self._take_tails()
        return self._points

    @property
    def wall(self) -> _Points:
        self._take_tails()
        return self._wall

    def _take_tails(self) -> None:
        if self._tails:
            tails, self._tails = self._tails, []
            for batch in tails:
                self._take(batch)

    def _take(self, batch: ScalarBatch) -> None:
        """Its values and wall times into the points."""
        steps = batch.steps.astype(np.float64)
        for name, values in batch.columns.items():
            p = self._points.get(name)
            if p is None:
                p = self._points[name] = _Points()
            p.add(steps, np.asarray(values, dtype=np.float64))
        if batch.times is not None:
            self._wall.add(steps, np.asarray(batch.times, dtype=np.float64))
        elif batch.wall_time is not None:
            self._wall.add(steps[-1:], np.array([batch.wall_time], dtype=np.float64))

    def _feed(self, steps: np.ndarray, cols: dict[str, np.ndarray]) -> None:
        n = len(steps)
        nan = np.full(n, np.nan)
        self.gate.update_many(steps, cols.get(self.gate.metric, nan), cols.get(mn.ENTROPY, nan))
        self._carl = self._carl or bool(roles.carl_reward_names(cols))
        task = roles.task_reward(cols, n, carl_known=self._carl)
        self.phases.add_batch(steps, cols, task)

    def series(self, name: str) -> tuple[np.ndarray, np.ndarray] | None:
        p = self.points.get(name)
        if p is None:
            return None
        steps, values = p.arrays()
        return (steps, values) if values.size else None

    def names(self) -> list[str]:
        if self._names is None:  # asked a few times a snapshot: kept until a batch comes
            self._names = [k for k, p in self.points.items() if p]
        return self._names
