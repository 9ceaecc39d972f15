"""Parse what a Hugging Face Trainer prints: metric dict lines and tqdm bars.

The Trainer prints every log as a Python dict, e.g.
`{'loss': 0.12, 'reward': 0.8, 'entropy': 1.3, 'epoch': 0.5}` (transformers 5
prints the numbers as quoted strings: `{'loss': '3.889', ...}`), and a tqdm
bar such as ` 45%|████▌     | 45/100 [00:12<00:15,  3.60it/s]`, updated in
place with carriage returns.

No `eval`: a small scanner reads the dict. Values it understands: numbers,
numeric strings, `nan`/`inf`/`-inf` (also `NaN`, `Infinity`), and wrapped
scalars such as `np.float64(0.5)` or `tensor(0.5)`. Nested dicts/lists,
booleans, `None` and text are skipped. Non-finite values are returned as
floats; deciding what to do with them is the caller's job.

Step numbers: dict lines carry no step. `TrainerLogParser` takes the step
from the latest training progress bar when one has been seen; otherwise it
counts metric lines and multiplies by `logging_steps` (1st line -> step
`logging_steps`, 2nd -> `2 * logging_steps`, ...), which matches the
Trainer's `global_step` when every log is printed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

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


_BAR = re.compile(
    r"^(?P<desc>.*?)(?:(?P<pct>\d{1,3})%\|[^|]*\|)?\s*"
    r"(?P<n>\d+)(?:/(?P<total>\d+))?(?:it)?\s*"
    r"\[(?P<elapsed>[\d:]+)(?:<(?P<remaining>[\d:]+|\?))?,?(?P<rest>[^\]]*)\]\s*$"
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
    """` 45%|████▌     | 45/100 [00:12<00:15,  3.60it/s]` -> BarUpdate(45, 100, 15.0)."""
    s = text.strip()
    if "[" not in s or len(s) > 2048:
        return None
    m = _BAR.match(s)
    if m is None:
        return None
    has_bar = m.group("pct") is not None
    if not has_bar and m.group("total") is None and "it" not in s:
        return None
    desc = m.group("desc").strip().rstrip(":").strip()
    total = int(m.group("total")) if m.group("total") else None
    remaining = m.group("remaining")
    eta = _clock_seconds(remaining) if remaining and remaining != "?" else None
    return BarUpdate(step=int(m.group("n")), total=total, eta_s=eta, desc=desc)


@dataclass(frozen=True, slots=True)
class MetricsLine:
    """One parsed Trainer log dict, with the step it belongs to."""

    step: int
    values: dict[str, float]
    summary: bool = False  # the end-of-training summary (train_runtime, ...)
    step_from_bar: bool = True


@dataclass
class TrainerLogParser:
    """Feeds raw log lines, returns `MetricsLine` and `BarUpdate` items in order.

    Only progress bars without a description count as the training bar
    (`datasets`' "Map: 100%|..." bars are ignored). The first such bar with
    a total fixes the training total; bars with another total (evaluation)
    are reported but do not move the step, until the training bar has
    finished and a new one starts.
    """

    logging_steps: int = 1
    step: int | None = None  # latest training step seen on a bar
    total: int | None = None
    lines_seen: int = 0  # metric dict lines seen (for step inference without bars)
    _done: bool = field(default=False, repr=False)

    def feed(self, line: str) -> list[MetricsLine | BarUpdate]:
        out: list[MetricsLine | BarUpdate] = []
        if len(line) > MAX_LINE_CHARS * 4:
            return out
        for segment in line.split("\r"):
            seg = segment.strip()
            if not seg:
                continue
            if seg[0] == "{":
                values = parse_metrics_dict(seg)
                if values is not None:
                    item = self._metrics(values)
                    if item is not None:
                        out.append(item)
                continue
            bar = parse_progress(seg)
            if bar is not None and self._accept_bar(bar):
                out.append(bar)
        return out

    def _accept_bar(self, bar: BarUpdate) -> bool:
        if bar.desc:
            return False
        if bar.total is None:
            if self.total is None:
                self.step = bar.step
                return True
            return False
        if self.total is None or (self._done and bar.total != self.total and bar.step == 0):
            self.total, self._done = bar.total, False
        if bar.total != self.total:
            return False  # an evaluation bar inside training
        self.step = bar.step
        self._done = bar.step >= bar.total
        return True

    def _metrics(self, values: dict[str, float]) -> MetricsLine | None:
        if not values:
            return None
        summary = any(k in SUMMARY_KEYS for k in values)
        if not summary:
            self.lines_seen += 1
        explicit = values.get("step", values.get("global_step"))
        if explicit is not None and math.isfinite(explicit):
            return MetricsLine(int(explicit), values, summary, True)
        if self.step is not None:
            return MetricsLine(self.step, values, summary, True)
        inferred = max(self.lines_seen, 1) * self.logging_steps
        return MetricsLine(inferred, values, summary, False)
