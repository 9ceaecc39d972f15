"""The one place that turns what the user named into sources.

What the user named is a `SourceRequest`: a file (`--watch`, or `summary
FILE`: a JSONL stream or a Trainer stdout log, told apart by content), a
Trackio server (`--trackio`), a local Trackio project (`--project`, or the
most recently active run of the store), a Hugging Face Job (`--job`), a
TensorBoard logdir (`--tensorboard`), a W&B run or folder (`--wandb`), or a
recording (`replay`). The CLI (dashboard, `summary`, `export`), the pickers
and the launch form all open sources here.

`check_request` validates without touching the network and raises
`RequestError` naming the flag and what it accepts; `open_sources` checks what
can be checked on this machine (the file, the Trackio project) and says how to
build the sources: `Opened.sources` builds them on first use. Nothing here
imports a reader (numpy and the rest) before that, so the dashboard draws its
first frame first; the imports of optional libraries happen here, lazily.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from carl_tui.errors import CarlError
from carl_tui.sources.file_format import SNIFF_BYTES, file_source, sniff_format


class RequestError(CarlError):
    """What the user asked for cannot be opened; the message names the flag. `kind`:
    "usage" (a bad flag) or "not_found" (a well-formed source with nothing there: no such
    file, no Trackio project; `summary`/`export` exit 1 on it, as on an empty run)."""

    def __init__(self, message: str, kind: str = "usage"):
        super().__init__(message, retry=False, kind=kind)


@dataclass
class SourceRequest:
    watch: str | None = None
    trackio: str | None = None
    project: str | None = None
    run: str | None = None
    trackio_dir: str | None = None
    job: str | None = None
    jobs: bool = False  # every job of `namespace` (yours by default): `fleet --jobs`
    namespace: str | None = None
    tensorboard: str | None = None
    wandb: str | None = None
    replay: str | None = None
    speed: float = 1.0
    file_format: str = "auto"  # auto, jsonl, trainer-log (for --watch)
    must_exist: bool = False  # summary/export: a missing file is an error, not a wait

    @property
    def remote(self) -> bool:
        """A source read over the network (a Trackio server, a job, your jobs): a reader
        waits for it patiently (`collect`)."""
        return self.trackio is not None or self.job is not None or self.jobs

    def named(self) -> list[str]:
        """The source flags given, as the user typed them."""
        flags = {"--watch": self.watch, "--trackio": self.trackio, "--job": self.job,
                 "--jobs": self.jobs or None, "--tensorboard": self.tensorboard,
                 "--wandb": self.wandb, "replay": self.replay}
        return [k for k, v in flags.items() if v is not None]


@dataclass
class Opened:
    """Sources to read, with what the dashboard needs to present them. `make` builds
    the sources; `sources` calls it once, on first use."""

    make: Callable[[], list[Any]]
    title: str
    run: str | None = None  # the run to show first (id, name or key)
    list_projects: Callable[[], list[str]] | None = None
    open_project: Callable[[str], Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @cached_property
    def sources(self) -> list[Any]:
        return list(self.make())


# -- checking -----------------------------------------------------------------------


def check_request(req: SourceRequest) -> None:
    """Raise RequestError for anything that cannot work, before a screen opens."""
    named = req.named()
    if len(named) > 1:
        raise RequestError(f"{' and '.join(named)}: choose one source")
    if req.trackio is not None:
        from carl_tui.sources.trackio.address import parse_server

        try:
            _url, _project = parse_server(req.trackio)
        except ValueError as exc:
            raise RequestError(f"--trackio {exc}") from None
    if req.job is not None and not req.job.strip():
        raise RequestError("--job needs a job id (see `j` in the dashboard or `hf jobs ps`)")
    if req.namespace is not None and req.job is None and not req.jobs:
        raise RequestError("--namespace is the namespace of a job: give it with --job JOB_ID "
                           "(or with `fleet --jobs`)")
    if req.speed is not None and (not math.isfinite(req.speed) or req.speed < 0):
        raise RequestError("--speed must be a number >= 0 (0 = as fast as possible)")
    if req.watch is not None:
        _check_file("--watch", req.watch, req.must_exist)
    if req.replay is not None:
        _check_file("replay", req.replay, True)
    if req.tensorboard is not None:
        _check_dir("--tensorboard", req.tensorboard, req.must_exist)
    if req.wandb is not None and not req.wandb.endswith(".wandb"):  # a run's log file is fine too
        _check_dir("--wandb", req.wandb, req.must_exist)
    if req.file_format not in ("auto", "jsonl", "trainer-log"):
        raise RequestError("--format must be auto, jsonl or trainer-log")


def _check_file(flag: str, path: str, must_exist: bool) -> None:
    if not path.strip():
        raise RequestError(f"{flag} needs a file")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if must_exist:
            raise RequestError(f"{flag}: no such file: {path}", "not_found") from None
        return  # the dashboard waits for it to appear
    except OSError as exc:
        raise RequestError(f"{flag}: cannot read {path}: {exc.strerror}", "not_found") from None
    if stat.S_ISDIR(st.st_mode):
        hint = _directory_hint(Path(path))
        if hint or flag != "--watch":
            raise RequestError(f"{flag}: {path} is a directory; give a file{hint}")
        if watched_files(Path(path)):
            return  # a folder of streams or logs (a sweep): each file a source
        raise RequestError(f"{flag}: {path} is a directory with no JSONL stream or Trainer "
                           f"log in it (*{', *'.join(WATCHED_SUFFIXES)})")
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
        raise RequestError(f"{flag}: {path} is not a regular file or a pipe")
    if not os.access(path, os.R_OK):
        raise RequestError(f"{flag}: {path} is not readable", "not_found")


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


def _check_dir(flag: str, path: str, must_exist: bool) -> None:
    if not path.strip():
        raise RequestError(f"{flag} needs a directory")
    p = Path(path)
    if not p.exists():
        if must_exist:
            raise RequestError(f"{flag}: no such directory: {path}", "not_found")
        return
    if not p.is_dir():
        raise RequestError(f"{flag}: {path} is not a directory")


def _directory_hint(p: Path) -> str:
    """Suggest the flag for a directory a tracker wrote."""
    try:
        names = [c.name for c in p.iterdir()][:2000]
    except OSError:
        return ""
    if any(n.startswith("events.out.tfevents") for n in names) or any(
        n.startswith("events.out.tfevents") for n in _walk_names(p, 3)
    ):
        return f" (it holds TensorBoard logs: use --tensorboard {p})"
    if "wandb" in names or any(n.startswith(("run-", "offline-run-")) and (p / n).is_dir()
                               for n in names):  # W&B's run folders (not run-0.jsonl)
        return f" (it holds W&B runs: use --wandb {p})"
    return ""


def _walk_names(p: Path, depth: int):
    if depth <= 0:
        return
    try:
        children = list(p.iterdir())[:500]
    except OSError:
        return
    for c in children:
        yield c.name
        if c.is_dir():
            yield from _walk_names(c, depth - 1)


# -- opening ------------------------------------------------------------------------


def open_sources(req: SourceRequest) -> Opened:
    """The sources for `req` (checked first), built on first use of `Opened.sources`, or
    now with `must_exist` (`summary`, `export`: no screen to draw first). Raises
    RequestError."""
    check_request(req)
    opened = _plan(req)
    if req.must_exist:
        _ = opened.sources
    return opened


def _plan(req: SourceRequest) -> Opened:
    if req.replay is not None:
        return _open_replay(req)
    if req.watch is not None:
        watch, fmt, settled = req.watch, req.file_format, req.must_exist
        return Opened(lambda: [open_file(w, fmt, settled=settled) for w in _watched(watch)],
                      f"carl-tui · {req.watch}", req.run)
    if req.trackio is not None:
        return _open_trackio_remote(req)
    if req.job is not None:
        return _open_job(req)
    if req.jobs:
        return _open_jobs(req)
    if req.tensorboard is not None:
        return _open_tensorboard(req)
    if req.wandb is not None:
        return _open_wandb(req)
    return _open_trackio_local(req)


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
        from carl_tui.sources.auto_file import AutoFileSource

        return AutoFileSource(path, run=run)
    return file_source(path, file_format, run)


def _open_replay(req: SourceRequest) -> Opened:
    speed = math.inf if req.speed == 0 else req.speed
    path = Path(req.replay or "")

    def make() -> list[Any]:
        from carl_tui.sources.replay import ReplaySource

        return [ReplaySource(path, speed=speed)]
    return Opened(make, f"carl-tui · replay {path.name}", req.run)


def _open_trackio_remote(req: SourceRequest) -> Opened:
    from carl_tui.sources.trackio.address import parse_server

    url, project_in_url = parse_server(req.trackio or "")
    project = req.project or project_in_url
    runs = [req.run] if req.run else None

    def source(name: str | None, runs: list[str] | None = None):
        from carl_tui.sources.trackio.remote import TrackioRemoteSource

        return TrackioRemoteSource(url, project=name, runs=runs)
    opened = Opened(lambda: [source(project, runs)], f"carl-tui · {url}", req.run,
                    open_project=source)
    opened.list_projects = lambda: opened.sources[0].list_projects()
    return opened


def _open_job(req: SourceRequest) -> Opened:
    if find_spec("huggingface_hub") is None:  # found without importing it (0.1 s)
        raise RequestError("--job needs the [hub] extra: pip install 'carl-tui[hub]' "
                           "(no module named 'huggingface_hub')")
    job, namespace = (req.job or "").strip(), req.namespace

    def make() -> list[Any]:
        from carl_tui.sources.hf_jobs import HfJobSource

        return [HfJobSource(job, namespace=namespace)]
    return Opened(make, f"carl-tui · job {req.job}", req.run)


def _open_jobs(req: SourceRequest) -> Opened:
    if find_spec("huggingface_hub") is None:
        raise RequestError("--jobs needs the [hub] extra: pip install 'carl-tui[hub]' "
                           "(no module named 'huggingface_hub')")
    namespace, headless = req.namespace, req.must_exist

    def make() -> list[Any]:
        from carl_tui.sources.hf_jobs_list import HfJobsListSource

        # headless (`fleet --json`): each job's log read once; live: only the run in view's
        return [HfJobsListSource(namespace, read_logs=headless)]
    return Opened(make, f"carl-tui · jobs of {namespace or 'yours'}", req.run)


def _open_tensorboard(req: SourceRequest) -> Opened:
    runs = [req.run] if req.run else None
    logdir = Path(req.tensorboard or ".")

    def make() -> list[Any]:
        from carl_tui.sources.tensorboard import TensorBoardSource

        return [TensorBoardSource(logdir, runs=runs)]
    return Opened(make, f"carl-tui · tensorboard {logdir}", req.run)


def _open_wandb(req: SourceRequest) -> Opened:
    runs = [req.run] if req.run else None
    path = Path(req.wandb or ".")

    def make() -> list[Any]:
        from carl_tui.sources.wandb_run import WandbSource

        return [WandbSource(path, runs=runs)]
    return Opened(make, f"carl-tui · wandb {path}", req.run)


def _open_trackio_local(req: SourceRequest) -> Opened:
    from carl_tui.sources.trackio import db

    root = Path(req.trackio_dir) if req.trackio_dir else db.trackio_dir()
    project, run = req.project, req.run
    if project is None:
        recent = db.most_recent(root)
        if recent is None:
            raise RequestError(
                f"no Trackio projects in {root}. Point --trackio-dir or $TRACKIO_DIR at a "
                "Trackio store, or use --watch PATH, --trackio URL, --job ID, --tensorboard DIR, "
                "--wandb DIR, or try `carl-tui demo`.", "not_found"
            )
        project, recent_run = recent
        run = run or recent_run
    elif not db.db_path(project, root).exists():
        names = ", ".join(p.name for p in db.list_projects(root)) or "none"
        raise RequestError(f"--project: no Trackio project {project!r} in {root} "
                           f"(projects: {names})", "not_found")

    def source(name: str):
        from carl_tui.sources.trackio.local import TrackioLocalSource

        return TrackioLocalSource(name, root=root)
    return Opened(
        lambda: [source(project)], f"carl-tui · trackio {project}", run,
        list_projects=lambda: [p.name for p in db.list_projects(root)],
        open_project=source,
    )
