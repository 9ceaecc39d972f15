"""Parse what a Hugging Face Trainer prints: metric dict lines and tqdm bars.

The Trainer prints every log as a Python dict, e.g.
`{'loss': 0.12, 'reward': 0.8, 'entropy': 1.3, 'epoch': 0.5}` (transformers 5
prints the numbers as quoted strings: `{'loss': '3.889', ...}`), and a tqdm
bar such as ` 45%|████▌     | 45/100 [00:12<00:15,  3.60it/s]`, redrawn in
place with carriage returns.

No `eval`: a small scanner reads the dict. Values it understands: numbers,
numeric strings, `nan`/`inf`/`-inf` (also `NaN`, `Infinity`), and wrapped
scalars such as `np.float64(0.5)` or `tensor(0.5)`. Nested dicts/lists,
booleans, `None` and text are skipped. Non-finite values are returned as
floats; deciding what to do with them is the caller's job.

Steps. A dict carries no step; the Trainer's `global_step` at the time it
logged has to be recovered from what is around it. What the bytes show
(transformers 5, TRL 1, tqdm 4.70; see tests/data/make_trainer_stdout.py):

- tqdm draws the training bar at most every 0.1 s, so the bar drawn before a
  dict is usually stale (steps 1 to 3 behind on a fast GPU, the previous
  log's step when logging every step).
- `ProgressCallback.on_log` prints the dict with `tqdm.write`: it clears the
  bars (`\r<spaces>\r`), writes the dict and a newline to stdout, then
  redraws every bar with its current count. The training bar drawn right
  after a dict therefore shows exactly the step the dict was logged at.
- Bars of other positions (the evaluation bar inside training, "Writing model
  shards" while saving) are drawn on the next line and followed by a cursor-up
  escape (`\x1b[A`); an evaluation dict is preceded by one. Those bars never
  move the step.
- When stdout is block-buffered (`python train.py > log 2>&1` without `-u`,
  `nohup`, SLURM), dicts arrive in bursts long after their bars. The bars still
  show each `tqdm.write` in order on stderr: a clear (`\r<spaces>\r`)
  immediately followed by the redrawn bar, with no dict between. Those redraws
  are the steps of the dicts still in stdout's buffer, first in first out (a
  burst may hold only the oldest of them: two layers of buffering); a burst
  written out in the middle of a `tqdm.write` is followed by that write's redraw.

So `TrainerLogParser` holds a dict back until the training bar drawn after it
(or until `flush()`), and takes the step from that redraw, or from the queued
redraws of a buffered burst. A dict that cannot be placed that way (no bar
after it yet at `flush()`, progress bars off, a burst that does not add up)
gets the best estimate with `step_known=False`: within the bounds given by
the bars around it (and the training's total), from the run's logging cadence
and its `epoch` (proportional to the step in most runs). It is known only when
the bounds leave one step, or when the cadence and the epoch agree on exactly
one step. A later redraw that shows a predicted step was wrong is counted in
`mispredicted`, and predictions are not trusted again in that training.

Guarantees: steps never go backwards; two dicts of the same kind (training
logs, or evaluation logs of one prefix) never share a step (an evaluation at
the step of a training log shares that step, as in the Trainer). After a
training ends and another starts in the same stream (a new training bar
counting from 0), steps continue from the last step of the stream: step =
that offset + the new training's `global_step`.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from carl_tui.events import Event, Progress, RunMeta, RunRef, ScalarBatch
from carl_tui.metric_names import canonical, is_metric_key, valid_number

MAX_LINE_CHARS = 65_536  # longer "dict lines" are not Trainer logs; skip them

# Keys only present in the end-of-training summary line.
SUMMARY_KEYS = frozenset(
    {"train_runtime", "train_samples_per_second", "train_steps_per_second", "total_flos"}
)

_SPECIAL = {
    "nan": math.nan,
    "NaN": math.nan,
    "inf": math.inf,
    "Infinity": math.inf,
    "-inf": -math.inf,
    "-Infinity": -math.inf,
}

_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)")
_WORD = re.compile(r"[-+]?[A-Za-z_][A-Za-z0-9_.]*")
_WS = re.compile(r"\s*")
# Scalar wrappers seen in printed logs: np.float64(0.5), tensor(0.5), Decimal('0.5')
_WRAPPER = re.compile(r"(?:b?float\d*|u?int\d*|tensor|Tensor|Decimal|float_|array)")


class _Skip(Exception):
    """Raised inside the scanner when the text is not a dict we can read."""


def _read_string(text: str, i: int) -> tuple[str, int]:
    quote = text[i]
    out = []
    i += 1
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n:
            out.append(text[i + 1])
            i += 2
            continue
        if c == quote:
            return "".join(out), i + 1
        out.append(c)
        i += 1
    raise _Skip("unterminated string")


def _skip_ws(text: str, i: int) -> int:
    return _WS.match(text, i).end()  # type: ignore[union-attr]


def _skip_nested(text: str, i: int) -> int:
    """Skip a balanced (...), [...] or {...} group starting at `i`."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = [pairs[text[i]]]
    i += 1
    n = len(text)
    while i < n and stack:
        c = text[i]
        if c in "'\"":
            _, i = _read_string(text, i)
            continue
        if c in pairs:
            stack.append(pairs[c])
        elif c == stack[-1]:
            stack.pop()
        elif c in ")]}":
            raise _Skip("unbalanced")
        i += 1
    if stack:
        raise _Skip("unbalanced")
    return i


def _to_float(s: str) -> float | None:
    s = s.strip()
    if s in _SPECIAL:
        return _SPECIAL[s]
    if _NUMBER.fullmatch(s):
        return float(s)
    return None


def _read_value(text: str, i: int) -> tuple[float | None, int]:
    """One value; returns (float or None when not a scalar number, next index)."""
    c = text[i]
    if c in "'\"":
        s, i = _read_string(text, i)
        return _to_float(s), i
    if c in "[{(":
        return None, _skip_nested(text, i)
    m = _NUMBER.match(text, i)
    w = _WORD.match(text, i)
    if w and (not m or w.end() > m.end()):
        word = w.group()
        i = w.end()
        j = _skip_ws(text, i)
        if j < len(text) and text[j] == "(":
            # A wrapped scalar: np.float64(0.5), tensor(0.5, device='cuda:0')
            end = _skip_nested(text, j)
            if not _WRAPPER.fullmatch(word.rsplit(".", 1)[-1]):
                return None, end  # some other call: skipped, never run
            first = text[j + 1 : end - 1].split(",", 1)[0]
            return _to_float(first), end
        if word in _SPECIAL:
            return _SPECIAL[word], i
        return None, i  # True, False, None, bare names
    if m:
        return float(m.group()), m.end()
    raise _Skip(f"unexpected {c!r}")


def parse_metrics_dict(text: str) -> dict[str, float] | None:
    """`{'loss': 0.12, 'epoch': 0.5}` -> {'loss': 0.12, 'epoch': 0.5}; None if not a dict line.

    Keys keep their printed form; values that are not scalar numbers are left out.
    """
    s = text.strip()
    if not (s.startswith("{") and s.endswith("}")) or len(s) > MAX_LINE_CHARS:
        return None
    out: dict[str, float] = {}
    try:
        i = _skip_ws(s, 1)
        if s[i] == "}":
            return out if i == len(s) - 1 else None
        n = len(s)
        while True:
            if s[i] not in "'\"":
                return None
            key, i = _read_string(s, i)
            i = _skip_ws(s, i)
            if s[i] != ":":
                return None
            i = _skip_ws(s, i + 1)
            value, i = _read_value(s, i)
            if value is not None:
                out[key] = value
            i = _skip_ws(s, i)
            if s[i] == "}":
                return out if i == n - 1 else None
            if s[i] != ",":
                return None
            i = _skip_ws(s, i + 1)
            if s[i] == "}":  # trailing comma
                return out if i == n - 1 else None
    except (_Skip, IndexError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class BarUpdate:
    """One tqdm bar update: `step` of `total` (None when unknown), ETA in seconds."""

    step: int
    total: int | None
    eta_s: float | None
    desc: str = ""


# Terminal control sequences tqdm writes (cursor up: ESC [ A), and any other CSI.
_CSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_LEAD_CSI = re.compile(r"(?:\x1b\[[0-9;?]*[ -/]*[@-~])*")
_CURSOR_UP = re.compile(r"\x1b\[(\d*)A")

_BAR = re.compile(
    r"^(?P<desc>.*?)(?:(?P<pct>\d{1,3})%\|[^|]*\|)?\s*"
    r"(?P<n>\d+)(?:/(?P<total>\d+))?(?:it)?\s*"
    r"\[(?P<elapsed>[\d:]+)(?:<(?P<remaining>[\d:]+|\?))?,?(?P<rest>[^\]]*)\]\s*$"
)


# A drawn bar (with percentage and total) at the start of a longer text.
_BAR_HEAD = re.compile(
    r"^(?P<desc>[^\[\]{}]*?)(?P<pct>\d{1,3})%\|[^|]*\|\s*"
    r"(?P<n>\d+)/(?P<total>\d+)\s*"
    r"\[(?P<elapsed>[\d:]+)(?:<(?P<remaining>[\d:]+|\?))?,?(?P<rest>[^\]]*)\]"
)


def _clock_seconds(text: str) -> float | None:
    try:
        parts = [int(p) for p in text.split(":")]
    except ValueError:
        return None
    secs = 0
    for p in parts:
        secs = secs * 60 + p
    return float(secs)


def parse_progress(text: str) -> BarUpdate | None:
    """` 45%|████▌     | 45/100 [00:12<00:15,  3.60it/s]` -> BarUpdate(45, 100, 15.0).

    Terminal escapes (the cursor-up after a bar of another position) are ignored."""
    s = _CSI.sub("", text).strip() if "\x1b" in text else text.strip()
    if "[" not in s or len(s) > 2048:
        return None
    m = _BAR.match(s)
    if m is None:
        return None
    if m.group("pct") is None and m.group("total") is None and "it" not in s:
        return None
    return _bar(m)


def _bar(m: re.Match[str]) -> BarUpdate:
    desc = m.group("desc").strip().rstrip(":").strip()
    total = int(m.group("total")) if m.group("total") else None
    remaining = m.group("remaining")
    eta = _clock_seconds(remaining) if remaining and remaining != "?" else None
    return BarUpdate(step=int(m.group("n")), total=total, eta_s=eta, desc=desc)


def _split_bar(text: str) -> tuple[BarUpdate, str] | None:
    """A drawn bar with other output glued after it (tqdm ends no line: a warning
    written next lands on the bar's line): (bar, the rest)."""
    m = _BAR_HEAD.match(text[:2048])
    if m is None:
        return None
    return _bar(m), text[m.end() :]


@dataclass(frozen=True, slots=True)
class MetricsLine:
    """One parsed Trainer log dict, with the step it belongs to.

    `step_known` is False when the log did not say the step exactly: `step` is
    then the best estimate (callers show "step estimated")."""

    step: int
    values: dict[str, float]
    summary: bool = False  # the end-of-training summary (train_runtime, ...)
    step_known: bool = True


Item = MetricsLine | BarUpdate

# What the last segment that matters was (segments that never matter: empty
# ones, escapes, bars of other positions, their clears).
# _BLANK: spaces (a bar being cleared); _CLEAR: spaces then "\r", as tqdm's clear() writes
# them before a tqdm.write (a redraw right after it means the text went to a buffer).
_NONE, _DICT, _BAR_SEEN, _BLANK, _CLEAR, _OTHER, _FLUSHED = range(7)

MAX_HELD = 10_000  # dicts held back at most (a burst of buffered stdout is far smaller)
MAX_MARKERS = 100_000
_EPOCH_TEXT = re.compile(r"""['"]epoch['"]\s*:\s*(['"]?)([-+]?[0-9.]+(?:[eE][-+]?\d+)?)""")


def _ups(text: str) -> int:
    """Lines the cursor moves up in `text` (tqdm's `\\x1b[A` after a bar of position > 0)."""
    return sum(int(m.group(1) or 1) for m in _CURSOR_UP.finditer(text))


def _kind(values: dict[str, float]) -> str:
    """"summary", "train", or an evaluation prefix ("eval", "test", ...)."""
    if any(k in SUMMARY_KEYS for k in values):
        return "summary"
    for key in values:
        if key.endswith("_runtime") and key != "train_runtime":
            return key[: -len("_runtime")] or "eval"
    if any(k.startswith("eval_") for k in values):
        return "eval"
    return "train"


def _epoch(values: dict[str, float], text: str) -> tuple[float, float] | None:
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


def _explicit_step(values: dict[str, float]) -> int | None:
    v = values.get("step", values.get("global_step"))
    if v is None or not math.isfinite(v) or v != int(v) or v < 0:
        return None
    return int(v)


@dataclass(slots=True)
class _Held:
    """A dict waiting for the bar that tells its step."""

    values: dict[str, float]
    kind: str
    bar_before: int | None  # step on the last training bar drawn before it (with offset)
    epoch: tuple[float, float] | None
    explicit: int | None


class TrainerLogParser:
    """Feeds raw log lines, returns `MetricsLine` and `BarUpdate` items in order.

    A dict is held back until the training bar drawn after it tells its step
    (see the module docstring); `flush()` releases what is held when the stream
    ends or has been idle. Only bars without a description at the training
    bar's position count (`datasets`' "Map: 100%|..." bars, evaluation bars
    inside training and checkpoint-writing bars are ignored); a training bar
    whose count goes back (a new training) continues the steps after the last
    one. `logging_steps` is only a hint for streams without progress bars.
    """

    def __init__(self, logging_steps: int = 1):
        self.logging_steps = max(1, int(logging_steps))
        self.step: int | None = None  # step on the latest training bar (with offset)
        self.total: int | None = None  # total of the current training bar
        self.lines_seen = 0  # non-summary dicts emitted
        self.estimated = 0  # non-summary dicts emitted with step_known False
        self.mispredicted = 0  # flushed predictions a later bar showed wrong
        self.unreadable = 0  # lines shaped like a dict that could not be read
        self._unreadable_example = ""
        self._level: int | None = None  # the training bar's position (cursor-ups after it)
        self._n: int | None = None  # count on the current training bar
        self._offset = 0  # steps of the trainings before the current one
        self._sig = _NONE
        self._sig_before_clear = _NONE
        self._sig_before_held = _NONE
        self._after_clear = False
        self._held: list[_Held] = []
        self._markers: deque[int] = deque()  # redraws after a clear with no dict between
        self._buffered = False  # bursts of dicts were seen: stdout is block-buffered
        self._queued_any = False  # a redraw was ever queued
        self._last: int | None = None  # last non-summary step emitted
        self._last_kind: dict[str, int] = {}
        self._known: int | None = None  # the same, of steps that were known
        self._known_kind: dict[str, int] = {}
        self._check: tuple[_Held, int, bool] | None = None  # flushed, awaiting its redraw
        self._new_training()

    @property
    def pending(self) -> int:
        """Dicts held back, waiting for their bar or for `flush()`."""
        return len(self._held)

    def take_unreadable(self) -> tuple[int, str]:
        """(dict-shaped lines that could not be read since the last call, the first one)."""
        out = (self.unreadable, self._unreadable_example)
        self.unreadable, self._unreadable_example = 0, ""
        return out

    # -- input ---------------------------------------------------------------

    def feed(self, line: str) -> list[Item]:
        """One line of output (a trailing newline is ignored); items now known, in order."""
        out: list[Item] = []
        for part in line.removesuffix("\n").split("\n"):
            self._line(part, out)
        return out

    def flush(self) -> list[MetricsLine]:
        """Release every held dict (the stream ended or has been idle)."""
        out: list[Item] = []
        if self._held:
            adjacent = self._sig == _DICT
            self._settle(out, adjacent=False, after=None)
            if adjacent:
                self._sig = _FLUSHED  # the next training bar is its redraw: check it
        return [item for item in out if isinstance(item, MetricsLine)]

    def _line(self, line: str, out: list[Item]) -> None:
        for i, raw in enumerate(line.split("\r")):
            if not raw:
                if i and self._sig == _BLANK:  # "\r<spaces>\r": tqdm's clear(); a redraw
                    self._sig = _CLEAR  # right after it means the text went to a buffer
                continue
            if len(raw) > MAX_LINE_CHARS:
                self._sig = _OTHER
                continue
            body = raw
            if "\x1b" in raw:
                lead = _LEAD_CSI.match(raw).group()  # type: ignore[union-attr]
                if lead and self._after_clear and _ups(lead):
                    self._sig = self._sig_before_clear  # that clear was another bar's
                body = raw[len(lead):]
                level = _ups(body)
                bare = _CSI.sub("", body)
            else:
                level = 0
                bare = raw
            text = bare.strip()
            self._after_clear = False
            if not text:
                if bare and level == 0:  # spaces: tqdm clearing a bar
                    self._sig_before_clear = self._sig
                    self._sig = _BLANK
                    self._after_clear = True  # unless a cursor-up follows: another bar's
                continue
            if text[0] == "{":
                values = parse_metrics_dict(text)
                if values is not None or text[-1] == "}":
                    self._on_dict(values, text, out)
                    continue
            elif "[" in text:
                bar = parse_progress(text)
                if bar is not None:
                    self._on_bar(bar, level, out)
                    continue
                split = _split_bar(text)
                if split is not None:
                    self._on_bar(split[0], level, out)
                    text = split[1].strip()
                    if text[:1] == "{" and text[-1:] == "}":
                        self._on_dict(parse_metrics_dict(text), text, out)
                        continue
            self._sig = _OTHER

    def _on_bar(self, bar: BarUpdate, level: int, out: list[Item]) -> None:
        if bar.desc:
            return  # Map:, Writing model shards:, ...
        if self._level is None or level < self._level:
            self._level = level
        elif level != self._level:
            return  # a bar of another position: evaluation inside training
        n = self._n
        first = n is None
        if n is not None:
            if bar.total != self.total and not self._ended:
                return  # another total while training runs: evaluation (escapes lost)
            if bar.step < n and bar.step and bar.total == self.total:
                return  # a count going back, not to 0: not a bar of this training
        if n is not None and (bar.step < n or bar.total != self.total):
            # A new training (after the last one's summary), or a restart from 0.
            if self._held:
                self._settle(out, adjacent=False, after=None)
            self._offset = max(self._offset, self._last or 0)
            self._new_training()
            first = True
        self._n = bar.step
        self.total = bar.total
        step = self._offset + bar.step
        self.step = step
        sig = self._sig
        redraw = False  # this bar is the redraw of a tqdm.write whose text is still buffered
        if self._held:
            used = self._settle(out, adjacent=sig == _DICT, after=step)
            redraw = sig == _DICT and not used and self._sig_before_held in (_BLANK, _CLEAR)
        elif sig == _FLUSHED:  # right after dicts released by flush()
            if self._check is not None:  # the last one was estimated: this is its redraw
                held, predicted, known = self._check
                if known and predicted != step:
                    self.mispredicted += 1
                    self._distrust = True
                self._observe(held, step)
            else:
                redraw = self._sig_before_held in (_BLANK, _CLEAR)
        if (sig == _CLEAR or redraw) and not first:
            self._markers.append(step)
            self._queued_any = True
            if len(self._markers) > MAX_MARKERS:
                self._markers.popleft()
        self._check = None
        self._sig = _BAR_SEEN
        out.append(bar)

    def _on_dict(self, values: dict[str, float] | None, text: str, out: list[Item]) -> None:
        """`values` None: a dict line that could not be read; it still was one write."""
        if self._sig in (_DICT, _FLUSHED) and self._n is not None:
            self._buffered = True  # dict after dict, no clear between: a burst of stdout
        if self._held and not self._markers:
            # Another dict and no bar drawn since: the ones held will get no redraw
            # (progress bars off, or lost output).
            self._settle(out, adjacent=False, after=None)
        if not self._held and self._sig != _FLUSHED:  # (a burst may be flushed midway)
            self._sig_before_held = self._sig
        if values is not None and any(k in SUMMARY_KEYS for k in values):
            self._ended = True  # the training's summary: the next bar may start another
        if values is None:
            self.unreadable += 1
            self._unreadable_example = self._unreadable_example or text
            self._held.append(_Held({}, "unread", self.step, None, None))
        else:
            # The bar drawn before a dict is at most its step, unless the dict sat in
            # stdout's buffer while bars went on (redraws queued).
            before = None if self._buffered or self._markers else self.step
            self._held.append(
                _Held(values, _kind(values), before, _epoch(values, text), _explicit_step(values))
            )
        self._sig = _DICT
        self._check = None
        if len(self._held) > MAX_HELD:
            self._settle(out, adjacent=False, after=None)

    # -- steps ---------------------------------------------------------------

    def _new_training(self) -> None:
        self._markers.clear()
        self._n = None
        self._ended = False
        self._obs_last: dict[str, int] = {}  # last observed (exact) step per kind
        self._diffs: dict[str, tuple[int | None, int]] = {}  # last two step differences
        self._ratio: tuple[float, float] | None = None  # global_step / epoch, an interval
        self._ratio_broken = False
        self._distrust = False

    def _settle(self, out: list[Item], *, adjacent: bool, after: int | None) -> bool:
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
        held, self._held = self._held, []
        n, m = len(held), len(self._markers)
        queued = list(self._markers)
        # Readings of the counts, most likely first; the first that keeps the order
        # and agrees with the epochs wins: (dicts from the queue, the bar is the last's).
        if self._buffered and not self._queued_any:
            readings = []  # bursts of stdout but no redraws seen to place them: estimates
        elif adjacent and after is not None:
            readings = [(n - 1, True)] if m == n - 1 else [(n, False), (n - 1, True)]
        else:
            readings = [(n, False)] if m >= n else [(n - 1, False)] if m == n - 1 else []
        exact: list[int | None] = [None] * n
        used = False
        for take, last_is_after in readings:
            if take > m or take < 0:
                continue
            trial: list[int | None] = [*queued[:take], *[None] * (n - take)]
            if last_is_after:
                trial[-1] = after
            if self._agrees(held, trial):
                exact, used = trial, last_is_after
                for _ in range(take):
                    self._markers.popleft()
                if take and n >= 2:
                    self._buffered = True
                break
        if used or not readings or exact == [None] * n:
            self._markers.clear()  # its own redraw, or counts that do not add up: start over
        for i, h in enumerate(held):
            step = exact[i]
            if step is not None:
                self._emit(h, step, True, out)
                self._observe(h, step)
                continue
            hi = next((e for e in exact[i + 1 :] if e is not None), after)
            step, known = self._estimate(h, hi)
            self._emit(h, step, known, out)
            if i == n - 1:
                self._check = (h, step, known)
        return used

    def _agrees(self, held: list[_Held], exact: list[int | None]) -> bool:
        """Steps from redraws must keep the order and agree with each dict's epoch."""
        floor: dict[str, int] = {}
        prev = self._last or 0
        for h, step in zip(held, exact):
            if step is None or h.kind in ("summary", "unread") or not h.values:
                continue
            last = floor.get(h.kind, self._last_kind.get(h.kind))
            if step < prev or (last is not None and step <= last):
                return False
            span = self._epoch_span(h)
            if span is not None and not span[0] - 1 <= step <= span[1] + 1:
                return False
            prev = floor[h.kind] = step
        return True

    def _floor(self, kind: str, *, known_only: bool = False) -> int:
        """The smallest step the next dict of `kind` can have (from the steps emitted so
        far, or only from those that were known)."""
        last, by_kind = (self._known, self._known_kind) if known_only else (
            self._last, self._last_kind)
        floor = last if last is not None else 0
        prev = by_kind.get(kind)
        return max(floor, prev + 1) if prev is not None else floor

    def _estimate(self, h: _Held, hi: int | None) -> tuple[int, bool]:
        if h.kind == "summary":
            step = self.step if self.step is not None else (self._last or 0)
            return max(step, self._last or 0), False
        floor = self._floor(h.kind)  # steps never go back
        # The bar drawn before the dict is at most its step, as far as the output is not
        # buffered: a bound for the estimate, never a proof.
        lo = floor if h.bar_before is None else max(floor, h.bar_before)
        if self.total is not None:
            cap = self._offset + self.total  # global_step never passes max_steps
            hi = cap if hi is None else min(hi, cap)
        if hi is not None and hi <= lo:
            return max(hi, floor), hi == self._floor(h.kind, known_only=True)

        def fits(step: int | None) -> bool:
            return step is not None and step >= lo and (hi is None or step <= hi)

        if fits(h.explicit):
            return h.explicit, True  # type: ignore[return-value]
        by_epoch = self._epoch_step(h)
        last = self._last_kind.get(h.kind)
        cadence = self._cadence(h.kind)
        if fits(by_epoch):  # with the cadence agreeing, the step is known
            known = cadence is not None and last is not None and last + cadence == by_epoch
            return by_epoch, known and not self._distrust  # type: ignore[return-value]
        if cadence is not None and last is not None and fits(last + cadence):
            return last + cadence, False
        guess = lo
        if h.kind == "train":
            base = last if last is not None else self._offset
            guess = max(lo, base + (cadence or self.logging_steps))
        return (guess if hi is None else min(guess, hi)), False

    def _cadence(self, kind: str) -> int | None:
        """The step difference between the last observed dicts of `kind` (with the one
        before, when known, agreeing)."""
        d = self._diffs.get(kind)
        return d[1] if d is not None and d[0] in (None, d[1]) else None

    def _epoch_span(self, h: _Held) -> tuple[int, int] | None:
        """Steps the dict's epoch allows, from the ratio seen so far (None: unknown)."""
        if self._ratio is None or h.epoch is None:
            return None
        v, half = h.epoch
        lo = math.ceil((v - half) * self._ratio[0] - 1e-9)
        hi = math.floor((v + half) * self._ratio[1] + 1e-9)
        return self._offset + lo, self._offset + hi

    def _epoch_step(self, h: _Held) -> int | None:
        """The one step the dict's epoch allows; None when unknown or not one."""
        span = self._epoch_span(h)
        return span[0] if span is not None and span[0] == span[1] else None

    def _observe(self, h: _Held, step: int) -> None:
        """Learn the cadence and the epoch ratio from a dict whose step is exact."""
        if h.kind == "summary" or not h.values:
            return
        prev = self._obs_last.get(h.kind)
        if prev is not None and step > prev:
            d = self._diffs.get(h.kind)
            self._diffs[h.kind] = (d[1] if d else None, step - prev)
        self._obs_last[h.kind] = step
        local = step - self._offset
        if h.epoch is None or local <= 0 or self._ratio_broken:
            return
        v, half = h.epoch
        lo, hi = local / (v + half), local / (v - half)
        if self._ratio is not None:
            lo, hi = max(lo, self._ratio[0]), min(hi, self._ratio[1])
        if lo > hi:  # epoch is not proportional to the step in this run
            self._ratio, self._ratio_broken = None, True
        else:
            self._ratio = (lo, hi)

    def _emit(self, h: _Held, step: int, known: bool, out: list[Item]) -> None:
        if h.kind == "summary":
            if h.values:
                out.append(MetricsLine(step, h.values, True, known))
            return
        if not h.values:
            return  # a dict with nothing to plot ({} or only text values)
        floor = self._floor(h.kind)
        if step < floor:
            step, known = floor, False
        self._last = step
        self._last_kind[h.kind] = step
        if known:
            self._known = step
            self._known_kind[h.kind] = step
        self.lines_seen += 1
        self.estimated += not known
        out.append(MetricsLine(step, h.values, False, known))


# -- telling a Trainer log from a JSONL stream ---------------------------------

def looks_like_trainer_log(head: bytes) -> bool:
    """Whether the first bytes of a file are a Trainer's console output, not a JSONL stream.

    True on a tqdm bar or a Python-dict log line anywhere in `head`, or when the
    text is mostly lines that are not JSON objects (warnings, `Map:` bars and
    messages before the first log). False for JSON-object lines and for empty input.
    """
    text = head[:65_536].decode("utf-8", "replace").lstrip("\ufeff")
    lines = text.split("\n")
    complete = lines[:-1] if len(lines) > 1 else lines
    json_lines = other = 0
    for i, line in enumerate(lines):
        for segment in line.split("\r"):
            seg = _CSI.sub("", segment).strip() if "\x1b" in segment else segment.strip()
            if not seg:
                continue
            if seg[0] == "{":
                if i >= len(complete) and len(lines) > 1:
                    continue  # a cut last line says nothing
                try:
                    obj = json.loads(seg)
                except ValueError:
                    if parse_metrics_dict(seg) is not None:
                        return True  # {'loss': ...}: a Python dict, printed
                    other += 1
                    continue
                if isinstance(obj, dict):
                    json_lines += 1
                    continue
            bar = parse_progress(seg)
            if bar is not None and (bar.total is not None or "%|" in seg):
                return True
            if i < len(complete) or len(lines) == 1:
                other += 1
    return other > json_lines


# -- items -> events (shared by every source of Trainer output) ----------------

def clean_values(
    values: dict[str, float],
    rename: bool = True,
    skip: Callable[[str, str], None] | None = None,
) -> dict[str, float]:
    """Finite metric values of one dict, keys canonical unless `rename` is False
    (the summary keeps `train_loss`). `skip(reason, example)` hears of every value left out."""
    clean: dict[str, float] = {}
    for key, value in values.items():
        if not is_metric_key(key):
            continue
        v = valid_number(value)
        if v is None:
            if skip is not None:
                skip("value not a finite number", f"{key}: {value}")
            continue
        clean[canonical(key) if rename else key] = v
    return clean


def trainer_events(
    run: RunRef,
    items: Iterable[Item],
    clean: Callable[[dict[str, float], bool], dict[str, float]] = clean_values,
    *,
    wall_time: float | None = None,
) -> list[Event]:
    """Parser items -> events for one run: `RunMeta` for each end-of-training summary
    (`train_summary`, keys as printed) and `{"steps_estimated": True}` when a plotted
    step was estimated, one `ScalarBatch` of the dicts, `Progress` of the last bar."""
    rows: list[tuple[int, dict[str, float]]] = []
    out: list[Event] = []
    bar: BarUpdate | None = None
    estimated = False
    for item in items:
        if isinstance(item, BarUpdate):
            bar = item
        elif item.summary:
            out.append(RunMeta(run, {"train_summary": clean(item.values, False)}))
        else:
            values = clean(item.values, True)
            if values:
                rows.append((item.step, values))
                estimated = estimated or not item.step_known
    if estimated:
        out.append(RunMeta(run, {"steps_estimated": True}))
    if rows:
        when = time.time() if wall_time is None else wall_time
        out.append(ScalarBatch.from_rows(run, rows, wall_time=when))
    if bar is not None:
        out.append(Progress(run, bar.step, bar.total, bar.eta_s))
    return out
