"""Follow a JSON-lines metrics stream that another process appends to.

The stream format (written by carl-tui's TRL callback; anyone may write it):
one JSON object per line, UTF-8, each line ended by a newline.

Metrics line (any object without an "event" key)::

    {"step": 12, "time": 1732350000.1, "loss": 0.4, "entropy": 1.2,
     "mean_token_accuracy": 0.8, "rewards/reverse/mean": 0.5}

- The step key may be `step`, `global_step`, `train/global_step` or `_step`
  (the first one present decides, in that order). It must be an integer >= 0
  (12 or 12.0). A line without any step key gets the previous metrics line's
  step + 1 (the first such line of a stream gets step 0); see
  `sources.rows` for when that can collide with a logged step.
- `time` is optional, epoch seconds; it is not a metric.
- Every other key is a metric. `train/`-prefixed keys are accepted and
  canonicalised (`train/loss` -> `loss`). Values must be finite numbers.
  Duplicate keys in one line: the last one wins (as in Python's json).

Meta line -> `RunMeta` (all fields except "event")::

    {"event": "meta", "run_id": "r1", "name": "tiny-sft", "project": "carl",
     "model": "tiny", "method": "sft", "vocab_size": 20, "config": {...}}

    run_id / name / project set the run's identity, unless the source was
    given an explicit `run`, and only before the first metrics line of the
    file (a later meta line merges its fields but does not rename the run).

Marker line -> `Marker`; every other field is the marker's detail; without a
step key it is placed at the latest metrics step::

    {"event": "marker", "kind": "phase_transition", "step": 14, "metric": 0.995}

Log line -> `LogLines` (consecutive log lines travel together)::

    {"event": "log", "text": "gate fired at step 14"}

Completions line (the CARL callback's sample of a GRPO step, read by the completions
view, `carl_tui/completions/`): valid, not plotted, counted apart as "completions"::

    {"event": "completions", "step": 12, "rows": [{"prompt": "...", "completion": "..."}]}

Skipped input, one rule. Nothing is guessed: a line is either used as a
whole (less its invalid values) or skipped as a whole, and every skip is
counted in the source's `unused_input` (an `UnusedInput`: by reason, with the first
example; `skipped` is the total). Blank lines are ignored, not counted.

- "not UTF-8": the line is not UTF-8, or has NUL bytes inside its text
  (UTF-16 looks like that). Only UTF-8 is read. A UTF-8 byte order mark at
  the start of a line (the file's first line, or a file appended to another)
  is removed, as are NUL bytes before or after a line's text (the hole a
  log rotation leaves when it truncates a file under a writer).
- "not JSON": not valid JSON (the bare NaN / Infinity literals that Python's
  json writes are accepted, as are numbers too large for a float).
- "not an object": valid JSON that is not an object (null, 3, [1], "text").
- "invalid step": the step (of a metrics or a marker line) is not an integer
  in [0, 2**62): NaN, true, "nine", 10.5, null, nested, 2**62 or more.
  "negative step": it is a negative integer (never taken as its absolute
  value). The whole line is skipped: a step is never invented for it.
- "unknown event", "marker without kind", "log without text".
- "value not a finite number" (NaN, Infinity, "NaN") and "value not a number"
  (strings, booleans, null, lists, objects): one count per value; the line's
  other values are kept.
- "line too long" (longer than `max_line_bytes`, 32 MB by default) and
  "unfinished line" (a last line without its newline in a file that was then
  truncated or replaced, or that a reader stopping there (`drain()`, for
  `summary` and `export`) cannot read as JSON).

Default run identity: source "jsonl", project = the file's folder name,
run_id = the file's stem.

Tailing is `sources.tail.FileFollower`: complete lines only, a half-written
last line waits for its newline (`drain()` reads it, when whole, for readers
that stop at the end of the file); a FIFO is read non-blocking; a directory or
a device is refused at once (no retry); a missing file raises
`SourceError("waiting for ...")` and the poller retries. A file that is
truncated, rewritten in place (even past the old offset before the next
poll) or replaced is read again from the start as a new generation; a
replaced file's old copy is drained first. Events emitted before stay in the
store (so a rewritten file's steps appear twice); a `LogLines` note says so,
`notes` keeps those sentences, `restarts` (= `generation`) counts them, and
`limitation` shows the latest in the status bar. A large backlog is read in
bounded pieces (`max_bytes_per_poll`, `chunk_lines` lines per `ScalarBatch`)
and `interval` is 0 until it is caught up. Within one chunk of lines, meta
events come first, then the chunk's metrics batch, then markers and log lines
in file order.

Newest first, coarse to fine (`preview = True`, set by the dashboard; `summary`
and `export` leave it off): a long file is first previewed from its end (its
last `PREVIEW_TAIL_BYTES` and one line near each of `PREVIEW_SAMPLE_LINES`
evenly spaced offsets before them, in point reads: `follow.sample_lines`) as
`ScalarBatch(preview=True)` of the metrics lines that carry a step; then read in
order as above, and an empty preview batch says when it has passed the preview's
last line. A preview counts no skipped input (every line is read again).
"""

from __future__ import annotations

import bisect
import json
import logging
import os
import stat
import threading
from collections.abc import Sequence
from operator import contains
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from carl_tui.events import Event, LogLines, Marker, RunMeta, RunRef, ScalarBatch
from carl_tui.identity import file_run
from carl_tui.metric_names import STEP_KEYS
from carl_tui.sources.base import HOLD_MAX_S, PolledSource
from carl_tui.sources.line_marks import completions_marks
from carl_tui.sources.rows import (
    RowColumns,
    build_columns,
    clean_text,
    log_lines,
    short_repr,
    step_of,
)
from carl_tui.sources.run_config import loads_json
from carl_tui.sources.tail import BOM, DEFAULT_MAX_LINE_BYTES, FileFollower, sample_lines
from carl_tui.sources.unused_input import UnusedInput

_IDENTITY_KEYS = ("run_id", "name", "project")
MAX_NOTES = 50
PREVIEW_MIN_BYTES = 16 << 20  # a shorter file is simply read
PREVIEW_TAIL_BYTES = 512 << 10  # the newest lines of the preview
PREVIEW_SAMPLE_LINES = 1500  # evenly spaced lines before them

NOT_UTF8 = "not UTF-8"
NOT_JSON = "not JSON"
NOT_OBJECT = "not an object"
UNKNOWN_EVENT = "unknown event"
MARKER_WITHOUT_KIND = "marker without kind"
LOG_WITHOUT_TEXT = "log without text"
INTERNAL_ERROR = "could not be parsed (a carl-tui bug)"
UNFINISHED_LINE = "unfinished line"

log = logging.getLogger(__name__)

_BLANK = object()  # a blank line: ignored
_SKIP = object()  # a line already counted as skipped


MAX_DEPTH = 32  # meta and marker details deeper than this are cut


def _example(line: bytes) -> str:
    return clean_text(line[:200].decode("utf-8", "replace"))


def _clean(value: Any, depth: int = 0) -> Any:
    """Meta and marker fields made safe to show: control characters replaced,
    nesting cut at MAX_DEPTH."""
    t = type(value)
    if t is str:
        return clean_text(value)
    if t is dict or t is list:
        if depth >= MAX_DEPTH:
            return "<nested too deep>"
        if t is list:
            return [_clean(v, depth + 1) for v in value]
        return {clean_text(str(k)): _clean(v, depth + 1) for k, v in value.items()}
    return value


def _encodable(obj: Any) -> bool:
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except (UnicodeEncodeError, RecursionError, ValueError):
        return False
    return True


class StreamParser:
    """Turns complete lines of the stream format into events.

    Keeps the run identity, the previous step and the unused input between
    calls. Shared by `JsonlSource` and `ReplaySource`.
    """

    def __init__(self, run: RunRef, *, explicit: bool, unused_input: UnusedInput | None = None):
        self.run = run
        self.explicit = explicit
        self.prev_step = -1
        self.metrics_seen = False
        self.unused_input = unused_input if unused_input is not None else UnusedInput()

    @property
    def skipped(self) -> int:
        return self.unused_input.total

    def reset(self) -> None:
        """A new generation of the file: steps restart, identity may be set again."""
        self.prev_step = -1
        self.metrics_seen = False

    def parse(self, lines: Sequence[bytes], time_offset: float = 0.0) -> list[Event]:
        """Events of complete lines (without their newlines). Never raises on
        bad input: every line is either used or counted in the unused input."""
        if not lines:
            return []
        try:
            objs: list[Any] = list(map(orjson.loads, lines))
        except orjson.JSONDecodeError:
            objs = list(map(self._parse_one, lines))
        if set(map(type, objs)) != {dict}:
            objs = [self._check_object(o, line) for o, line in zip(objs, lines, strict=True)]
        if any(map(contains, filter(None, objs), ("event",) * len(objs))):
            return self._parse_mixed(objs, time_offset)
        return self._metrics_events([o for o in objs if o is not None], time_offset)

    def _parse_one(self, line: bytes) -> Any:
        text = line.removeprefix(BOM)
        if b"\x00" in text:
            text = text.strip(b"\x00")
            if b"\x00" in text:
                self.unused_input.skip(NOT_UTF8, _example(line))
                return _SKIP
        if not text.strip():
            return _BLANK
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
        try:
            decoded = text.decode("utf-8")
        except UnicodeDecodeError:
            self.unused_input.skip(NOT_UTF8, _example(line))
            return _SKIP
        if too_deep(text):  # the same limit as orjson's, whatever Python's own json allows
            self.unused_input.skip(NOT_JSON, _example(line))
            return _SKIP
        try:
            obj = json.loads(decoded)  # NaN / Infinity literals, integers beyond 64 bits
        except (ValueError, RecursionError):
            self.unused_input.skip(NOT_JSON, _example(line))
            return _SKIP
        if b"\\u" in text and not _encodable(obj):  # a lone surrogate escape
            self.unused_input.skip(NOT_UTF8, _example(line))
            return _SKIP
        return obj

    def _check_object(self, obj: Any, line: bytes) -> dict | None:
        if type(obj) is dict:
            return obj
        if obj is _BLANK or obj is _SKIP:
            return None
        self.unused_input.skip(NOT_OBJECT, _example(line))
        return None

    def _parse_mixed(self, objs: list[dict | None], time_offset: float) -> list[Event]:
        metrics: list[dict] = []
        metric_pos: list[int] = []  # index in `objs` of each metrics row
        metas: list[Event] = []
        others: list[tuple[int, dict]] = []
        for i, obj in enumerate(objs):
            if obj is None:
                continue
            kind = obj.get("event")
            if kind is None:
                metrics.append(obj)
                metric_pos.append(i)
            elif kind == "meta":
                if not self.explicit and not self.metrics_seen and not metrics:
                    self._adopt_identity(obj)
                meta = _clean({k: v for k, v in obj.items() if k != "event"})
                metas.append(RunMeta(self.run, meta))
            elif kind in ("marker", "log"):
                others.append((i, obj))
            elif kind == "completions":  # the completions view's (`a`), not plotted
                self.unused_input.note("completions")
            else:
                self.unused_input.skip(UNKNOWN_EVENT, f"event={short_repr(kind)}")
        prev_step = self.prev_step
        events: list[Event] = list(metas)
        cols = self._columns(metrics)
        events.extend(self._batch(cols, time_offset))
        pending_log: list[str] = []
        for i, obj in others:
            if obj["event"] == "log":
                text = obj.get("text")
                if isinstance(text, str):
                    pending_log.extend(log_lines(clean_text(text)))
                else:
                    self.unused_input.skip(LOG_WITHOUT_TEXT, f"text={short_repr(text)}")
                continue
            kind = obj.get("kind")
            if not isinstance(kind, str) or not kind:
                self.unused_input.skip(MARKER_WITHOUT_KIND, f"kind={short_repr(kind)}")
                continue
            if "step" in obj:
                step = step_of(obj["step"])
                if isinstance(step, str):
                    self.unused_input.skip(step, f"marker step={short_repr(obj['step'])}")
                    continue
            else:
                step = self._latest_step(i, metric_pos, cols, prev_step)
            if pending_log:
                events.append(LogLines(self.run, tuple(pending_log)))
                pending_log = []
            detail = _clean({k: v for k, v in obj.items() if k not in ("event", "kind", "step")})
            events.append(Marker(self.run, clean_text(kind), step, detail))
        if pending_log:
            events.append(LogLines(self.run, tuple(pending_log)))
        return events

    @staticmethod
    def _latest_step(pos: int, metric_pos: list[int], cols: RowColumns | None, prev: int) -> int:
        """The step of the last kept metrics line before line `pos`."""
        k = bisect.bisect_left(metric_pos, pos) - 1  # metrics rows before the marker
        if cols is not None and k >= 0:
            j = k if cols.kept is None else bisect.bisect_right(cols.kept.tolist(), k) - 1
            if j >= 0:
                return int(cols.steps[j])
        return max(prev, 0)

    def _adopt_identity(self, meta: dict) -> None:
        fields = {
            k: clean_text(v)[:200] if isinstance(v, str) else short_repr(v)
            for k in _IDENTITY_KEYS
            if (v := meta.get(k)) not in (None, "")
        }
        if fields:
            self.run = RunRef(
                source=self.run.source,
                project=fields.get("project", self.run.project),
                run_id=fields.get("run_id", self.run.run_id),
                name=fields.get("name", self.run.name),
            )

    def _columns(self, rows: list[dict]) -> RowColumns | None:
        if not rows:
            return None
        return build_columns(rows, prev_step=self.prev_step, unused_input=self.unused_input)

    def _metrics_events(self, rows: list[dict], time_offset: float) -> list[Event]:
        return self._batch(self._columns(rows), time_offset)

    def _batch(self, cols: RowColumns | None, time_offset: float) -> list[Event]:
        if cols is None or not len(cols):
            return []
        self.prev_step = int(cols.steps[-1])
        self.metrics_seen = True
        wall = cols.last_time + time_offset if cols.last_time is not None else None
        times = cols.times + time_offset if cols.times is not None else None
        if times is not None and np.isnan(times).all():
            times = None
        return [ScalarBatch(self.run, cols.steps, cols.columns, wall_time=wall, times=times,
                            nonfinite=cols.nonfinite)]


class JsonlSource(PolledSource):
    """Tails one JSON-lines file. See the module docstring for the format."""

    previews = True

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        run: RunRef | None = None,
        interval: float = 0.5,
        chunk_lines: int = 100_000,
        max_bytes_per_poll: int = 8 << 20,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        since: float | None = None,
    ):
        self.path = Path(path)
        self.name = f"jsonl: {self.path.name}"
        self._interval = interval
        self.chunk_lines = max(1, chunk_lines)
        self.follower = FileFollower(
            self.path, max_bytes_per_poll=max_bytes_per_poll, max_line_bytes=max_line_bytes,
            since=since,
        )
        self.unused_input = UnusedInput()
        self.parser = StreamParser(
            run or file_run(self.path, "jsonl"), explicit=run is not None,
            unused_input=self.unused_input,
        )
        # the completions view's lines, marked as they are read: the file is read once
        self.completions_lines = completions_marks(self.follower)
        self.finished = False
        self.notes: list[str] = []  # what happened to the file (restarts), oldest first
        self._generation = 0
        self.behind = False
        self.preview = False  # preview a long file from its end first (the dashboard)
        self._previewed = False
        self._preview_end: int | None = None  # offset past the last line previewed
        self._preview_run: RunRef | None = None
        self._preview_gen = 0
        self.hold: threading.Event | None = None  # set by the dashboard: preview on screen

    @property
    def run(self) -> RunRef:
        return self.parser.run


    @property
    def offset(self) -> int:
        """Byte offset of the first line not yet read."""
        return self.follower.offset

    @property
    def generation(self) -> int:
        return self.follower.generation

    @property
    def restarts(self) -> int:
        """How many times the file started over (truncated, rewritten, replaced)."""
        return self.follower.restarts

    @property
    def max_bytes_per_poll(self) -> int:
        return self.follower.max_bytes_per_poll

    @property
    def limitation(self) -> str:
        if not self.restarts:
            return ""
        times = "once" if self.restarts == 1 else f"{self.restarts} times"
        latest = f" (latest: {self.notes[-1]})" if self.notes else ""
        return (f"{self.path.name} started over {times}{latest}; "
                "points read before stay in the plots")


    def poll(self) -> list[Event]:
        if self.preview and not self._previewed:
            events = self._preview_events()
            self._previewed = True
            if events:
                self.behind = True
                return events
        if self._preview_end is not None and self.hold is not None:
            self.hold.wait(HOLD_MAX_S)  # read the history once the preview is on screen
            self.hold = None
        got = self.follower.read()
        self.completions_lines.feed(got)
        self.behind = got.backlog
        for reason, example in got.dropped:
            self.unused_input.skip(reason, _example(example))
        events: list[Event] = []
        if got.generation != self._generation:
            self._generation = got.generation
            self.parser.reset()
        if got.notes:
            self.notes = (self.notes + got.notes)[-MAX_NOTES:]
            events.append(LogLines(self.run, tuple(f"[carl-tui] {n}" for n in got.notes)))
        lines = got.lines
        for i in range(0, len(lines), self.chunk_lines):
            chunk = lines[i : i + self.chunk_lines]
            try:
                events.extend(self.parser.parse(chunk))
            except Exception as exc:  # a bug must not stop the stream: count, say, go on
                log.exception("parsing %d lines of %s", len(chunk), self.path)
                self.unused_input.skip(INTERNAL_ERROR, f"{type(exc).__name__}: {exc}", len(chunk))
        if self._preview_end is not None and (
            self.follower.offset >= self._preview_end or not got.backlog
            or got.generation != self._preview_gen
        ):
            events.append(ScalarBatch(self._preview_run or self.run,
                                      np.empty(0, dtype=np.int64), {}, preview=True))
            self._preview_end = None
        self.finish_runs_at_training_end(events)
        return events

    def _preview_events(self) -> list[Event]:
        """A coarse view of a long file read from its end (see the module doc)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return []
        start = self.follower.offset
        if not stat.S_ISREG(st.st_mode) or st.st_size - start < PREVIEW_MIN_BYTES:
            return []
        try:
            got = sample_lines(self.path, start, st.st_size, count=PREVIEW_SAMPLE_LINES,
                               tail_bytes=PREVIEW_TAIL_BYTES)
        except OSError:
            return []
        # The run's identity is set by a meta line at the head: learn it apart.
        ident = StreamParser(self.parser.run, explicit=self.parser.explicit,
                             unused_input=UnusedInput())
        if start == 0:
            ident.parse([line.removeprefix(BOM) for line in got.head[:100]])
        rows = []
        for line in (*got.lines, *got.tail):
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if type(obj) is dict and "event" not in obj and any(k in obj for k in STEP_KEYS):
                rows.append(obj)
        if not rows:
            return []
        cols = build_columns(rows, unused_input=UnusedInput())
        if not len(cols):
            return []
        times = cols.times
        if times is not None and np.isnan(times).all():
            times = None
        self._preview_run = ident.run
        self._preview_end = got.tail_end
        self._preview_gen = self.follower.generation
        return [ScalarBatch(ident.run, cols.steps, cols.columns, wall_time=cols.last_time,
                            times=times, preview=True)]

    def drain(self) -> list[Event]:
        """The reader stops here (`summary`, `export`): a last line still without
        its newline is read if it is whole JSON, else counted as "unfinished line"."""
        line = self.follower.take_unfinished()
        if not line.strip(b" \t\r\x00"):
            return []
        try:
            loads_json(line.removeprefix(BOM))
        except (ValueError, RecursionError):
            self.unused_input.skip(UNFINISHED_LINE, _example(line))
            return []
        return self.parser.parse([line])

    def close(self) -> None:
        self.follower.close()


JSON_MAX_DEPTH = 1024  # orjson's nesting limit; the fallback reader is held to it too


def too_deep(text: bytes, limit: int = JSON_MAX_DEPTH) -> bool:
    """True when JSON text nests arrays/objects deeper than `limit` (strings skipped)."""
    if text.count(b"[") + text.count(b"{") <= limit:
        return False  # cannot nest deeper than it opens (counted at C speed)
    depth, in_string, escaped = 0, False, False
    for c in text:
        if in_string:
            if escaped:
                escaped = False
            elif c == 0x5C:  # backslash
                escaped = True
            elif c == 0x22:  # quote
                in_string = False
        elif c == 0x22:
            in_string = True
        elif c in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > limit:
                return True
        elif c in (0x5D, 0x7D):
            depth -= 1
    return False
