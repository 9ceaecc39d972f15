"""The demo's training for a dashboard (`carl-tui demo`, `carl-tui serve demo`): a real
tiny model trained on the CPU in a child process tied to this one, its stream checked
first."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from carl_tui.cli_request import UsageError


def start_demo_training(args, who: str, before_start: Callable[[], None] | None = None):
    """The demo's training, in a child process that ends with this one: its stream checked
    (`_demo_stream`), then `before_start` and the packages it needs; started, and said on
    stderr as `who`."""
    import importlib.util  # lazy: kept off `carl-tui --help` and the first frame

    stream = _demo_stream(args)
    if before_start is not None:
        before_start()
    missing = [m for m in ("torch", "transformers", "trl", "datasets")
               if importlib.util.find_spec(m) is None]
    if missing:
        raise UsageError(
            f"the demo trains a model and needs {', '.join(missing)}: "
            "pip install 'carl-tui[train]' (or run `make demo`)"
        )
    # lazy: a child process's tools, kept off `carl-tui --help` and the first frame
    from carl_tui.actions.local_job import LocalJob

    argv = [sys.executable, "-m", "carl_tui.training.demo", "--stream", str(stream),
            "--seed", str(args.seed)]
    if args.stream:
        stream.unlink(missing_ok=True)  # a fresh run, not the tail of an old one
    job = LocalJob.start(argv, stream, tie_to_parent=True)  # training ends with the dashboard
    print(f"{who}: training a tiny model on the CPU; stream {stream}, log {job.log_path}",
          file=sys.stderr)
    return stream, job



def _demo_stream(args) -> Path:
    """Where the demo writes: `--stream` (an existing file only with `--overwrite`: it
    would be deleted), else a new temporary folder."""
    import tempfile  # lazy: kept off `carl-tui --help` and the first frame

    if not args.stream:
        return Path(tempfile.mkdtemp(prefix="carl-demo-")) / "stream.jsonl"
    stream = Path(args.stream)
    if stream.is_dir():
        raise UsageError(f"--stream {stream} is a folder; name a file")
    if stream.exists() and not args.overwrite:
        raise UsageError(f"--stream {stream} exists; the demo would replace it: pass "
                         "--overwrite, or name another file")
    return stream
