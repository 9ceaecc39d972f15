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

from carl_tui.completions.files import (
    ParquetReader,
    StdoutReader,
    StreamReader,
    WandbTableReader,
)
from carl_tui.completions.log import Reader
from carl_tui.sources.line_marks import PanelMarks


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


def wandb_run_dir(path: Path, run_id: str | None) -> Path | None:
    """The W&B run folder of `run_id` under `path` (a run folder, its `.wandb` file, or a
    `wandb/` folder of runs)."""
    if path.is_file():
        path = path.parent
    if (path / "files").is_dir() or any(path.glob("run-*.wandb")):
        return path
    runs = sorted((p for p in path.glob("*run-*") if p.is_dir() and p.name != "latest-run"),
                  key=lambda p: p.stat().st_mtime, reverse=True)
    if run_id:
        runs = [p for p in runs if p.name.endswith(f"-{run_id}")]
    return runs[0] if runs else None


def readers_for(req: Any, run: Any = None, meta: Mapping[str, Any] | None = None, *,
                remote_query: Callable[[str], list[dict]] | None = None,
                marked: Any = None) -> list[Reader]:
    """The readers of the run `run` (a `RunRef`) of what `req` names, best first;
    `marked`: the completions the source reading the file named marked (its
    `completions_lines`), read there rather than from the file again."""
    readers: list[Reader] = []
    near: list[Path] = []
    run_id = getattr(run, "run_id", None)
    if req.replay is not None:
        near.append(Path(req.replay))
        readers.append(StreamReader(req.replay))
    elif req.watch is not None:
        path = Path(req.watch)
        near.append(path)
        readers.append(_file_reader(path, req.file_format) if marked is None
                       else StdoutReader(marked) if isinstance(marked, PanelMarks)
                       else StreamReader(marked))
    elif req.wandb is not None:
        rundir = wandb_run_dir(Path(req.wandb), run_id)
        if rundir is not None:
            near.append(rundir)
            readers.append(WandbTableReader(rundir / "files" / "media" / "table"))
    elif req.trackio is not None:
        if remote_query is not None and run_id:
            from carl_tui.completions.trackio import TrackioRemoteTables

            readers.append(TrackioRemoteTables(run_id, remote_query))
    elif req.tensorboard is not None:
        near.append(Path(req.tensorboard))
    elif req.job is None:
        readers += _trackio_local(req, run)
    return [ParquetReader(f) for f in parquet_folders(near, meta)] + readers


def _file_reader(path: Path, file_format: str) -> Reader:
    fmt = file_format
    if fmt == "auto":
        from carl_tui.sources.file_format import SNIFF_BYTES, sniff_format

        try:
            with open(path, "rb") as fh:
                fmt = sniff_format(fh.read(SNIFF_BYTES)) or "jsonl"
        except OSError:
            fmt = "jsonl"
    return StdoutReader(path) if fmt == "trainer-log" else StreamReader(path)


def _trackio_local(req: Any, run: Any) -> list[Reader]:
    from carl_tui.completions.trackio import TrackioLocalTables
    from carl_tui.sources.trackio import db

    if run is None or not getattr(run, "project", None):
        return []
    root = Path(req.trackio_dir) if req.trackio_dir else db.trackio_dir()
    return [TrackioLocalTables(db.db_path(run.project, root), run.run_id)]


def reader_factory(req: Any, sources: Callable[[], list], *,
                   live: bool = True) -> Callable[..., list]:
    """`(run, meta) -> readers` for the dashboard and `export`: what `req` names, with the
    Trackio server's `query_project` when it names one (through the connection of the
    source `sources()` gives). `live`: `sources()` are the ones being read (the
    dashboard's): a stream's completions lines are taken from the source reading it."""

    def make(run: Any, meta: Mapping[str, Any] | None = None) -> list[Reader]:
        remote = sources()[0].query_sql if req.trackio is not None else None
        marked = None
        if live and req.watch is not None:
            marked = next((s.completions_lines for s in sources()
                           if s.completions_lines is not None), None)
        return readers_for(req, run, meta, remote_query=remote, marked=marked)

    return make
