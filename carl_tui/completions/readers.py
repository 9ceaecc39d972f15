"""Which completions readers a source has: from what the user named (a `SourceRequest`)
and the run in view.

- a Trainer's stdout (`--watch train.log`): its printed tables;
- a JSONL stream (`--watch`, `replay`): its `completions` lines;
- the local Trackio store: the run's tables; a Trackio server: the same through
  its `query_project` (given by the caller, who holds the connection);
- W&B (`--wandb`): the run's table files;
- beside any of these, TRL's parquet folder (`completions/` in the run's
  `output_dir` when its config names it, else next to the file or folder named,
  or one level down): preferred, being full precision and every row.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from carl_tui import identity
from carl_tui.completions.files import (
    ParquetReader,
    StdoutReader,
    StreamReader,
    WandbTableReader,
)
from carl_tui.completions.log import Reader
from carl_tui.completions.trackio import TrackioLocalTables, TrackioRemoteTables
from carl_tui.sources.file_format import SNIFF_BYTES, sniff_format
from carl_tui.sources.line_marks import PanelMarks
from carl_tui.sources.trackio import db
from carl_tui.sources.wandb_kind import run_dir as wandb_run_dir


def parquet_folders(near: list[Path], meta: Mapping[str, Any] | None = None) -> list[Path]:
    """`completions/` folders holding TRL's parquet files: the run's `output_dir` (from its
    config), then each of `near`, its parent, and their sub-folders one level down."""
    found: list[Path] = []
    config = (meta or {}).get("config")
    if isinstance(config, Mapping) and isinstance(config.get("output_dir"), str):
        found.append(Path(config["output_dir"]) / "completions")
    for base in near:
        for d in (base, base.parent):
            found.append(d / "completions")
            try:
                found += [Path(e.path) / "completions" for e in os.scandir(d)
                          if e.is_dir() and not e.name.startswith(".")]
            except OSError:
                pass
    out: list[Path] = []
    for f in found:
        if f not in out and f.is_dir() and any(f.glob("completions_*.parquet")):
            out.append(f)
    return out


def readers_for(req: Any, run: Any = None, meta: Mapping[str, Any] | None = None, *,
                remote_query: Callable[[str], list[dict]] | None = None,
                marked: Any = None) -> list[Reader]:
    """The readers of the run `run` (a `RunRef`) of what `req` names, best first: the
    parquet folders beside the files its kind reads (`SourceKind.near`), then the
    kind's own readers (`KIND_READERS`, by the kind's name). `marked`: the completions
    the source reading the file named marked (its `completions_lines`), read there
    rather than from the file again."""
    kind = req.kind
    near = list(kind.near(req)) if kind.near is not None else []
    own = KIND_READERS.get(kind.name)
    readers = own(req, run, near, remote_query, marked) if own is not None else []
    return [ParquetReader(f) for f in parquet_folders(near, meta)] + readers


def _file_readers(req: Any, run: Any, near: list[Path], remote_query, marked) -> list[Reader]:
    if marked is not None:
        return [StdoutReader(marked) if isinstance(marked, PanelMarks) else StreamReader(marked)]
    return [_file_reader(Path(req.get("watch")), req.get("file_format", "auto"))]


def _stream_readers(req: Any, run: Any, near: list[Path], remote_query, _marked) -> list[Reader]:
    return [StreamReader(req.get("replay"))]


def _wandb_readers(req: Any, run: Any, near: list[Path], remote_query, _marked) -> list[Reader]:
    rundir = wandb_run_dir(Path(req.get("wandb")), getattr(run, "run_id", None))
    if rundir is None:
        return []
    near.append(rundir)
    return [WandbTableReader(rundir / "files" / "media" / "table")]


def _trackio_remote(req: Any, run: Any, near: list[Path], remote_query, _marked) -> list[Reader]:
    run_id = getattr(run, "run_id", None)
    if remote_query is None or not run_id:
        return []
    return [TrackioRemoteTables(run_id, remote_query)]


def _file_reader(path: Path, file_format: str) -> Reader:
    fmt = file_format
    if fmt == "auto":
        try:
            with open(path, "rb") as fh:
                fmt = sniff_format(fh.read(SNIFF_BYTES)) or "jsonl"
        except OSError:
            fmt = "jsonl"
    return StdoutReader(path) if fmt == "trainer-log" else StreamReader(path)


def _trackio_local(req: Any, run: Any, near: list[Path], remote_query, _marked) -> list[Reader]:
    if run is None or not getattr(run, "project", None):
        return []
    root = Path(req.get("trackio_dir")) if req.get("trackio_dir") else db.trackio_dir()
    return [TrackioLocalTables(db.db_path(run.project, root), run.run_id)]


def reader_factory(req: Any, sources: Callable[[], list], *,
                   live: bool = True) -> Callable[..., list]:
    """`(run, meta) -> readers` for the dashboard and `export`: what `req` names, with the
    Trackio server's `query_project` when it names one (through the connection of the
    source `sources()` gives). `live`: `sources()` are the ones being read (the
    dashboard's): a stream's completions lines are taken from the source reading it."""

    def make(run: Any, meta: Mapping[str, Any] | None = None) -> list[Reader]:
        remote = sources()[0].query_sql if req.kind.name in REMOTE_QUERY else None
        marked = None
        if live and req.get("watch") is not None:
            marked = next((s.completions_lines for s in sources()
                           if s.completions_lines is not None), None)
        return readers_for(req, run, meta, remote_query=remote, marked=marked)

    return make


#: Each kind's own completions readers, by the kind's name (sources/kinds.py):
#: `(request, run, near, remote_query, marked) -> readers`; a reader may add to `near`, the
#: folders beside which TRL's parquet files are looked for. A kind absent here has
#: only those.
KIND_READERS: dict[str, Callable[..., list[Reader]]] = {
    identity.JSONL: _file_readers,
    identity.REPLAY: _stream_readers,
    identity.WANDB: _wandb_readers,
    identity.TRACKIO_REMOTE: _trackio_remote,
    identity.TRACKIO: _trackio_local,
}

#: The kinds whose source answers SQL (`query_sql`), given to their readers.
REMOTE_QUERY = {identity.TRACKIO_REMOTE}
