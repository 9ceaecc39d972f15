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
that offset + the new training's `global_step`. A training resumed from a
checkpoint into the same stream (`resume_from_checkpoint`, after a stop or a
kill) is told apart by its bar's first move: it jumps from 0 to the
checkpoint's step + 1 or more, past the first step a new training logs at (the
previous training's first logged step or its cadence). Its steps are its
`global_step`, as the bar shows them: after a kill they go back to the
checkpoint and repeat the steps logged after it.

This module reads the text (dicts, bars, their order); trainer_steps.py works
out the steps (the training bar, the estimates, the held dicts and the queued
redraws of buffered bursts).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Sequence

from carl_tui.events import Event, LogLines, Progress, RunMeta, RunRef, ScalarBatch
from carl_tui.metric_names import canonical, framework_name, is_metric_key, valid_number
from carl_tui.sources.framework_lines import VERL_BAR, read_line, strip_ray_prefix
from carl_tui.sources.tally import InputTally
from carl_tui.sources.trainer_end import place
from carl_tui.sources.trainer_steps import (
    BarUpdate,
    Held,
    HeldDicts,
    MetricsLine,
    StepEstimator,
    TrainingBar,
    epoch_of,
    explicit_step,
)

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


Item = MetricsLine | BarUpdate

# What the last segment that matters was (segments that never matter: empty
# ones, escapes, bars of other positions, their clears).
# _BLANK: spaces (a bar being cleared); _CLEAR: spaces then "\r", as tqdm's clear() writes
# them before a tqdm.write (a redraw right after it means the text went to a buffer).
_NONE, _DICT, _BAR_SEEN, _BLANK, _CLEAR, _OTHER, _FLUSHED = range(7)

MAX_HELD = 10_000  # dicts held back at most (a burst of buffered stdout is far smaller)


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


class TrainerLogParser:
    """Feeds raw log lines, returns `MetricsLine` and `BarUpdate` items in order.

    A dict is held back until the training bar drawn after it tells its step
    (see the module docstring); `flush()` releases what is held when the stream
    ends or has been idle. Only bars without a description at the training
    bar's position count (`datasets`' "Map: 100%|..." bars, evaluation bars
    inside training and checkpoint-writing bars are ignored); a training bar
    whose count goes back (a new training) continues the steps after the last
    one. `logging_steps` is only a hint for streams without progress bars.

    This class reads the segments of the text (what was drawn, in what order);
    the steps are worked out by the pieces in trainer_steps.py: `TrainingBar`,
    `StepEstimator` and `HeldDicts`.
    """

    def __init__(self, logging_steps: int = 1):
        self.logging_steps = max(1, int(logging_steps))
        self.mispredicted = 0  # flushed predictions a later bar showed wrong
        self.unreadable = 0  # lines shaped like a dict that could not be read
        self._unreadable_example = ""
        self.framework: str | None = None  # "verl" or "openrlhf" once a line of theirs is read
        self.damaged = 0  # their metric lines that could not be read (framework_lines.py)
        self._damaged_example = ""
        self._bar = TrainingBar()
        self._steps = StepEstimator(self._bar, self.logging_steps)
        self._dicts = HeldDicts(self._steps)
        self._sig = _NONE
        self._sig_before_clear = _NONE
        self._sig_before_held = _NONE
        self._after_clear = False
        # After a new training's bar appeared: (the offset before it, the count above
        # which its first move means a resumed training), until that first move.
        self._resume: tuple[int, int | None] | None = None
        self._end_offset = 0  # without bars: the steps of the trainings placed so far

    @property
    def step(self) -> int | None:
        """Step on the latest training bar (with the steps of the trainings before)."""
        return self._bar.step

    @property
    def total(self) -> int | None:
        """Total of the current training bar."""
        return self._bar.total

    @property
    def lines_seen(self) -> int:
        """Non-summary dicts emitted."""
        return self._steps.lines_seen

    @property
    def estimated(self) -> int:
        """Non-summary dicts emitted with `step_known` False."""
        return self._steps.estimated

    @property
    def pending(self) -> int:
        """Dicts held back, waiting for their bar or for `flush()`."""
        return len(self._dicts.held)

    def take_unreadable(self) -> tuple[int, str]:
        """(dict-shaped lines that could not be read since the last call, the first one)."""
        out = (self.unreadable, self._unreadable_example)
        self.unreadable, self._unreadable_example = 0, ""
        return out

    def take_damaged(self) -> tuple[int, str]:
        """(verl or OpenRLHF metric lines that could not be read since the last call, the
        first one)."""
        out = (self.damaged, self._damaged_example)
        self.damaged, self._damaged_example = 0, ""
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
        if self._dicts.held:
            adjacent = self._sig == _DICT
            self._dicts.settle(out, adjacent=False, after=None)
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
            bare, level = self._strip_escapes(raw)
            text = bare.strip()
            self._after_clear = False
            if not text:
                if bare and level == 0:  # spaces: tqdm clearing a bar
                    self._sig_before_clear = self._sig
                    self._sig = _BLANK
                    self._after_clear = True  # unless a cursor-up follows: another bar's
                continue
            if not self._segment(text, level, out):
                self._sig = _OTHER

    def _strip_escapes(self, raw: str) -> tuple[str, int]:
        """The segment without terminal escapes, and the lines the cursor moves up after it.

        A cursor-up before the text means the clear just seen was another bar's."""
        if "\x1b" not in raw:
            return raw, 0
        lead = _LEAD_CSI.match(raw).group()  # type: ignore[union-attr]
        if lead and self._after_clear and _ups(lead):
            self._sig = self._sig_before_clear  # that clear was another bar's
        body = raw[len(lead):]
        return _CSI.sub("", body), _ups(body)

    def _segment(self, text: str, level: int, out: list[Item]) -> bool:
        """A dict, a bar, or a bar with a dict glued after it, or a verl or OpenRLHF metric
        line (framework_lines.py; also glued after a bar); False for other text."""
        text = strip_ray_prefix(text)
        if not text:
            return False
        if self._framework_line(text, out):
            return True
        if text[0] == "{":
            values = parse_metrics_dict(text)
            if values is not None or text[-1] == "}":
                self._on_dict(values, text, out)
                return True
        elif "[" in text:
            bar = parse_progress(text)
            if bar is not None:
                self._on_bar(bar, level, out)
                return True
            split = _split_bar(text)
            if split is not None:
                self._on_bar(split[0], level, out)
                text = split[1].strip()
                if self._framework_line(text, out):
                    return True
                if text[:1] == "{" and text[-1:] == "}":
                    self._on_dict(parse_metrics_dict(text), text, out)
                    return True
        return False

    def _framework_line(self, text: str, out: list[Item]) -> bool:
        """A verl or OpenRLHF metric line: its values at the step it states."""
        line = read_line(text, parse_metrics_dict)
        if line is None:
            return False
        self.framework = line.framework
        self._sig = _OTHER
        if line.unreadable:
            self.damaged += 1
            self._damaged_example = self._damaged_example or text
            return True
        if self._dicts.held:
            self._dicts.settle(out, adjacent=False, after=None)
        values = {framework_name(line.framework, k): v for k, v in line.values.items()}
        if values:
            out.append(MetricsLine(line.step, values))
        return True

    def _on_bar(self, bar: BarUpdate, level: int, out: list[Item]) -> None:
        if bar.desc:
            if bar.desc == VERL_BAR and self.framework == "verl":
                out.append(bar)  # verl's bar counts the steps done, of its total
            return  # Map:, Writing model shards:, ...
        if not self._bar.accepts(bar, level):
            return
        first = self._bar.n is None
        if self._bar.starts_training(bar):
            if self._dicts.held:
                self._dicts.settle(out, adjacent=False, after=None)
            self._resume = (self._bar.offset, self._steps.resume_threshold())
            self._bar.offset = max(self._bar.offset, self._steps.last or 0)
            self._new_training()
            first = True
        if self._resume is not None and bar.step > 0:
            self._check_resume(bar.step)
        step = self._bar.move(bar)
        sig = self._sig
        redraw = False  # this bar is the redraw of a tqdm.write whose text is still buffered
        if self._dicts.held:
            used = self._dicts.settle(out, adjacent=sig == _DICT, after=step)
            redraw = sig == _DICT and not used and self._sig_before_held in (_BLANK, _CLEAR)
        elif sig == _FLUSHED:  # right after dicts released by flush()
            if self._dicts.check is not None:  # the last one was estimated: this is its redraw
                self._check_prediction(step)
            else:
                redraw = self._sig_before_held in (_BLANK, _CLEAR)
        if (sig == _CLEAR or redraw) and not first:
            self._dicts.queue_redraw(step)
        self._dicts.check = None
        self._sig = _BAR_SEEN
        out.append(bar)

    def _check_resume(self, count: int) -> None:
        """The first count of a new training's bar: a resumed training (its global_step
        continues from a checkpoint: the bar jumps past where the previous training's
        first log or its logging cadence put a new training's first step), or a new one."""
        offset, threshold = self._resume  # type: ignore[misc]
        self._resume = None
        if threshold is not None and count > threshold:
            self._bar.offset = offset
            self._steps.resumed(offset + count)

    def _check_prediction(self, step: int) -> None:
        """The redraw of the last dict released by `flush()`, estimated: was it right?"""
        held, predicted, known = self._dicts.check  # type: ignore[misc]
        if known and predicted != step:
            self.mispredicted += 1
            self._steps.distrust = True
        self._steps.observe(held, step)

    def _on_dict(self, values: dict[str, float] | None, text: str, out: list[Item]) -> None:
        """`values` None: a dict line that could not be read; it still was one write."""
        dicts = self._dicts
        if self._sig in (_DICT, _FLUSHED) and self._bar.n is not None:
            dicts.buffered = True  # dict after dict, no clear between: a burst of stdout
        if dicts.held and not dicts.markers and self._bar.level is not None:
            # Another dict and no bar drawn since: the ones held will get no redraw
            # (lost output). (No bar at all: progress bars off; held for the end line.)
            dicts.settle(out, adjacent=False, after=None)
        if not dicts.held and self._sig != _FLUSHED:  # (a burst may be flushed midway)
            self._sig_before_held = self._sig
        kind = None if values is None else _kind(values)
        if kind == "summary":
            self._bar.ended = True  # the training's summary: the next bar may start another
        if values is None:
            self.unreadable += 1
            self._unreadable_example = self._unreadable_example or text
            dicts.held.append(Held({}, "unread", self._bar.step, None, None))
        else:
            # The bar drawn before a dict is at most its step, unless the dict sat in
            # stdout's buffer while bars went on (redraws queued).
            before = None if dicts.buffered or dicts.markers else self._bar.step
            dicts.held.append(
                Held(values, kind, before, epoch_of(values, text), explicit_step(values))
            )
        self._sig = _DICT
        dicts.check = None
        if kind == "summary" and self._bar.level is None:
            self._place_by_end_line(out)
        if len(dicts.held) > MAX_HELD:
            dicts.settle(out, adjacent=False, after=None)

    def _place_by_end_line(self, out: list[Item]) -> None:
        """No bar in the stream: the training's summary says where its dicts were
        (trainer_end.py); still estimates, within one logging interval."""
        held = self._dicts.held
        steps = place(held, self._end_offset)
        if steps is None:
            return  # left to the estimates, as at flush()
        self._dicts.held = []
        for h, step in zip(held, steps):
            self._steps.emit(h, step, False, out)
        self._end_offset = steps[-1]

    def _new_training(self) -> None:
        self._dicts.markers.clear()
        self._bar.new_training()
        self._steps.new_training()



UNREADABLE_DICT = "dict line not readable"
DAMAGED_LINE = "verl/OpenRLHF metric line not readable"


class TrainerOutput:
    """A Trainer's console output as events, for a source that reads it (a file, a
    job's log): the parser, the dicts it holds back for a bar, and when to let them
    go (the output ended, or no line came for `idle_flush_s`: a step may then be
    estimated, and the run's meta says `steps_estimated`)."""

    def __init__(self, run: RunRef, tally: InputTally, *, logging_steps: int = 1,
                 idle_flush_s: float = 2.0) -> None:
        self.run = run
        self.tally = tally
        self.logging_steps = logging_steps
        self.idle_flush_s = idle_flush_s
        self.parser = TrainerLogParser(logging_steps)
        self._last_line_at: float | None = None

    def events(self, lines: Sequence[str], now: float, *, ended: bool = False,
               release: bool = True, shown: Sequence[str] = ()) -> list[Event]:
        """Events of new lines (`shown`: notes put before them in the log panel). What
        is held is released, when `release`, once the output ended or has been idle."""
        items: list[Item] = []
        for line in lines:
            items.extend(self.parser.feed(line))
        if lines:
            self._last_line_at = now
        last = self._last_line_at
        idle = last is not None and now - last >= self.idle_flush_s
        if release and self.parser.pending and (ended or idle):
            items.extend(self.parser.flush())
        return self._convert([*shown, *lines], items)

    def flush(self) -> list[Event]:
        """Everything held, released (the output ends, or the reader stops here)."""
        return self._convert([], list(self.parser.flush())) if self.parser.pending else []

    def restart(self) -> list[Event]:
        """The output started over (a new file): what the old one held, then a new parser."""
        done = self.flush()
        self.parser = TrainerLogParser(self.logging_steps)
        return done

    def _convert(self, lines: list[str], items: list[Item]) -> list[Event]:
        count, example = self.parser.take_unreadable()
        if count:
            self.tally.skip(UNREADABLE_DICT, example, count)
        count, example = self.parser.take_damaged()
        if count:
            self.tally.skip(DAMAGED_LINE, example, count)
        out: list[Event] = [LogLines(self.run, tuple(lines))] if lines else []
        out.extend(trainer_events(self.run, items, self._clean))
        return out

    def _clean(self, values: dict[str, float], rename: bool) -> dict[str, float]:
        return clean_values(values, rename, self.tally.skip)

# -- telling a Trainer log from a JSONL stream ---------------------------------

def looks_like_trainer_log(head: bytes) -> bool:
    """Whether the first bytes of a file are a Trainer's console output, not a JSONL stream.

    Every line of `head` has its say: a JSON object (or a line that means to be one: it
    opens with `{"`, as Python never prints a dict of names) against a Python-dict log
    line, a tqdm bar or any other text (warnings, `Map:` bars and messages before the
    first log). True when the JSON objects are not the majority, so a stream with a few
    odd lines (`nan`, a 5,000-digit number, a raw control character) stays a stream.
    False for empty input.
    """
    text = head[:65_536].decode("utf-8", "replace").lstrip("\ufeff")
    lines = text.split("\n")
    last = len(lines) - 1 if len(lines) > 1 else len(lines)  # a cut last line: no JSON say
    json_lines = other = 0
    for i, line in enumerate(lines):
        kind = _line_kind(line, complete=i < last)
        if kind == "json":
            json_lines += 1
        elif kind is not None:
            other += 1
    return other > json_lines


def _line_kind(line: str, *, complete: bool) -> str | None:
    """"json", "trainer" (a dict log line or a bar), "other", or None (blank, or a cut
    line that may be the start of a JSON object)."""
    segments = []
    for segment in line.split("\r"):
        seg = _CSI.sub("", segment).strip() if "\x1b" in segment else segment.strip()
        if seg:
            segments.append(seg)
    if not segments:
        return None
    if len(segments) == 1 and segments[0][0] == "{":
        if not complete:
            return None
        seg = segments[0]
        try:
            obj = json.loads(seg)
        except (ValueError, RecursionError):
            obj = None
        if isinstance(obj, dict) or seg.startswith('{"'):
            return "json"
    for seg in segments:
        if read_line(strip_ray_prefix(seg), parse_metrics_dict) is not None:
            return "trainer"  # a verl or OpenRLHF metric line
        if seg[0] == "{" and parse_metrics_dict(seg) is not None:
            return "trainer"  # {'loss': ...}: a Python dict, printed
        bar = parse_progress(seg)
        if bar is not None and (bar.total is not None or "%|" in seg):
            return "trainer"
    return "other" if complete else None


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
    nonfinite: list[tuple[str, int]] = []  # (metric, step) printed as nan or inf
    out: list[Event] = []
    bar: BarUpdate | None = None
    estimated = False
    for item in items:
        if isinstance(item, BarUpdate):
            bar = item
        elif item.summary:
            out.append(RunMeta(run, {"train_summary": clean(item.values, False),
                                     "train_summary_step": item.step}))
        else:
            values = clean(item.values, True)
            nonfinite.extend(_nonfinite(item.values, item.step))
            if values:
                rows.append((item.step, values))
                estimated = estimated or not item.step_known
    if estimated:
        out.append(RunMeta(run, {"steps_estimated": True}))
    if rows:  # no time of their own: the run's age is its file's (`Source.data_time`)
        out.append(ScalarBatch.from_rows(run, rows, wall_time=wall_time,
                                          nonfinite=nonfinite))
    if bar is not None:
        out.append(Progress(run, bar.step, bar.total, bar.eta_s))
    return out


def _nonfinite(values: dict, step: int) -> list[tuple[str, int]]:
    """(metric, step) of the values of one dict printed as nan or inf: the store's NaN
    alert (and a guard) hears of a loss that turned NaN, as from every other source."""
    return [(canonical(k), step) for k, v in values.items()
            if type(v) is float and not math.isfinite(v) and is_metric_key(k)]
