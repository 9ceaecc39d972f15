"""Giving each Trainer log dict its step (the rules are in trainer_log's docstring).

`TrainerLogParser` (trainer_log.py) reads the text and drives three pieces:

- `TrainingBar`: where the training bar is (its position, count and total) and
  the steps of the trainings before the current one (a new training's bar
  counts from 0 again).
- `StepEstimator`: what the dicts placed so far say about the next one: steps
  never go back, the run's logging cadence, the ratio of step to epoch; it
  estimates a step that no bar showed, and records every dict given a step.
- `HeldDicts`: the dicts held back until a bar tells their step, and the queue
  of redraws that places the dicts of a buffered burst, first in first out.
"""

from __future__ import annotations

import math
import re
from collections import deque
from dataclasses import dataclass

MAX_MARKERS = 100_000  # redraws queued at most
_EPOCH_TEXT = re.compile(r"""['"]epoch['"]\s*:\s*(['"]?)([-+]?[0-9.]+(?:[eE][-+]?\d+)?)""")


@dataclass(frozen=True, slots=True)
class BarUpdate:
    """One tqdm bar update: `step` of `total` (None when unknown), ETA in seconds."""

    step: int
    total: int | None
    eta_s: float | None
    desc: str = ""


@dataclass(frozen=True, slots=True)
class MetricsLine:
    """One parsed Trainer log dict, with the step it belongs to.

    `step_known` is False when the log did not say the step exactly: `step` is
    then the best estimate (callers show "step estimated")."""

    step: int
    values: dict[str, float]
    summary: bool = False  # the end-of-training summary (train_runtime, ...)
    step_known: bool = True


def epoch_of(values: dict[str, float], text: str) -> tuple[float, float] | None:
    """(epoch, how far off the printed value may be): '0.03906' -> (0.03906, 5e-06).

    transformers 5 prints `f"{v:.4g}"` in quotes: 4 significant digits even when
    trailing zeros are dropped ('0.5' is 0.5000). Otherwise half the last printed
    digit (a float's repr, or an older `round(epoch, 2)`)."""
    v = values.get("epoch")
    if v is None or not math.isfinite(v) or v <= 0:
        return None
    m = _EPOCH_TEXT.search(text)
    half = abs(v) * 1e-9  # printed in full (np.float64(...))
    if m is not None:
        digits = m.group(2)
        try:
            printed = float(digits)
        except ValueError:
            printed = math.nan
        if printed == v:
            mant, _, exp = digits.lower().partition("e")
            half = 0.5 * 10.0 ** (int(exp or 0) - len(mant.partition(".")[2]))
            significant = len(mant.replace(".", "").lstrip("+-").lstrip("0"))
            if m.group(1) and significant <= 4:
                half = min(half, 0.5 * 10.0 ** (math.floor(math.log10(v)) - 3))
    return (v, half) if v - half > 0 else None


def explicit_step(values: dict[str, float]) -> int | None:
    """The step a dict states itself (`step` or `global_step`), when it is a whole number."""
    v = values.get("step", values.get("global_step"))
    if v is None or not math.isfinite(v) or v != int(v) or v < 0:
        return None
    return int(v)


@dataclass(slots=True)
class Held:
    """A dict waiting for the bar that tells its step."""

    values: dict[str, float]
    kind: str  # "train", "summary", "unread", or an evaluation prefix ("eval", ...)
    bar_before: int | None  # step on the last training bar drawn before it (with offset)
    epoch: tuple[float, float] | None
    explicit: int | None


class TrainingBar:
    """The training bar: its position, its count and total, and the step it shows.

    Only bars without a description count (the caller drops the others); the
    first bar's position is the training bar's (cursor-ups after it), bars of
    other positions are evaluation bars inside training. `offset` is the steps
    of the trainings before the current one."""

    def __init__(self) -> None:
        self.level: int | None = None  # the training bar's position
        self.n: int | None = None  # count on the current training bar
        self.total: int | None = None  # total of the current training bar
        self.step: int | None = None  # step on the latest training bar (with offset)
        self.offset = 0
        self.ended = False  # the training's summary was seen: the next bar may start another

    def new_training(self) -> None:
        self.n = None
        self.ended = False

    def accepts(self, bar: BarUpdate, level: int) -> bool:
        """Whether `bar` (drawn `level` lines down) is this training's bar, or a new training's."""
        if self.level is None or level < self.level:
            self.level = level
        elif level != self.level:
            return False  # a bar of another position: evaluation inside training
        n = self.n
        if n is not None:
            if bar.total != self.total and not self.ended:
                return False  # another total while training runs: evaluation (escapes lost)
            if bar.step < n and bar.step and bar.total == self.total:
                return False  # a count going back, not to 0: not a bar of this training
        return True

    def starts_training(self, bar: BarUpdate) -> bool:
        """Whether an accepted `bar` starts a new training (after the last one's summary,
        or a restart from 0)."""
        return self.n is not None and (bar.step < self.n or bar.total != self.total)

    def move(self, bar: BarUpdate) -> int:
        """Take the bar's count; returns the step it shows."""
        self.n = bar.step
        self.total = bar.total
        self.step = self.offset + bar.step
        return self.step


class StepEstimator:
    """The steps given so far and what they teach: the bounds, cadence and epoch ratio
    that place a dict no bar placed.

    Steps never go back; two dicts of one kind never share a step."""

    def __init__(self, bar: TrainingBar, logging_steps: int = 1):
        self.bar = bar
        self.logging_steps = logging_steps
        self.lines_seen = 0  # non-summary dicts emitted
        self.estimated = 0  # non-summary dicts emitted with step_known False
        self.last: int | None = None  # last non-summary step emitted
        self.last_kind: dict[str, int] = {}
        self.known: int | None = None  # the same, of steps that were known
        self.known_kind: dict[str, int] = {}
        self.new_training()

    def resume_threshold(self) -> int | None:
        """The highest count a new training's bar can show at its first move, from what
        this training logged (its cadence, else its first logged step; None: unknown).
        A bar that jumps past it continues this run's global_step: a resume."""
        cadence = self.cadence("train")
        return cadence if cadence is not None else self.first_train

    def resumed(self, offset: int) -> None:
        """The new training resumes the previous one from a checkpoint: its steps may go
        back to the checkpoint's (steps logged again after a kill)."""
        self.last = self.known = offset
        self.last_kind, self.known_kind = {}, {}

    def new_training(self) -> None:
        """Forget what the previous training taught (its cadence and epoch ratio)."""
        self.first_train: int | None = None  # first step logged, from the bar's 0
        self.obs_last: dict[str, int] = {}  # last observed (exact) step per kind
        self.diffs: dict[str, tuple[int | None, int]] = {}  # last two step differences
        self.ratio: tuple[float, float] | None = None  # global_step / epoch, an interval
        self.ratio_broken = False
        self.distrust = False  # a prediction was shown wrong: estimates stay estimates

    def agrees(self, held: list[Held], exact: list[int | None]) -> bool:
        """Steps from redraws must keep the order and agree with each dict's epoch."""
        floor: dict[str, int] = {}
        prev = self.last or 0
        for h, step in zip(held, exact):
            if step is None or h.kind in ("summary", "unread") or not h.values:
                continue
            last = floor.get(h.kind, self.last_kind.get(h.kind))
            if step < prev or (last is not None and step <= last):
                return False
            span = self.epoch_span(h)
            if span is not None and not span[0] - 1 <= step <= span[1] + 1:
                return False
            prev = floor[h.kind] = step
        return True

    def floor(self, kind: str, *, known_only: bool = False) -> int:
        """The smallest step the next dict of `kind` can have (from the steps emitted so
        far, or only from those that were known)."""
        last, by_kind = (self.known, self.known_kind) if known_only else (
            self.last, self.last_kind)
        floor = last if last is not None else 0
        prev = by_kind.get(kind)
        return max(floor, prev + 1) if prev is not None else floor

    def estimate(self, h: Held, hi: int | None) -> tuple[int, bool]:
        """(step, known) of a dict no redraw placed; `hi` is the first step known after it."""
        if h.kind == "summary":
            step = self.bar.step if self.bar.step is not None else (self.last or 0)
            return max(step, self.last or 0), False
        floor = self.floor(h.kind)  # steps never go back
        # The bar drawn before the dict is at most its step, as far as the output is not
        # buffered: a bound for the estimate, never a proof.
        lo = floor if h.bar_before is None else max(floor, h.bar_before)
        if self.bar.total is not None:
            cap = self.bar.offset + self.bar.total  # global_step never passes max_steps
            hi = cap if hi is None else min(hi, cap)
        if hi is not None and hi <= lo:
            return max(hi, floor), hi == self.floor(h.kind, known_only=True)
        return self._estimate_between(h, lo, hi)

    def _estimate_between(self, h: Held, lo: int, hi: int | None) -> tuple[int, bool]:
        """The step the dict states, else its epoch's, else the cadence's, within [lo, hi]."""

        def fits(step: int | None) -> bool:
            return step is not None and step >= lo and (hi is None or step <= hi)

        if fits(h.explicit):
            return h.explicit, True  # type: ignore[return-value]
        by_epoch = self.epoch_step(h)
        last = self.last_kind.get(h.kind)
        cadence = self.cadence(h.kind)
        if fits(by_epoch):  # with the cadence agreeing, the step is known
            known = cadence is not None and last is not None and last + cadence == by_epoch
            return by_epoch, known and not self.distrust  # type: ignore[return-value]
        if cadence is not None and last is not None and fits(last + cadence):
            return last + cadence, False
        guess = lo
        if h.kind == "train":
            base = last if last is not None else self.bar.offset
            guess = max(lo, base + (cadence or self.logging_steps))
        return (guess if hi is None else min(guess, hi)), False

    def cadence(self, kind: str) -> int | None:
        """The step difference between the last observed dicts of `kind` (with the one
        before, when known, agreeing)."""
        d = self.diffs.get(kind)
        return d[1] if d is not None and d[0] in (None, d[1]) else None

    def epoch_span(self, h: Held) -> tuple[int, int] | None:
        """Steps the dict's epoch allows, from the ratio seen so far (None: unknown)."""
        if self.ratio is None or h.epoch is None:
            return None
        v, half = h.epoch
        lo = math.ceil((v - half) * self.ratio[0] - 1e-9)
        hi = math.floor((v + half) * self.ratio[1] + 1e-9)
        return self.bar.offset + lo, self.bar.offset + hi

    def epoch_step(self, h: Held) -> int | None:
        """The one step the dict's epoch allows; None when unknown or not one."""
        span = self.epoch_span(h)
        return span[0] if span is not None and span[0] == span[1] else None

    def observe(self, h: Held, step: int) -> None:
        """Learn the cadence and the epoch ratio from a dict whose step is exact."""
        if h.kind == "summary" or not h.values:
            return
        prev = self.obs_last.get(h.kind)
        if prev is not None and step > prev:
            d = self.diffs.get(h.kind)
            self.diffs[h.kind] = (d[1] if d else None, step - prev)
        self.obs_last[h.kind] = step
        local = step - self.bar.offset
        if h.epoch is None or local <= 0 or self.ratio_broken:
            return
        v, half = h.epoch
        lo, hi = local / (v + half), local / (v - half)
        if self.ratio is not None:
            lo, hi = max(lo, self.ratio[0]), min(hi, self.ratio[1])
        if lo > hi:  # epoch is not proportional to the step in this run
            self.ratio, self.ratio_broken = None, True
        else:
            self.ratio = (lo, hi)

    def emit(self, h: Held, step: int, known: bool, out: list) -> None:
        """Record the dict at `step` (never below the floor) and append its `MetricsLine`."""
        if h.kind == "summary":
            if h.values:
                out.append(MetricsLine(step, h.values, True, known))
            return
        if not h.values:
            return  # a dict with nothing to plot ({} or only text values)
        floor = self.floor(h.kind)
        if step < floor:
            step, known = floor, False
        self.last = step
        self.last_kind[h.kind] = step
        if h.kind == "train" and self.first_train is None:
            self.first_train = step - self.bar.offset
        if known:
            self.known = step
            self.known_kind[h.kind] = step
        self.lines_seen += 1
        self.estimated += not known
        out.append(MetricsLine(step, h.values, False, known))


class HeldDicts:
    """The dicts held back until a bar tells their step, and the queue of redraws (a
    clear immediately followed by the training bar, no dict between) that gives the
    dicts of a buffered burst their steps, first in first out."""

    def __init__(self, steps: StepEstimator):
        self.steps = steps
        self.held: list[Held] = []
        self.markers: deque[int] = deque()  # redraws after a clear with no dict between
        self.buffered = False  # bursts of dicts were seen: stdout is block-buffered
        self.queued_any = False  # a redraw was ever queued
        self.check: tuple[Held, int, bool] | None = None  # flushed, awaiting its redraw

    def queue_redraw(self, step: int) -> None:
        self.markers.append(step)
        self.queued_any = True
        if len(self.markers) > MAX_MARKERS:
            self.markers.popleft()

    def settle(self, out: list, *, adjacent: bool, after: int | None) -> bool:
        """Give every held dict its step; returns whether the bar showing `after` was
        taken as the last held dict's redraw.

        `adjacent`: that bar was drawn right after the last held dict. With n dicts
        held and m redraws queued (buffered stdout; m is 0 otherwise): m == n - 1 and
        adjacent, the bar is the last dict's own redraw (unbuffered output, or a burst
        written out in the middle of the last dict's write); m >= n, the dicts take the
        queued redraws first in first out, and the bar belongs to a write still in the
        buffer. Without an adjacent bar (a flush, other output between) the same, where
        m == n - 1 leaves the last dict waiting for its redraw: estimated. Counts that
        do not add up, or steps that go back or contradict a dict's epoch: estimated.
        """
        held, self.held = self.held, []
        readings = self._readings(len(held), adjacent=adjacent, after=after)
        exact, used = self._match(held, readings, after)
        if used or not readings or exact == [None] * len(held):
            self.markers.clear()  # its own redraw, or counts that do not add up: start over
        steps = self.steps
        for i, h in enumerate(held):
            step = exact[i]
            if step is not None:
                steps.emit(h, step, True, out)
                steps.observe(h, step)
                continue
            hi = next((e for e in exact[i + 1 :] if e is not None), after)
            step, known = steps.estimate(h, hi)
            steps.emit(h, step, known, out)
            if i == len(held) - 1:
                self.check = (h, step, known)
        return used

    def _readings(self, n: int, *, adjacent: bool, after: int | None) -> list[tuple[int, bool]]:
        """Readings of the counts, most likely first: (dicts placed by queued redraws,
        whether the bar showing `after` is the last dict's own redraw)."""
        m = len(self.markers)
        if self.buffered and not self.queued_any:
            return []  # bursts of stdout but no redraws seen to place them: estimates
        if adjacent and after is not None:
            return [(n - 1, True)] if m == n - 1 else [(n, False), (n - 1, True)]
        return [(n, False)] if m >= n else [(n - 1, False)] if m == n - 1 else []

    def _match(self, held: list[Held], readings: list[tuple[int, bool]],
               after: int | None) -> tuple[list[int | None], bool]:
        """The steps of the first reading that keeps the order and agrees with the epochs
        (None: not placed), and whether the bar is the last dict's; its redraws are used."""
        n, m = len(held), len(self.markers)
        queued = list(self.markers)
        for take, last_is_after in readings:
            if take > m or take < 0:
                continue
            trial: list[int | None] = [*queued[:take], *[None] * (n - take)]
            if last_is_after:
                trial[-1] = after
            if self.steps.agrees(held, trial):
                for _ in range(take):
                    self.markers.popleft()
                if take and n >= 2:
                    self.buffered = True
                return trial, last_is_after
        return [None] * n, False
