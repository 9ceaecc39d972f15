"""Follow the runs of a TensorBoard log directory by reading its event files.

Every directory under LOGDIR (LOGDIR included) that holds event files (names
containing "tfevents", as TensorBoard itself decides) is a run, named by its
path relative to LOGDIR with "/" separators; files directly in LOGDIR make a run
named after LOGDIR's folder. Each run is `RunRef("tensorboard", <LOGDIR's
folder name>, <run name>, <run name>)`. `runs=` keeps the runs whose name is
listed, or that lie under a listed name (`grpo` keeps `grpo` and `grpo/eval`), or
whose path ends with it (the run folder's own name: `Nov26_host` keeps `exp/Nov26_host`).
New runs, and new files in a run (a restarted writer starts a new file), are
picked up as they appear; a run's files are read oldest first (by the time in
their names).

Following: each file keeps a resume offset, the end of its last complete
record; a poll reads what was appended since (record framing and CRC32C in
`tfevents.py`). A record still being written at the end of a file is waited
for. A record that fails its CRC is skipped and counted ("record CRC
mismatch"); after a damaged length the reader resynchronises at the next
offset where a record checks out. A file in which no record can be found where
the first must start, nor after it, is counted once ("not an event file") and
left alone. A file that shrinks or is replaced is read again from the start
(a `LogLines` note says so); a deleted one is let go, and a `LogLines` note and
`limitation` say so (the status bar would otherwise show a quiet run as live). A backlog is read in
pieces of `max_bytes_per_poll` and `interval` is 0 until it is caught up; the
most recently written runs are read first. At most `MAX_DIRS` folders under
LOGDIR are looked at (`limitation` says so when there are more).

What a run's events become:

- scalars (`simple_value`, or a one-number tensor: `tf.summary.scalar` in TF2,
  `add_scalar(..., new_style=True)` in torch): a `ScalarBatch` per run per
  poll. The event's `step` is the step, its `wall_time` the row's time. Values
  logged at one step in a row (one event per tag, as SummaryWriter writes
  them) merge into one row; a tag seen again at the same step (a restart) starts
  a new row, so repeated points keep their arrival order. Tags are passed
  through `metric_names.canonical` (`train/loss` -> `loss`; TRL/transformers'
  `train/...`, OpenRLHF's `train/policy_loss`, `train/actor_lr`, `eval/...`,
  custom names as they are). A NaN or infinite value is skipped, counted and
  reported in `ScalarBatch.nonfinite`. Each row's wall time goes in
  `ScalarBatch.times`, the newest in `wall_time`.
- text: counted (`unused_input.note("text")`); the config texts transformers'
  TensorBoard callback writes (`args/text_summary`: the TrainingArguments,
  `model_config/text_summary`: the model config, both JSON) become
  `RunMeta(run, {"config": {**model_config, **args}, "vocab_size", "model",
  "method"})` as far as they say them (`run_config.describe_config`, the same
  rules as for W&B configs).
- histograms, images, audio, graphs, hparams, other plugins' tensors: counted
  by kind (`unused_input.note(...)`), never errors.
"""

from __future__ import annotations

import math
import os
import re
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from carl_tui.events import Event, LogLines, RunMeta, RunRef, ScalarBatch, ends_with_path
from carl_tui.metric_names import metric_name
from carl_tui.sources import tfevents as tfe
from carl_tui.sources.base import WAITING, PolledSource, SourceError, short_path
from carl_tui.sources.run_config import describe_config, loads_json
from carl_tui.sources.unused_input import UnusedInput

SOURCE = "tensorboard"
MAX_BYTES_PER_POLL = 1 << 20
RESCAN_S = 1.0  # while a backlog is read, look for new files at most this often
MAX_DIRS = 5000  # directories looked at under LOGDIR, each time it is scanned
EVENT_FILE_MARK = "tfevents"

CRC_MISMATCH = "record CRC mismatch"
NOT_EVENT_FILE = "not an event file"
UNREADABLE = "record not readable"
NOT_FINITE = "value not a finite number"
NOT_SCALAR = "scalar not readable"

# Text tags (without "/text_summary") that hold a run's config as JSON
MODEL_CONFIG_TAGS = frozenset({"model_config"})
ARGS_TAGS = frozenset({"args", "config", "training_args"})
_FENCE = re.compile(r"^\s*```[a-zA-Z]*\s*\n(.*)\n\s*```\s*$", re.DOTALL)
_FILE_TIME = re.compile(r"tfevents\.(\d+)")


def is_event_file(name: str) -> bool:
    return EVENT_FILE_MARK in name


def _file_order(name: str) -> tuple[int, str]:
    m = _FILE_TIME.search(name)
    return (int(m.group(1)) if m else 0, name)


# -- finding runs ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunInfo:
    name: str  # path relative to LOGDIR ("/"-separated); LOGDIR's own folder name for LOGDIR
    dir: Path
    files: tuple[Path, ...]  # event files, oldest first
    mtime: float  # newest write to any of them


def _root_name(logdir: Path) -> str:
    return logdir.resolve().name or str(logdir)


def _walk(
    logdir: Path, max_dirs: int = MAX_DIRS
) -> tuple[dict[str, tuple[Path, list[tuple[Path, os.stat_result]]]], bool]:
    """{run name: (dir, [(event file, stat)])} for every directory holding event
    files (symlinked directories are not followed), and whether the walk stopped
    at `max_dirs` directories."""
    root_name = _root_name(logdir)
    found: dict[str, tuple[Path, list[tuple[Path, os.stat_result]]]] = {}
    stack = [logdir]
    seen = 0
    while stack:
        if seen >= max_dirs:
            return found, True
        seen += 1
        d = stack.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        files = []
        for e in entries:
            try:
                if e.is_dir(follow_symlinks=False):
                    stack.append(Path(e.path))
                elif is_event_file(e.name) and e.is_file():
                    files.append((Path(e.path), e.stat()))
            except OSError:
                continue
        if files:
            rel = d.relative_to(logdir).as_posix()
            name = root_name if rel == "." else rel
            files.sort(key=lambda f: _file_order(f[0].name))
            found[name] = (d, files)
    return found, False


def list_runs(logdir: str | os.PathLike) -> list[RunInfo]:
    """The runs of LOGDIR (see the module docstring), most recently written first.
    An empty list when LOGDIR does not exist or holds no event files."""
    p = Path(logdir).expanduser()
    if not p.is_dir():
        return []
    infos = [
        RunInfo(name, d, tuple(f for f, _ in files), max(st.st_mtime for _, st in files))
        for name, (d, files) in _walk(p)[0].items()
    ]
    return sorted(infos, key=lambda r: (r.mtime, r.name), reverse=True)


# -- one event file ----------------------------------------------------------------------


class _EventFile:
    """Follows one event file: its resume offset and its decoder state."""

    def __init__(self, path: Path, label: str):
        self.path = path
        self.label = label  # shown in skip examples: run name / file name
        self.offset = 0
        self.inode: tuple[int, int] | None = None
        self.ignored = False  # not an event file
        self.in_damage = False  # a resync goes on from the last poll
        self.decoder = tfe.EventDecoder()

    def pending(self, st: os.stat_result) -> bool:
        """Whether the file may have something new for us."""
        inode = (st.st_dev, st.st_ino)
        if self.inode is not None and (inode != self.inode or st.st_size < self.offset):
            return True  # replaced or truncated
        return not self.ignored and st.st_size > self.offset

    def read(self, budget: int, out: tfe.Items,
             unused_input: UnusedInput) -> tuple[int, bool, bool]:
        """Decode what was appended into `out`: (bytes used, more waiting, restarted)."""
        restarted = False
        with open(self.path, "rb") as f:
            st = os.fstat(f.fileno())
            inode = (st.st_dev, st.st_ino)
            if self.inode is not None and (inode != self.inode or st.st_size < self.offset):
                restarted = self.offset > 0
                self.offset, self.ignored, self.in_damage = 0, False, False
                self.decoder = tfe.EventDecoder()
            self.inode = inode
            left = st.st_size - self.offset
            if self.ignored or left <= 0:
                return 0, False, restarted
            want = max(tfe.HEADER_LEN, min(budget, left))
            while True:
                f.seek(self.offset)
                buf = f.read(want)
                at_eof = len(buf) >= left or len(buf) < want  # short: it shrank meanwhile
                scan = tfe.scan_records(buf, at_eof=at_eof, file_start=self.offset == 0)
                if scan.end > 0 or at_eof or scan.not_event_file:
                    break
                want = min(want * 2, left)  # one record larger than the budget
        if scan.not_event_file:
            self.ignored = True
            unused_input.skip(NOT_EVENT_FILE, self.label)
            return 0, False, restarted
        for a, b in scan.damaged:
            if a == 0 and self.in_damage:
                continue  # the same damaged stretch as last time
            where = f"bytes {self.offset + a}-{self.offset + b} of {self.label}"
            unused_input.skip(CRC_MISMATCH, where)
        if scan.damaged or scan.end:
            self.in_damage = scan.open_damage
        decode = self.decoder.decode
        for s, e in zip(scan.starts, scan.ends):
            try:
                decode(buf, s, e, out)
            except (tfe.DecodeError, IndexError, struct.error) as exc:
                unused_input.skip(UNREADABLE, f"byte {self.offset + s} of {self.label}: {exc}")
        self.offset += scan.end
        return scan.end, not at_eof, restarted


# -- one run -----------------------------------------------------------------------------


def _config_text(text: str) -> dict | None:
    m = _FENCE.match(text)
    if m:
        text = m.group(1)
    try:
        obj = loads_json(text)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


class _Rows:
    """Rows of one poll: each row's step and wall time, and per metric the rows it has
    a value in and those values."""

    __slots__ = ("cols", "steps", "times")

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.times: list[float] = []
        self.cols: dict[str, tuple[list[int], list[float]]] = {}

    def batch(self, ref: RunRef, nonfinite: tuple[tuple[str, int], ...]) -> ScalarBatch:
        """The rows as one ScalarBatch (NaN where a metric has no value in a row)."""
        n = len(self.steps)
        columns: dict[str, np.ndarray] = {}
        for name, (idx, vals) in self.cols.items():
            if len(idx) == n:
                columns[name] = np.array(vals, dtype=np.float64)
            else:
                c = np.full(n, np.nan)
                c[idx] = vals
                columns[name] = c
        t = np.array(self.times, dtype=np.float64)
        good = t[np.isfinite(t)]
        return ScalarBatch(
            ref,
            np.array(self.steps, dtype=np.int64),
            columns,
            wall_time=float(good.max()) if good.size else None,
            times=t,
            nonfinite=nonfinite,
        )


class _Run:
    """One run: its files, its config, and the rows of the current poll."""

    def __init__(self, name: str, project: str, path: Path):
        self.name = name
        self.path = path
        self.ref = RunRef(SOURCE, project, name, name)
        self.files: dict[Path, _EventFile] = {}
        self.mtime = 0.0
        self.model_config: dict | None = None
        self.args: dict | None = None
        self.nonfinite: list[tuple[str, int]] = []  # not yet sent (no row to go with)

    def events(self, items: tfe.Items, unused_input: UnusedInput) -> list[Event]:
        """The RunMeta and ScalarBatch of what one poll decoded for this run."""
        nonfinite, self.nonfinite = self.nonfinite, []
        rows, config_changed = self._rows(items, unused_input, nonfinite)
        out: list[Event] = []
        if config_changed:
            out.append(RunMeta(self.ref, self.meta()))
        if rows.steps:
            out.append(rows.batch(self.ref, tuple(nonfinite)))
        else:
            self.nonfinite.extend(nonfinite)  # sent with the next rows (the store needs a row)
        return out

    def _rows(self, items: tfe.Items, unused_input: UnusedInput,
              nonfinite: list[tuple[str, int]]) -> tuple[_Rows, bool]:
        """The scalars of `items` in rows (values logged at one step in a row share a
        row), and whether a config text changed; everything else is counted in `unused_input`.
        A non-finite value goes to `nonfinite`. One loop over every value: the hot path."""
        rows = _Rows()
        steps, times, cols = rows.steps, rows.times, rows.cols
        config_changed = False
        row = -1
        row_step: int | None = None
        row_names: set[str] = set()
        isfinite = math.isfinite
        metric = metric_name  # the key -> name of every tag, cached
        scalar = tfe.SCALAR
        for kind, tag, value, step, wall in zip(
            items.kind, items.tag, items.value, items.step, items.wall
        ):
            if kind == scalar:
                name = metric(tag)
                if name is None:
                    continue
                if not isfinite(value):
                    unused_input.skip(NOT_FINITE, f"{tag}={value!r} at step {step}")
                    nonfinite.append((name, step))
                    continue
                if step != row_step or name in row_names:
                    row += 1
                    steps.append(step)
                    times.append(wall)
                    row_step = step
                    row_names = {name}
                else:
                    row_names.add(name)
                col = cols.get(name)
                if col is None:
                    col = cols[name] = ([], [])
                col[0].append(row)
                col[1].append(value)
            elif kind == tfe.TEXT:
                unused_input.note("text")
                config_changed |= self._text(tag, value)
            elif kind == tfe.BAD:
                unused_input.skip(NOT_SCALAR, f"{tag} at step {step}: {value}")
            else:
                unused_input.note(kind)
        return rows, config_changed

    def _text(self, tag: str, text: str) -> bool:
        base = tag.removesuffix("/text_summary")
        if base not in MODEL_CONFIG_TAGS and base not in ARGS_TAGS:
            return False
        cfg = _config_text(text)
        if cfg is None:
            return False
        if base in MODEL_CONFIG_TAGS:
            self.model_config = cfg
        else:
            self.args = cfg
        return True

    def meta(self) -> dict[str, Any]:
        config = {**(self.model_config or {}), **(self.args or {})}
        return {"config": config, **describe_config(config), "tensorboard_dir": str(self.path)}


# -- the source --------------------------------------------------------------------------


class TensorBoardSource(PolledSource):
    """Follows every run of a TensorBoard log directory (module docstring)."""

    def __init__(
        self,
        logdir: str | os.PathLike,
        *,
        runs: Sequence[str] | None = None,
        interval: float = 1.0,
        max_bytes_per_poll: int = MAX_BYTES_PER_POLL,
    ):
        self.logdir = Path(logdir).expanduser()
        self.runs = tuple(runs) if runs else None
        self._interval = interval
        self.max_bytes_per_poll = max(tfe.HEADER_LEN + 1, max_bytes_per_poll)
        self.unused_input = UnusedInput()
        self.limitation = ""
        self.finished = False  # a log directory can always get new runs
        self.behind = False
        self.project = _root_name(self.logdir)
        self.name = f"tensorboard: {short_path(self.logdir)}"
        self._runs: dict[str, _Run] = {}
        self._stats: dict[Path, os.stat_result] = {}
        self._last_scan = -math.inf
        self._deleted = ""  # the latest event file deleted while being read
        self._notes: list[Event] = []  # for the next poll



    def _wanted(self, name: str) -> bool:
        if self.runs is None:
            return True
        return any(name == r or name.startswith(r.rstrip("/") + "/") or ends_with_path(name, r)
                   for r in self.runs)

    def _discover(self) -> list[_Run]:
        """The runs with something new, most recently written first."""
        if not self.logdir.exists():
            raise SourceError(f"waiting for {self.logdir}", kind=WAITING)
        if not self.logdir.is_dir():
            raise SourceError(
                f"{self.logdir} is not a directory (name the folder that holds the event files)",
                retry=False,
            )
        now = time.monotonic()
        if not self.behind or now - self._last_scan >= RESCAN_S or not self._runs:
            self._last_scan = now
            stats: dict[Path, os.stat_result] = {}
            found, cut = _walk(self.logdir, MAX_DIRS)
            for name, (d, files) in found.items():
                if not self._wanted(name):
                    continue
                run = self._runs.get(name)
                if run is None:
                    run = self._runs[name] = _Run(name, self.project, d)
                for path, st in files:
                    stats[path] = st
                    if path not in run.files:
                        run.files[path] = _EventFile(path, f"{name}/{path.name}")
                run.mtime = max(st.st_mtime for _, st in files)
            self._stats = stats
            if not cut:
                self._let_go(stats)
            self.limitation = (
                f"only the first {MAX_DIRS} folders under {self.logdir} are watched" if cut
                else self._deleted
            )
        if not self._runs:
            if self.runs is not None:
                raise SourceError(
                    f"waiting for run {', '.join(self.runs)} in {self.logdir}", kind=WAITING
                )
            raise SourceError(f"waiting for event files in {self.logdir}", kind=WAITING)
        active = [
            r for r in self._runs.values()
            if any(p in self._stats and f.pending(self._stats[p]) for p, f in r.files.items())
        ]
        return sorted(active, key=lambda r: (r.mtime, r.name), reverse=True)

    def _let_go(self, stats: dict[Path, os.stat_result]) -> None:
        """Event files read before and no longer there: said in the run's log and the status
        bar (what was read from them stays); a file made again later is read anew."""
        for run in self._runs.values():
            for path in [p for p in run.files if p not in stats]:
                self._gone(run, run.files.pop(path))

    def _gone(self, run: _Run, f: _EventFile) -> None:
        if f.offset > 0:
            self._deleted = f"{f.label} was deleted while being read; what was read from it stays"
            self._notes.append(LogLines(run.ref, (self._deleted,)))

    def poll(self) -> list[Event]:
        runs = self._discover()
        events: list[Event] = self._notes
        self._notes = []
        budget = self.max_bytes_per_poll
        behind = False
        error: BaseException | None = None
        for run in runs:
            decoded = tfe.Items()
            for path in sorted(run.files, key=lambda p: _file_order(p.name)):
                f = run.files[path]
                st = self._stats.get(path)
                if st is None or not f.pending(st):
                    continue
                if budget <= 0:
                    behind = True
                    break
                try:
                    used, more, restarted = f.read(budget, decoded, self.unused_input)
                except FileNotFoundError:
                    self._gone(run, run.files.pop(path))
                    events += self._notes
                    self._notes = []
                    continue
                except OSError as exc:
                    error = exc  # one unreadable file does not hold back the others
                    continue
                if restarted:
                    events.append(
                        LogLines(run.ref, (f"{f.label} was rewritten; reading it again",))
                    )
                budget -= used
                behind |= more
            if decoded:
                events.extend(run.events(decoded, self.unused_input))
        if error is not None and not events and budget == self.max_bytes_per_poll:
            what = getattr(error, "strerror", None) or error
            where = getattr(error, "filename", None) or self.logdir
            raise SourceError(f"cannot read {where}: {what}") from error
        self.behind = behind
        return events

    def close(self) -> None:
        """Nothing stays open between polls."""
