"""The Trackio kinds: a server (`--trackio URL [--project P]`) and the local store
(`--project P`, `--trackio-dir DIR`; the default kind: read when no source is named).
Stdlib only at import (address.py); the store (sqlite3) and the readers load when the
request is opened."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from carl_tui.identity import TRACKIO, TRACKIO_REMOTE
from carl_tui.sources.kinds import (
    Flag,
    Opened,
    RequestError,
    SourceKind,
    SourceRequest,
    nonempty,
    path_arg,
    text_arg,
)
from carl_tui.sources.trackio.address import parse_server


def _check_remote(req: SourceRequest, hint) -> None:
    try:
        parse_server(req.get("trackio"))
    except ValueError as exc:
        raise RequestError(f"--trackio {exc}") from None


def _open_remote(req: SourceRequest) -> Opened:
    url, project_in_url = parse_server(req.get("trackio", ""))
    project = req.get("project") or project_in_url
    runs = [req.run] if req.run else None

    def source(name: str | None, runs: list[str] | None = None):
        from carl_tui.sources.trackio.remote import TrackioRemoteSource  # on first use

        return TrackioRemoteSource(url, project=name, runs=runs)
    opened = Opened(lambda: [source(project, runs)], f"carl-tui · {url}", req.run,
                    open_project=source)
    opened.list_projects = lambda: opened.sources[0].list_projects()
    return opened


def _fleet_remote(pool: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Beside a server whose URL names its project (`?project=X`), `--project` is the
    local store's; else the server's (taken from the pool)."""
    url = pool.get("trackio")
    if url is None:
        return []
    try:
        in_url = parse_server(url)[1]
    except ValueError:
        in_url = None  # said by the request's check, naming the flag
    project = None if in_url else pool.pop("project", None)
    return [(f"--trackio {url}", {"trackio": url, "project": project})]


TRACKIO_SERVER = SourceKind(
    name=TRACKIO_REMOTE,
    flags=(Flag("--trackio", metavar="URL", type=text_arg,
                help="a Trackio server: user/space, https://user-space.hf.space, or "
                     "http://host:port (the URL `trackio show` prints works too)"),),
    open=_open_remote,
    check=_check_remote,
    fleet=_fleet_remote,
    remote=True,
    run_sources=(TRACKIO_REMOTE,),
)


def _open_local(req: SourceRequest) -> Opened:
    from carl_tui.sources.trackio import db  # sqlite3: when the store is opened

    root = Path(req.get("trackio_dir")) if req.get("trackio_dir") else db.trackio_dir()
    project, run = req.get("project"), req.run
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
        from carl_tui.sources.trackio.local import TrackioLocalSource  # on first use

        return TrackioLocalSource(name, root=root)
    return Opened(
        lambda: [source(project)], f"carl-tui · trackio {project}", run,
        list_projects=lambda: [p.name for p in db.list_projects(root)],
        open_project=source,
    )


def _fleet_local(pool: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Read where `--project` (without `--trackio`) or `--trackio-dir` names it (and,
    the default kind, where nothing else is named)."""
    project, folder = pool.get("project"), pool.get("trackio_dir")
    if project is None and folder is None:
        return []
    label = (f"--project {project}" if project is not None else
             f"--trackio-dir {folder}" if folder else "Trackio")
    return [(label, {"project": project, "trackio_dir": folder})]


TRACKIO_STORE = SourceKind(
    name=TRACKIO,
    flags=(Flag("--project", type=nonempty, help="Trackio project"),
           Flag("--trackio-dir", metavar="DIR", type=path_arg,
                help="local Trackio store folder")),
    label="Trackio",
    open=_open_local,
    fleet=_fleet_local,
    default=True,
    run_sources=(TRACKIO,),
)
