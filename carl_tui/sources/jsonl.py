"""Follow a JSON-lines metrics stream that another process appends to.

The stream format (written by carl-tui's TRL callback; anyone may write it):
one JSON object per line, UTF-8, each line ended by a newline.

Metrics line (any object without an "event" key)::

    {"step": 12, "time": 1732350000.1, "loss": 0.4, "entropy": 1.2,
     "mean_token_accuracy": 0.8, "rewards/reverse/mean": 0.5}

- The step key may be `step`, `global_step` or `train/global_step` (first one
  present wins, in that order). It must be an integer (12 or 12.0). A line with
  no valid step gets the previous metrics line's step + 1; the first such line
  of a stream gets step 0.
- `time` is optional, epoch seconds; it is not a metric.
- Every other key is a metric. `train/`-prefixed keys are accepted and
  canonicalised (`train/loss` -> `loss`). Values must be finite numbers;
  NaN, Infinity (also the bare `NaN`/`Infinity` literals Python's json
  writes), strings, booleans, null and nested values are skipped.

Meta line -> `RunMeta` (all fields except "event")::

    {"event": "meta", "run_id": "r1", "name": "tiny-sft", "project": "carl",
     "model": "tiny", "method": "sft", "vocab_size": 20, "config": {...}}

    run_id / name / project set the run's identity, unless the source was
    given an explicit `run`, and only before the first metrics line of the
    file (a later meta line merges its fields but does not rename the run).

Marker line -> `Marker`; every other field is the marker's detail; without a
valid step it is placed at the latest metrics step::

    {"event": "marker", "kind": "phase_transition", "step": 14, "metric": 0.995}

Log line -> `LogLines` (consecutive log lines travel together)::

    {"event": "log", "text": "gate fired at step 14"}

Anything else (not JSON, not an object, an unknown "event", a marker without a
kind, a log without text) is a malformed line: skipped and counted in
`skipped`, as is every invalid value (one per value). Blank lines are ignored.

Default run identity: source "jsonl", project = the file's folder name,
run_id = the file's stem.

Tailing: the source resumes by byte offset and reads only complete lines; a
half-written last line waits until its newline arrives. A file that shrinks
below the offset (truncated) or is replaced (another inode at the path) is a
new generation and is read again from the start; any complete lines left in
the replaced file are read first. Events emitted before stay in the store (so
a rewritten file's steps appear twice); a `LogLines` note says it happened and
`generation` counts it. A missing file raises `SourceError("waiting for ...")`
and the poller retries. A large backlog is read in bounded pieces
(`max_bytes_per_poll`, `chunk_lines` lines per `ScalarBatch`) and `interval`
is 0 until it is caught up. Within one chunk of lines, meta events come first,
then the chunk's metrics batch, then markers and log lines in file order.
"""

from __future__ import annotations

import bisect
import json
import os
from collections.abc import Sequence
from operator import contains
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from carl_tui.events import Event, LogLines, Marker, RunMeta, RunRef, ScalarBatch
from carl_tui.metric_names import valid_number
from carl_tui.sources.base import SourceError
from carl_tui.sources.rows import RowColumns, build_columns

_IDENTITY_KEYS = ("run_id", "name", "project")


def _loads_lenient(line: bytes) -> Any:
    """orjson, then the standard library (which accepts NaN / Infinity literals)."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return json.loads(line)


class StreamParser:
    """Turns complete lines of the stream format into events.

    Keeps the run identity, the previous step and the skipped count between
    calls. Shared by `JsonlSource` and `ReplaySource`.
    """

    def __init__(self, run: RunRef, *, explicit: bool):
        self.run = run
        self.explicit = explicit
        self.prev_step = -1
        self.metrics_seen = False
        self.skipped = 0

    def reset(self) -> None:
        """A new generation of the file: steps restart, identity may be set again."""
        self.prev_step = -1
        self.metrics_seen = False

    def parse(self, lines: Sequence[bytes], time_offset: float = 0.0) -> list[Event]:
        """Events of complete lines (without their newlines)."""
        if not lines:
            return []
        try:
            objs = list(map(orjson.loads, lines))
        except orjson.JSONDecodeError:
            objs = list(map(self._parse_one, lines))
        if set(map(type, objs)) != {dict}:
            objs = [self._check_object(o) for o in objs]
        if any(map(contains, filter(None, objs), ("event",) * len(objs))):
            return self._parse_mixed(objs, time_offset)
        return self._metrics_events([o for o in objs if o is not None], time_offset)

    def _parse_one(self, line: bytes) -> Any:
        if not line.strip():
            return None
        try:
            return _loads_lenient(line)
        except (ValueError, RecursionError):
            self.skipped += 1
            return None

    def _check_object(self, obj: Any) -> dict | None:
        if obj is None or type(obj) is dict:
            return obj
        self.skipped += 1
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
                metas.append(RunMeta(self.run, {k: v for k, v in obj.items() if k != "event"}))
            elif kind in ("marker", "log"):
                others.append((i, obj))
            else:
                self.skipped += 1
        prev_step = self.prev_step
        events: list[Event] = list(metas)
        batch_events = self._metrics_events(metrics, time_offset)
        steps = batch_events[0].steps if batch_events else None
        events.extend(batch_events)
        pending_log: list[str] = []
        for i, obj in others:
            if obj["event"] == "log":
                text = obj.get("text")
                if isinstance(text, str):
                    pending_log.extend(text.splitlines() or [""])
                else:
                    self.skipped += 1
                continue
            if pending_log:
                events.append(LogLines(self.run, tuple(pending_log)))
                pending_log = []
            kind = obj.get("kind")
            if not isinstance(kind, str) or not kind:
                self.skipped += 1
                continue
            step = self._marker_step(obj.get("step"), i, metric_pos, steps, prev_step)
            detail = {k: v for k, v in obj.items() if k not in ("event", "kind", "step")}
            events.append(Marker(self.run, kind, step, detail))
        if pending_log:
            events.append(LogLines(self.run, tuple(pending_log)))
        return events

    def _marker_step(self, value, pos, metric_pos, steps, prev_step) -> int:
        number = valid_number(value)
        if number is not None and number == int(number):
            return int(number)
        if value is not None:
            self.skipped += 1
        k = bisect.bisect_left(metric_pos, pos) - 1
        if k >= 0 and steps is not None:
            return int(steps[k])
        return max(prev_step, 0)

    def _adopt_identity(self, meta: dict) -> None:
        fields = {k: str(meta[k]) for k in _IDENTITY_KEYS if meta.get(k) not in (None, "")}
        if fields:
            self.run = RunRef(
                source=self.run.source,
                project=fields.get("project", self.run.project),
                run_id=fields.get("run_id", self.run.run_id),
                name=fields.get("name", self.run.name),
            )

    def _metrics_events(self, rows: list[dict], time_offset: float) -> list[Event]:
        if not rows:
            return []
        return self._batch(build_columns(rows, prev_step=self.prev_step), time_offset)

    def _batch(self, cols: RowColumns, time_offset: float) -> list[Event]:
        if not len(cols):
            return []
        self.skipped += cols.skipped
        self.prev_step = int(cols.steps[-1])
        self.metrics_seen = True
        wall = cols.last_time + time_offset if cols.last_time is not None else None
        return [ScalarBatch(self.run, cols.steps, cols.columns, wall_time=wall)]


def default_run(path: Path, source: str) -> RunRef:
    path = Path(path)
    project = path.resolve().parent.name or "local"
    return RunRef(source=source, project=project, run_id=path.stem, name=path.stem)


class JsonlSource:
    """Tails one JSON-lines file. See the module docstring for the format."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        run: RunRef | None = None,
        interval: float = 0.5,
        chunk_lines: int = 100_000,
        max_bytes_per_poll: int = 8 << 20,
    ):
        self.path = Path(path)
        self.name = f"jsonl: {self.path.name}"
        self._interval = interval
        self.chunk_lines = max(1, chunk_lines)
        self.max_bytes_per_poll = max(1024, max_bytes_per_poll)
        self.parser = StreamParser(run or default_run(self.path, "jsonl"), explicit=run is not None)
        self.finished = False
        self.limitation = ""
        self.generation = 0
        self.offset = 0  # byte offset of the first unread line
        self._fh: BinaryIO | None = None
        self._ident: tuple[int, int] | None = None
        self._backlog = False

    @property
    def run(self) -> RunRef:
        return self.parser.run

    @property
    def skipped(self) -> int:
        return self.parser.skipped

    @property
    def interval(self) -> float:
        """0 while a backlog remains to be read, else the configured interval."""
        return 0.0 if self._backlog else self._interval

    @interval.setter
    def interval(self, value: float) -> None:
        self._interval = value

    def poll(self) -> list[Event]:
        events: list[Event] = []
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if self._fh is not None:  # removed: keep what was completely written
                events = self._drain(self._fh)
                self._close_handle()
                if events:
                    return events
            raise SourceError(f"waiting for {self.path}") from None
        ident = (st.st_dev, st.st_ino)
        if self._fh is not None and ident != self._ident:
            events.extend(self._drain(self._fh))
            self._close_handle()
            events.append(self._new_generation("was replaced"))
        if self._fh is None:
            self._fh = open(self.path, "rb")  # noqa: SIM115 - kept open between polls
            self._ident = (os.fstat(self._fh.fileno()).st_dev, os.fstat(self._fh.fileno()).st_ino)
        size = os.fstat(self._fh.fileno()).st_size
        if size < self.offset:
            events.append(self._new_generation("was truncated"))
        events.extend(self._read(self._fh))
        return events

    def _new_generation(self, what: str) -> LogLines:
        self.generation += 1
        self.offset = 0
        self.parser.reset()
        return LogLines(
            self.parser.run,
            (f"[carl-tui] {self.path.name} {what}; reading it again from the start",),
        )

    def _drain(self, fh: BinaryIO) -> list[Event]:
        """Events of every complete line left in `fh`."""
        events: list[Event] = []
        while True:
            before = self.offset
            events.extend(self._read(fh))
            if self.offset == before:
                return events

    def _read(self, fh: BinaryIO) -> list[Event]:
        """Events of the complete lines after `offset`, at most `max_bytes_per_poll`."""
        fh.seek(self.offset)
        data = fh.read(self.max_bytes_per_poll)
        capped = len(data) >= self.max_bytes_per_poll
        end = data.rfind(b"\n") + 1
        while end == 0 and len(data) >= self.max_bytes_per_poll:  # one very long line
            more = fh.read(self.max_bytes_per_poll)
            if not more:
                break
            data += more
            end = data.rfind(b"\n") + 1
        if end == 0:
            self._backlog = False
            return []
        events: list[Event] = []
        lines = data[:end].split(b"\n")
        lines.pop()
        for i in range(0, len(lines), self.chunk_lines):
            events.extend(self.parser.parse(lines[i : i + self.chunk_lines]))
        self.offset += end
        self._backlog = capped
        return events

    def _close_handle(self) -> None:
        if self._fh is not None:
            self._fh.close()
        self._fh = None
        self._ident = None

    def close(self) -> None:
        self._close_handle()
