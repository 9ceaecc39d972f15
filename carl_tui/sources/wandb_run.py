"""Follow W&B runs by reading their `.wandb` transaction logs, online or offline.

What PATH may name (`WandbSource(path)`, `list_runs(path)`):

- a run directory, `wandb/run-<time>-<id>` or `wandb/offline-run-<time>-<id>`
  (or `wandb/latest-run`, resolved once, when the run is first read), or its
  `run-<id>.wandb` file: that one run. `finished` turns True once the run's
  exit record has been read and nothing follows it.
- a `wandb/` directory, or a project folder that contains one: all of its
  runs, the most recently written first, and every run that appears there
  later. Such a source never finishes: a pipeline that trains SFT and then GRPO
  writes its second run into the same directory after the first has exited.
  `runs=` keeps only the runs whose id, display name or directory name it lists
  (a single run that is not among them is a `SourceError(retry=False)`).

The transaction log (wandb writes it while the run is live, also in offline
mode; `wandb sync` uploads it later) is LevelDB's log format with W&B's file
header, read by `wandb_log.py`. Each record is a protobuf `wandb_internal.Record`.

Current wandb releases (0.31) have no Python reader for this file any more
(their Go core reads it), so the chunk format is read by `wandb_log.py`, and
wandb's own generated protobuf classes decode the records: `_record_class()` is the one
place that finds wandb (lazily; without it a `SourceError(retry=False)` says
how to install it). Logs written by wandb 0.16 (its Python writer) and 0.31
(its Go core) read the same, with either version installed.

Following a live run: each poll reads what was appended after the resume
offset, the end of the last complete record. A record still being written
(a short chunk, a missing last piece, zeros or a bad checksum at the very end
of the file) is waited for, not skipped. A damaged record followed by more data
is skipped and counted in `unused_input` ("corrupt record"); after a damaged header
the reader resumes at the next 32 KiB block, as LevelDB's reader does. A
backlog is read in pieces of `max_bytes_per_poll` and `interval` is 0 until it
is caught up. The wandb SDK writes the file every 15 s by default
(`x_transaction_log_flush_interval`; `WANDB_X_TRANSACTION_LOG_FLUSH_INTERVAL=1`
makes a live view follow within a second).

Newest first, coarse to fine (`preview = True`, set by the dashboard; `summary`
and `export` leave it off): on the first poll, each log longer than
`preview_min_bytes` and not read yet is previewed from both ends
(`wandb_log.read_preview`): its head (the run record: the run's name, its
config, the step metric) and its tail (the newest rows, back far enough to hold
one, and the latest summary), and one row from each of a strided sample of
blocks between them (`PREVIEW_SAMPLES`, shared by a folder's runs; its
`PREVIEW_MAX_RUNS` most recently written runs are previewed), sent as
`RunMeta` (config, summary) and `ScalarBatch(preview=True)` (the head's and
sampled rows, then the newest rows). The log is then read in order as above,
once the preview is on screen (`hold`), and an empty preview batch says when
the read has passed the preview's newest record. A preview counts no skipped
input and sends no exit code (the read in order does both); what the store
holds in the end is what a read from the start gives.

Records used:

- run: identity, `RunRef("wandb", <W&B project or "wandb">, <run id>, <display
  name>)` (kept from the first run record on), and its config.
- config: merged into the config; sent as `RunMeta(run, {"config": ...,
  "vocab_size", "model", "method", ...})` once per poll when it changed.
  `vocab_size`, `model` and `method` are found by `run_config.describe_config`
  (the same rules as for TensorBoard's config texts): `vocab_size` from the
  config's top level, else from a nested model config (`{"model_config":
  {"vocab_size": ...}}`, `text_config`, ...); the model from
  `model_name_or_path`, `_name_or_path`, `model_name`, `model` or `pretrain`;
  the method (sft/grpo/ppo) from a `method`/`trainer`/`algorithm` entry, or
  from fields only one TRL config has (`scale_rewards` with `num_generations`:
  GRPO; `dataset_text_field`: SFT; `num_ppo_epochs`: PPO), or OpenRLHF's
  `advantage_estimator` (`group_norm`: GRPO, `gae`: PPO).
- metric (`define_metric`): the step metric declared for `*` (else for
  `train/*`) becomes the x axis, as in W&B's own charts. transformers'
  W&B callback declares `train/global_step`.
- history: one row per `wandb.log` call, nested keys flattened with "." as W&B
  shows them. The row's step is its value of the declared step metric (a row
  without one takes the last value seen, as W&B's `step_sync` does), else its
  `_step`. `_step`, `_runtime`, `_timestamp` and the step metric are not
  metrics; `_timestamp` gives the batch's wall time. Keys are passed on raw
  (`train/loss`); `rows.build_columns` applies the project's key policy.
  A value that is not a finite number is skipped and counted by reason; media,
  tables and histograms (dicts with a `_type`) are valid data, not plotted:
  `unused_input.note(<_type>)`.
- summary: merged; `RunMeta(run, {"summary": {...}})` once per poll when it
  changed (`_wandb` left out).
- exit: `RunMeta(run, {"exit_code": n})`; the run is complete.
Other records (files, stats, telemetry, console output, artifacts) are ignored.
"""

from __future__ import annotations

import ast
import importlib.util
import math
import os
import re
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from carl_tui.events import Event, LogLines, RunMeta, RunRef, ScalarBatch
from carl_tui.sources.base import (
    HOLD_MAX_S,
    WAITING,
    PolledSource,
    SourceError,
    short_path,
)
from carl_tui.sources.rows import build_columns
from carl_tui.sources.run_config import describe_config, loads_json
from carl_tui.sources.unused_input import UnusedInput
from carl_tui.sources.wandb_log import (
    FILE_IDENT,
    HEADER_LEN,
    check_file_header,
    read_preview,
    scan_chunks,
)

SOURCE = "wandb"
DEFAULT_PROJECT = "wandb"
NEED_WANDB = "reading W&B runs needs wandb: pip install 'carl-tui[wandb]'"


MAX_BYTES_PER_POLL = 4 << 20
PREVIEW_MIN_BYTES = 2 * MAX_BYTES_PER_POLL  # a shorter log is simply read
# Sampled rows of a previewed log (shared by a folder's runs): more than a plot draws of a
# series (four a cell: about 300 on a 160-column screen), few enough to be read at once.
PREVIEW_SAMPLES = 500
PREVIEW_MIN_SAMPLES = 100
PREVIEW_MAX_RUNS = 8  # a folder's newest runs are previewed, the others read in order
NOT_METRICS = frozenset({"_step", "_runtime", "_timestamp", "_wandb"})
_RUN_DIR = re.compile(r"^(?:offline-)?run-")

UNREADABLE = "record not readable"
NOT_FINITE = "value not a finite number"
NOT_NUMBER = "value not a number"
NOT_JSON = "value not JSON"
BAD_STEP = "invalid step"


# -- the one place that imports wandb ------------------------------------------------


def _record_class() -> type:
    """wandb's protobuf `Record` class. wandb keeps the generated classes in
    `wandb.proto.wandb_internal_pb2` (which picks the build matching the
    installed protobuf); a wandb upgrade that moves them changes only this.
    Importing them imports the whole `wandb` package (seconds), so the class is
    first built from the descriptors those generated files hold (tens of ms,
    `_generated_record_class`); when that fails, by the import."""
    global _RECORD_CLASS
    if "wandb" in sys.modules:  # imported already (or marked missing): the import decides
        return _imported_record_class()
    if _RECORD_CLASS is None:
        _RECORD_CLASS = _generated_record_class() or _imported_record_class()
    return _RECORD_CLASS


_RECORD_CLASS: type | None = None
_SERIALIZED = re.compile(r"AddSerializedFile\((b'(?:[^'\\\n]|\\.)*')\)")
_PROTO_FILES = ("wandb_base_pb2", "wandb_telemetry_pb2", "wandb_internal_pb2")


def _generated_record_class() -> type | None:
    """`Record` built in a descriptor pool of its own (never the default one that
    an `import wandb` fills) from the serialized descriptors in wandb's generated
    files, found without importing wandb; None when anything is not as expected."""
    try:
        # lazy: protobuf comes with the optional wandb extra; only W&B runs need it
        import google.protobuf
        from google.protobuf import (
            descriptor_pool,
            empty_pb2,
            message_factory,
            struct_pb2,
            timestamp_pb2,
        )

        spec = importlib.util.find_spec("wandb")
        if spec is None or not spec.submodule_search_locations:
            return None
        major = google.protobuf.__version__.split(".")[0]
        proto = Path(next(iter(spec.submodule_search_locations))) / "proto" / f"v{major}"
        pool = descriptor_pool.DescriptorPool()
        for dep in (empty_pb2, struct_pb2, timestamp_pb2):
            pool.AddSerializedFile(dep.DESCRIPTOR.serialized_pb)
        for name in _PROTO_FILES:
            found = _SERIALIZED.search((proto / f"{name}.py").read_text(encoding="utf-8"))
            if found is None:
                return None
            pool.AddSerializedFile(ast.literal_eval(found.group(1)))
        desc = pool.FindMessageTypeByName("wandb_internal.Record")
        return message_factory.GetMessageClass(desc)
    except Exception:  # noqa: BLE001 - any surprise: the import below decides
        return None


def _imported_record_class() -> type:
    try:
        from wandb.proto.wandb_internal_pb2 import Record  # lazy: the optional wandb extra
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] in ("wandb", "google"):
            raise SourceError(NEED_WANDB, retry=False, kind="missing") from exc
        raise SourceError(f"reading W&B runs: wandb did not import: {exc}", retry=False) from exc
    except ImportError as exc:  # e.g. a protobuf major version this wandb does not support
        raise SourceError(f"reading W&B runs: wandb did not import: {exc}", retry=False) from exc
    return Record


# -- values ------------------------------------------------------------------------------


def _item_value(item: Any, typed: bool) -> Any:
    """The value of a history item: the typed form when set (wandb 0.31 writes
    one with `x_history_value_encoding="json,typed"`), else `value_json`.
    Raises ValueError."""
    if typed:
        which = item.WhichOneof("value")
        if which is not None:
            if which == "json":
                return loads_json(item.json)
            if which == "none":
                return None
            return getattr(item, which)
    return loads_json(item.value_json)


def _item_path(item: Any) -> list[str]:
    return [item.key] if item.key else list(item.nested_key)


def _set_path(tree: dict, path: Sequence[str], value: Any) -> None:
    """Set a nested value. Nested dicts on the way are replaced by copies, never
    changed in place: a dict already sent in a RunMeta stays as it was sent."""
    node = tree
    for part in path[:-1]:
        nxt = node.get(part)
        nxt = node[part] = dict(nxt) if isinstance(nxt, dict) else {}
        node = nxt
    node[path[-1]] = value


def _del_path(tree: dict, path: Sequence[str]) -> None:
    node = tree
    for part in path[:-1]:
        nxt = node.get(part)
        if not isinstance(nxt, dict):
            return
        nxt = node[part] = dict(nxt)
        node = nxt
    node.pop(path[-1], None)


def _apply_updates(tree: dict, record: Any, unused_input: UnusedInput, what: str) -> bool:
    """Merge a config/summary record's updates and removals into `tree`."""
    changed = False
    for item in record.update:
        path = _item_path(item)
        if not path or path[0] == "_wandb":
            continue
        try:
            value = loads_json(item.value_json)
        except ValueError:
            unused_input.skip(NOT_JSON, f"{what} {'.'.join(path)}={item.value_json!r}")
            continue
        _set_path(tree, path, value)
        changed = True
    for item in record.remove:
        path = _item_path(item)
        if path:
            _del_path(tree, path)
            changed = True
    return changed


# -- finding runs ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunInfo:
    run_id: str
    name: str  # display name (the run id when unknown)
    dir: Path
    mtime: float  # newest write to the run's log (or its directory)
    log: Path | None = None  # the run's .wandb file, if it has one yet


def _id_from_dir(run_dir: Path) -> str:
    return run_dir.name.rsplit("-", 1)[-1]


def _log_file(run_dir: Path) -> Path | None:
    """The run's transaction log: `run-<id>.wandb`, else the newest `*.wandb`."""
    preferred = run_dir / f"run-{_id_from_dir(run_dir)}.wandb"
    if preferred.is_file():
        return preferred
    try:
        found = [p for p in run_dir.glob("*.wandb") if p.is_file()]
    except OSError:
        return None
    return max(found, key=_mtime, default=None)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _is_run_dir(path: Path) -> bool:
    if path.suffix == ".wandb":
        return path.is_file()
    if not path.is_dir():
        return False
    if path.name == "latest-run" or _RUN_DIR.match(path.name):
        return True
    try:
        return any(p.suffix == ".wandb" for p in path.iterdir())
    except OSError:
        return False


def _run_dirs(root: Path) -> list[Path]:
    """Run directories under a `wandb/` dir or a folder holding one (symlinks
    such as `latest-run` left out, so no run is read twice)."""
    out = []
    for base in (root, root / "wandb"):
        try:
            entries = list(base.iterdir())
        except OSError:
            continue
        out.extend(
            p for p in entries if _RUN_DIR.match(p.name) and not p.is_symlink() and p.is_dir()
        )
    return out


def _peek_identity(log: Path, record_cls: type | None) -> tuple[str, str] | None:
    """(run id, display name) from the run record near the start of a log."""
    if record_cls is None:
        return None
    try:
        with open(log, "rb") as f:
            head = f.read(64 << 10)
    except OSError:
        return None
    if len(head) < HEADER_LEN or head[:4] != FILE_IDENT:
        return None
    scan = scan_chunks(head[HEADER_LEN:], HEADER_LEN, at_eof=True, unused_input=UnusedInput())
    for raw in scan.records[:20]:
        rec = record_cls()
        try:
            rec.ParseFromString(raw)
        except Exception:  # noqa: BLE001, S112 - a damaged record: keep looking
            continue
        if rec.WhichOneof("record_type") == "run":
            return rec.run.run_id, rec.run.display_name or rec.run.run_id
    return None


def _info(run_dir: Path, record_cls: type | None) -> RunInfo:
    log = run_dir if run_dir.suffix == ".wandb" else _log_file(run_dir)
    base = run_dir.parent if run_dir.suffix == ".wandb" else run_dir
    run_id = _id_from_dir(base) if base.name != "latest-run" else ""
    if not run_id and log is not None:
        run_id = log.stem.removeprefix("run-")
    ident = _peek_identity(log, record_cls) if log is not None else None
    rid, name = ident if ident else (run_id, run_id)
    mtime = max(_mtime(log) if log is not None else 0.0, _mtime(base))
    return RunInfo(rid or run_id, name, base, mtime, log)


def list_runs(path: str | os.PathLike) -> list[RunInfo]:
    """The runs PATH names (see the module docstring), most recently written
    first. Display names are read from the logs when wandb is installed, else
    they are the run ids."""
    p = Path(path).expanduser()
    try:
        record_cls: type | None = _record_class()
    except SourceError:
        record_cls = None
    if _is_run_dir(p):
        return [_info(p.resolve() if p.is_symlink() else p, record_cls)]
    infos = [_info(d, record_cls) for d in _run_dirs(p)]
    return sorted(infos, key=lambda r: (r.mtime, r.dir.name), reverse=True)


# -- one run -----------------------------------------------------------------------------


class _RunReader:
    """Follows one run's log: the resume offset and what the run has said so far."""

    def __init__(self, path: Path, unused_input: UnusedInput, record_cls: type):
        self.path = path  # a run dir (maybe `latest-run`) or a .wandb file
        self.unused_input = unused_input
        self.record_cls = record_cls
        item_type = record_cls.DESCRIPTOR.fields_by_name["history"].message_type
        item_type = item_type.fields_by_name["item"].message_type
        self.typed = "value" in item_type.oneofs_by_name  # typed values: wandb >= 0.31
        self.log: Path | None = None
        self.offset = 0  # resume position in the log; 0 until the file header is read
        self.size = 0
        self.inode: tuple[int, int] | None = None
        self.version = 0
        self.wanted: bool | None = None
        self.ref: RunRef | None = None
        self.run_info: dict[str, Any] = {}
        self.config: dict[str, Any] = {}
        self.summary_raw: dict[tuple[str, ...], str] = {}
        self.step_metric: str | None = None
        self.step_metric_rank = 9
        self.synced_step: int | None = None
        self.prev_step = -1
        self.exit_code: int | None = None
        self.mtime = 0.0

    # -- files --

    def _locate(self) -> Path | None:
        if self.log is None:
            p = self.path
            if p.suffix == ".wandb":
                self.log = p if p.is_file() else None
            else:
                run_dir = p.resolve() if p.is_symlink() else p
                self.log = _log_file(run_dir) if run_dir.is_dir() else None
        return self.log

    @property
    def fallback_id(self) -> str:
        log = self.log or self.path
        return log.stem.removeprefix("run-") if log.suffix == ".wandb" else _id_from_dir(log)

    @property
    def complete(self) -> bool:
        """The exit record was read and nothing follows it."""
        return self.exit_code is not None and self.offset >= self.size

    def read(self, budget: int) -> tuple[list[Event], int, bool]:
        """Events from what was appended; (events, bytes read, more waiting)."""
        log = self._locate()
        if log is None:
            return [], 0, False
        with open(log, "rb") as f:
            st = os.fstat(f.fileno())
            events: list[Event] = []
            inode = (st.st_dev, st.st_ino)
            if self.inode is not None and (inode != self.inode or st.st_size < self.offset):
                events.extend(self._restart())
            self.inode, self.size, self.mtime = inode, st.st_size, st.st_mtime
            if self.offset == 0:
                if st.st_size < HEADER_LEN:
                    return events, 0, False
                self.version = check_file_header(f.read(HEADER_LEN), str(log))
                self.offset = HEADER_LEN
            if st.st_size <= self.offset:
                return events, 0, False
            want = budget
            while True:
                f.seek(self.offset)
                buf = f.read(want)
                at_eof = self.offset + len(buf) >= st.st_size
                found = UnusedInput()
                scan = scan_chunks(buf, self.offset, at_eof=at_eof, unused_input=found,
                                   where=log.name)
                if scan.records or at_eof or scan.end > self.offset:
                    break
                want *= 2  # one record larger than the budget: read on until it is whole
        self.unused_input.merge(found)
        events.extend(self._records(scan.records))
        used = scan.end - self.offset
        self.offset = scan.end
        return events, used, not at_eof

    def _restart(self) -> list[Event]:
        """The log was replaced or truncated: read it again from the start."""
        self.offset = 0
        self.exit_code = None
        self.prev_step, self.synced_step = -1, None
        if self.ref is None:
            return []
        note = f"{self.log} was rewritten; reading it again from the start"
        return [LogLines(self.ref, (note,))]

    # -- records --

    def _identity(self, run: Any | None) -> None:
        if self.ref is not None:
            return
        if run is not None and run.run_id:
            rid = run.run_id
            self.ref = RunRef(SOURCE, run.project or DEFAULT_PROJECT, rid, run.display_name or rid)
            self.run_info = {
                k: v
                for k, v in (
                    ("wandb_entity", run.entity),
                    ("wandb_project", run.project),
                    ("wandb_group", run.run_group),
                    ("wandb_job_type", run.job_type),
                    ("wandb_tags", list(run.tags)),
                    ("wandb_notes", run.notes),
                )
                if v
            }
        else:  # no readable run record before the data: name the run after its file
            rid = self.fallback_id
            self.ref = RunRef(SOURCE, DEFAULT_PROJECT, rid, rid)
        self.run_info["wandb_run_dir"] = str((self.log or self.path).parent)

    def _records(self, raws: list[bytes]) -> list[Event]:
        rec = self.record_cls()
        rows: list[tuple[int, dict[str, float], float | None]] = []
        config_changed = summary_changed = False
        exit_code: int | None = None
        for raw in raws:
            try:
                rec.ParseFromString(raw)
            except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and kin
                self.unused_input.skip(UNREADABLE, f"{type(exc).__name__}: {exc}")
                continue
            kind = rec.WhichOneof("record_type")
            if kind == "history":
                self._identity(None)
                row = self._row(rec.history)
                if row is not None:
                    rows.append(row)
            elif kind == "summary":
                summary_changed |= self._summary_update(rec.summary)
            elif kind == "run":
                first = self.ref is None
                self._identity(rec.run)
                changed = _apply_updates(self.config, rec.run.config, self.unused_input, "config")
                config_changed |= changed or first
            elif kind == "config":
                config_changed |= _apply_updates(self.config, rec.config, self.unused_input,
                                                 "config")
            elif kind == "metric":
                self._define_metric(rec.metric)
            elif kind == "exit":
                exit_code = rec.exit.exit_code
        if self.ref is None:
            if not (config_changed or summary_changed or exit_code is not None):
                return []
            self._identity(None)
        ref = self.ref
        assert ref is not None
        events: list[Event] = []
        if config_changed:
            meta = {**self.run_info, "config": dict(self.config), **describe_config(self.config)}
            events.append(RunMeta(ref, meta))
        rows = [r for r in rows if r[1]]  # a row of media only is no point
        if rows:
            events.append(self._batch(ref, rows))
        if summary_changed:
            events.append(RunMeta(ref, {"summary": self._summary_tree()}))
        if exit_code is not None:
            self.exit_code = exit_code
            events.append(RunMeta(ref, {"exit_code": exit_code}))
        return events

    def _summary_update(self, record: Any) -> bool:
        """Keep the summary's values as wandb wrote them (JSON text, by key
        path); they are decoded once per poll, when the summary is sent, not
        once per logged row."""
        raw = self.summary_raw
        for item in record.update:
            key = item.key
            path = (key,) if key else tuple(item.nested_key)
            if path and path[0] != "_wandb":
                raw[path] = item.value_json
        for item in record.remove:
            path = (item.key,) if item.key else tuple(item.nested_key)
            for known in [k for k in raw if k[: len(path)] == path]:
                del raw[known]
        return bool(record.update or record.remove)

    def _summary_tree(self) -> dict[str, Any]:
        tree: dict[str, Any] = {}
        for path, text in list(self.summary_raw.items()):
            try:
                value = loads_json(text)
            except ValueError:
                self.unused_input.skip(NOT_JSON, f"summary {'.'.join(path)}={text!r}")
                del self.summary_raw[path]
                continue
            _set_path(tree, path, value)
        return tree

    def _define_metric(self, metric: Any) -> None:
        """The x axis: the step metric declared for every metric (`*`), else for `train/*`."""
        rank = {"*": 0, "train/*": 1}.get(metric.glob_name, 9)
        if metric.step_metric and rank < self.step_metric_rank:
            self.step_metric, self.step_metric_rank = metric.step_metric, rank

    def _row(self, history: Any) -> tuple[int, dict[str, float], float | None] | None:
        """(step, {raw key: value}, timestamp) of one history record."""
        tree: dict[str, Any] = {}
        typed = self.typed
        loads = orjson.loads
        for item in history.item:
            key, path = item.key, None
            if not key:
                nested = item.nested_key
                if len(nested) == 1:
                    key = nested[0]
                elif not nested:
                    continue
                else:
                    path = list(nested)
            try:
                if typed and item.WhichOneof("value") is not None:
                    value = _item_value(item, typed)
                else:
                    try:
                        value = loads(item.value_json)
                    except orjson.JSONDecodeError:
                        value = loads_json(item.value_json)
            except ValueError:
                where = key or ".".join(path or ())
                self.unused_input.skip(NOT_JSON, f"{where}={item.value_json!r}")
                continue
            if path is None:
                tree[key] = value
            else:
                _set_path(tree, path, value)
        wstep = tree.pop("_step", None)
        if wstep is None and history.HasField("step"):
            wstep = history.step.num
        stamp = tree.pop("_timestamp", None)
        stamp = stamp if type(stamp) in (int, float) and math.isfinite(stamp) else None
        step = self._step(tree, wstep)
        values: dict[str, float] = {}
        self._flatten(tree, "", values)
        return step, values, stamp

    def _step(self, tree: dict[str, Any], wstep: Any) -> int:
        key = self.step_metric
        if key is not None and key in tree:
            v = tree.pop(key)
            s = _integral(v)
            if s is None:
                self.unused_input.skip(BAD_STEP, f"{key}={v!r}")
            else:
                self.synced_step = s
        if key is not None and self.synced_step is not None:
            step = self.synced_step
        else:
            step = _integral(wstep)
            if step is None:
                if wstep is not None:
                    self.unused_input.skip(BAD_STEP, f"_step={wstep!r}")
                step = self.prev_step + 1
        self.prev_step = step
        return step

    def _flatten(self, tree: dict[str, Any], prefix: str, out: dict[str, float]) -> None:
        for k, v in tree.items():
            if not prefix and k in NOT_METRICS:
                continue
            name = prefix + k
            t = type(v)
            if t is float:
                if math.isfinite(v):
                    out[name] = v
                else:
                    self.unused_input.skip(NOT_FINITE, f"{name}={v!r}")
            elif t is int:
                out[name] = float(v)
            elif t is dict:
                kind = v.get("_type")
                if isinstance(kind, str):
                    self.unused_input.note(kind)
                else:
                    self._flatten(v, name + ".", out)
            else:
                self.unused_input.skip(NOT_NUMBER, f"{name}={v!r}")

    def _batch(self, ref: RunRef, rows: list[tuple[int, dict[str, float], float | None]]):
        steps = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        cols = build_columns([r[1] for r in rows], default_steps=steps, step_keys=(), time_key=None)
        if cols.skipped:
            self.unused_input.skip(NOT_NUMBER, "a value rejected by the column builder",
                                   cols.skipped)
        stamps = [r[2] for r in rows if r[2] is not None]
        return ScalarBatch(ref, cols.steps, cols.columns, wall_time=stamps[-1] if stamps else None)


def _integral(v: Any) -> int | None:
    if type(v) is int:
        return v
    if type(v) is float and math.isfinite(v) and v == int(v) and abs(v) < 2**62:
        return int(v)
    return None


# -- newest first ------------------------------------------------------------------------


@dataclass
class _Shown:
    """A preview on screen: its run, and the log offset past its newest record."""

    ref: RunRef
    until: int


def _preview(
    reader: _RunReader, samples: int, min_bytes: int
) -> tuple[list[Event], _Shown] | None:
    """The preview of a long log not read yet (`wandb_log.read_preview`): its
    config (from the head), a preview batch of its head's and sampled rows, one
    of its newest rows, and its latest summary. Decoded by a reader of its own:
    nothing is counted in the unused input (the read in order counts it all) and the
    exit record is left to the read in order. None when there is no preview."""
    log = reader._locate()
    got = None
    if log is not None and not reader.offset:
        got = read_preview(log, reader.record_cls, samples=samples, min_bytes=min_bytes)
    if got is None:
        return None
    probe = _RunReader(reader.path, UnusedInput(), reader.record_cls)
    probe.log = log
    events = [replace(e, preview=True) if isinstance(e, ScalarBatch) else e
              for e in probe._records(got.head + got.sample) if _previewed(e, summary=False)]
    probe.summary_raw = {}
    # The newest rows are the run's values, not its shape (`ScalarBatch.tail`): the store
    # shows them and feeds only the sample to the preview's phase classifier, as for Trackio.
    events += [replace(e, preview=True, tail=True) if isinstance(e, ScalarBatch) else e
               for e in probe._records(got.tail) if _previewed(e, summary=True)]
    assert probe.ref is not None  # the head holds a run record (read_preview)
    return events, _Shown(probe.ref, got.tail_end)


def _previewed(event: Event, summary: bool) -> bool:
    if isinstance(event, ScalarBatch):
        return True
    meta = event.meta if isinstance(event, RunMeta) else {}
    return "summary" in meta if summary else "config" in meta


# -- the source --------------------------------------------------------------------------


class WandbSource(PolledSource):
    """Follows one W&B run, or every run of a `wandb/` directory (module docstring)."""

    previews = True  # it can send a coarse preview of a long log first (newest first)

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        runs: Sequence[str] | None = None,
        interval: float = 1.0,
        max_bytes_per_poll: int = MAX_BYTES_PER_POLL,
    ):
        self.path = Path(path).expanduser()
        self.runs = set(runs) if runs else None
        self._interval = interval
        self.max_bytes_per_poll = max(HEADER_LEN + 1, max_bytes_per_poll)
        self.unused_input = UnusedInput()
        self.limitation = ""
        self.finished = False
        self.behind = False
        self.single: bool | None = None  # decided when PATH first exists
        self._readers: dict[Path, _RunReader] = {}
        self._record_cls: type | None = None
        self.name = f"wandb: {short_path(self.path)}"
        self.preview = False  # preview long logs newest first (the dashboard sets it)
        self.preview_min_bytes = PREVIEW_MIN_BYTES
        self.hold: threading.Event | None = None  # set by the dashboard: preview on screen
        self._previewed = False
        self._shown: dict[Path, _Shown] = {}  # previews on screen, by reader

    def _discover(self) -> list[_RunReader]:
        """The readers to poll, latest first; raises "waiting for ..." when there are none."""
        if self._record_cls is None:
            self._record_cls = _record_class()
        if not self.path.exists():
            raise SourceError(f"waiting for {self.path}", kind=WAITING)
        if self.single is None:
            self.single = _is_run_dir(self.path)
        if self.single:
            reader = self._readers.get(self.path)
            if reader is None:
                reader = self._readers[self.path] = _RunReader(
                    self.path, self.unused_input, self._record_cls
                )
            if reader._locate() is None:
                raise SourceError(f"waiting for the run's .wandb log in {self.path}",
                                  kind=WAITING)
            return [reader]
        for d in _run_dirs(self.path):
            if d not in self._readers:
                self._readers[d] = _RunReader(d, self.unused_input, self._record_cls)
        if not self._readers:
            raise SourceError(
                f"waiting for a W&B run in {self.path} (no run-* or offline-run-* directory yet)",
                kind=WAITING,
            )
        live = [r for r in self._readers.values() if r.wanted is not False and not r.complete]
        for r in live:
            log = r._locate()
            r.mtime = _mtime(log if log is not None else r.path)
        return sorted(live, key=lambda r: (r.mtime, r.path.name), reverse=True)

    def _is_wanted(self, reader: _RunReader) -> bool:
        if self.runs is None or reader.ref is None:
            return True
        names = {reader.ref.run_id, reader.ref.name, reader.path.name}
        return bool(names & self.runs)

    def _preview_first(self, readers: list[_RunReader]) -> list[Event]:
        """The first poll's previews of the long logs (module docstring)."""
        self._previewed = True
        events: list[Event] = []
        readers = readers[:PREVIEW_MAX_RUNS]  # the newest: the rest are read in order
        samples = max(PREVIEW_MIN_SAMPLES, PREVIEW_SAMPLES // max(1, len(readers)))
        for reader in readers:
            try:
                got = _preview(reader, samples, self.preview_min_bytes)
            except (OSError, SourceError):
                continue  # the read in order says what is wrong
            if got is None:
                continue
            shown = got[1]
            if self.runs is not None and not {shown.ref.run_id, shown.ref.name,
                                              reader.path.name} & self.runs:
                continue
            events.extend(got[0])
            self._shown[reader.path] = shown
        return events

    def _preview_ends(self, reader: _RunReader, more: bool) -> list[Event]:
        """An empty preview batch once the read in order has passed the preview."""
        shown = self._shown.get(reader.path)
        if shown is None or (reader.offset < shown.until and more):
            return []
        del self._shown[reader.path]
        return [ScalarBatch(shown.ref, np.empty(0, dtype=np.int64), {}, preview=True)]

    def poll(self) -> list[Event]:
        readers = self._discover()
        if self.preview and not self._previewed:
            events = self._preview_first(readers)
            if events:
                self.behind = True
                return events
        if self._shown and self.hold is not None:
            self.hold.wait(HOLD_MAX_S)  # read the history once the preview is on screen
            self.hold = None
        events: list[Event] = []
        budget = self.max_bytes_per_poll
        behind = False
        error: BaseException | None = None
        for reader in readers:
            if budget <= 0:
                behind = True
                break
            try:
                got, used, more = reader.read(budget)
            except (OSError, SourceError) as exc:
                if self.single:
                    raise
                if isinstance(exc, SourceError) and not exc.retry:  # not a W&B log at all
                    self.unused_input.skip("not a W&B log", str(exc))
                    reader.wanted = False
                else:
                    error = exc  # one unreadable run does not hold back the others
                continue
            budget -= used
            behind |= more
            if reader.wanted is None and reader.ref is not None:
                reader.wanted = self._is_wanted(reader)
                if not reader.wanted and self.single:
                    raise SourceError(
                        f"the run in {self.path} ({reader.ref.run_id}, {reader.ref.name}) "
                        f"is not one of {sorted(self.runs or ())}",
                        retry=False,
                    )
            if reader.wanted is not False:
                events.extend(got)
                events.extend(self._preview_ends(reader, more))
            if reader.version and not self.limitation:
                self.limitation = f"unknown .wandb format version {reader.version}"
        if error is not None and not events:
            raise SourceError(f"W&B run: {error}") from error
        self.behind = behind
        if self.single:
            self.finished = all(r.complete for r in readers)
        for r in readers:  # a run whose exit record was read has finished
            if r.complete and r.wanted and r.ref is not None:
                self.report_run_state(r.ref, "finished")
        return events

    def close(self) -> None:
        """Nothing stays open between polls."""
