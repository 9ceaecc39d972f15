"""The file kind: `--watch FILE` (or `summary FILE`), a JSONL stream or a Trainer
stdout log told apart by content, or a folder of them (a sweep). Stdlib only at import;
the readers load when the sources are built."""

from __future__ import annotations

import os
from pathlib import Path

from carl_tui.identity import JSONL
from carl_tui.sources.file_format import SNIFF_BYTES, file_source, sniff_format
from carl_tui.sources.kinds import (
    Flag,
    Opened,
    RequestError,
    SourceKind,
    SourceRequest,
    check_file,
    path_arg,
)

FORMATS = ("auto", "jsonl", "trainer-log")

#: The files `--watch DIR` follows: JSONL streams and Trainer logs (stdout, SLURM .out).
WATCHED_SUFFIXES = (".jsonl", ".log", ".out", ".txt")


def watched_files(folder: Path) -> list[Path]:
    """The streams and logs in `folder` (not below it), in name order: what `--watch DIR`
    follows, one source each (a sweep of 14 runs: one flag, not 14)."""
    try:
        children = sorted(folder.iterdir())
    except OSError:
        return []
    return [c for c in children if c.suffix in WATCHED_SUFFIXES
            and not c.name.startswith(".") and c.is_file()]


def _watched(path: str) -> list[str]:
    """A watched path as files: a folder's streams and logs, else the path itself."""
    p = Path(path)
    return [str(f) for f in watched_files(p)] if p.is_dir() else [path]


def open_file(path: str | os.PathLike, file_format: str = "auto", run=None, *,
              settled: bool = False):
    """A source for a file another process writes: a JSONL stream or a Trainer log.
    `settled`: the file is complete (summary, export): decide its format now, even when
    its content says nothing (then it is read as a stream, which holds no run)."""
    path = Path(path)
    if file_format == "auto" and settled and path.is_file():
        with open(path, "rb") as fh:
            file_format = sniff_format(fh.read(SNIFF_BYTES)) or "jsonl"
    if file_format == "auto":
        from carl_tui.sources.auto_file import AutoFileSource  # the readers: on first use

        return AutoFileSource(path, run=run)
    return file_source(path, file_format, run)


def _folder(path: str) -> None:
    if watched_files(Path(path)):
        return  # a folder of streams or logs (a sweep): each file a source
    raise RequestError(f"--watch: {path} is a directory with no JSONL stream or Trainer "
                       f"log in it (*{', *'.join(WATCHED_SUFFIXES)})")


def _check(req: SourceRequest, hint) -> None:
    check_file("--watch", req.get("watch"), req.must_exist, hint, _folder)


def check_format(req: SourceRequest, hint) -> None:
    if req.get("file_format", "auto") not in FORMATS:
        raise RequestError("--format must be auto, jsonl or trainer-log")


def _open(req: SourceRequest) -> Opened:
    watch, fmt, settled = req.get("watch"), req.get("file_format", "auto"), req.must_exist
    return Opened(lambda: [open_file(w, fmt, settled=settled) for w in _watched(watch)],
                  f"carl-tui · {watch}", req.run)


def _both(req: SourceRequest, hint) -> None:
    _check(req, hint)
    check_format(req, hint)


FILE = SourceKind(
    name=JSONL,
    flags=(
        Flag("--watch", metavar="FILE", type=path_arg, repeatable=True,
             help="follow a file another process writes: a JSONL stream or a Trainer's "
                  "stdout log (told apart by content), or a folder of them (a sweep: "
                  "each *.jsonl, *.log, *.out, *.txt in it)"),
        Flag("--file-format", choices=FORMATS, default="auto", type=None,
             help="what the watched file holds (default: decided by its content)"),
    ),
    open=_open,
    check=_both,
    near=lambda req: [Path(req.get("watch"))],
)

