"""What the command line asks for, shared by the commands: the exit statuses, the
`UsageError` a bad request raises, and the source a command names (`source_request`,
`dashboard_request`, `open_request`). `cli.py` parses; `report/` and `serve/` read
what it parsed through here, so that no module imports back from the one that
dispatches to it. Light: `carl-tui --help` imports this, and nothing heavy from here."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TextIO

EXIT_USAGE = 2
EXIT_NO_DATA = 1


class UsageError(Exception):
    """A problem with what the user asked for, printed as one line (exit status 2)."""


def source_request(args, **kw):
    """What the user named on the command line, as a `SourceRequest`."""
    from carl_tui.sources.open import SourceRequest

    watch = getattr(args, "watch", None)
    if getattr(args, "file", None) is not None and args.command in ("summary", "export",
                                                                    "fleet"):
        if watch is not None:
            raise UsageError("give the file once: either FILE or --watch FILE")
        watch = args.file
    return SourceRequest(
        watch=watch,
        trackio=getattr(args, "trackio", None),
        project=getattr(args, "project", None),
        run=getattr(args, "run", None),
        trackio_dir=getattr(args, "trackio_dir", None),
        job=getattr(args, "job", None),
        jobs=bool(getattr(args, "jobs", False)),
        namespace=getattr(args, "namespace", None),
        tensorboard=getattr(args, "tensorboard", None),
        wandb=getattr(args, "wandb", None),
        file_format=getattr(args, "file_format", "auto") or "auto",
        **kw,
    )


def fleet_requests(args, **kw) -> list[tuple[str, Any]]:
    """`fleet`'s sources: (the flag as typed, its `SourceRequest`) for each source named:
    several at once, `--watch`, `--tensorboard` and `--wandb` repeatable. The local Trackio
    store is read where `--project` (without `--trackio`) or `--trackio-dir` names it, or
    where nothing else is named; beside a server whose URL names its project
    (`?project=X`), `--project` is the local store's. `--run` picks a run of one source."""
    import argparse

    from carl_tui.sources.trackio.address import parse_server

    def one(**given) -> argparse.Namespace:
        fields = dict.fromkeys(("watch", "trackio", "project", "run", "trackio_dir", "job",
                                "namespace", "tensorboard", "wandb", "file"))
        return argparse.Namespace(**{**fields, "command": "fleet", "jobs": False,
                                     "file_format": args.file_format, **given})

    named: list[tuple[str, argparse.Namespace]] = []
    watches = [*([args.file] if args.file is not None else []), *(args.watch or [])]
    named += [(f"--watch {w}", one(watch=w)) for w in watches]
    named += [(f"--tensorboard {d}", one(tensorboard=d)) for d in args.tensorboard or []]
    named += [(f"--wandb {d}", one(wandb=d)) for d in args.wandb or []]
    project, local_project = args.project, None
    if args.trackio is not None:
        try:
            in_url = parse_server(args.trackio)[1]
        except ValueError:
            in_url = None  # said by the request's check, naming the flag
        project, local_project = (None, args.project) if in_url else (args.project, None)
        named.append((f"--trackio {args.trackio}", one(trackio=args.trackio, project=project)))
    else:
        project, local_project = None, args.project
    if args.job is not None:
        named.append((f"--job {args.job}", one(job=args.job, namespace=args.namespace)))
    if args.jobs:
        named.append(("--jobs", one(jobs=True, namespace=args.namespace)))
    if local_project is not None or args.trackio_dir is not None or not named:
        label = (f"--project {local_project}" if local_project is not None else
                 f"--trackio-dir {args.trackio_dir}" if args.trackio_dir else "Trackio")
        named.append((label, one(project=local_project, trackio_dir=args.trackio_dir)))
    if args.namespace is not None and args.job is None and not args.jobs:
        raise UsageError("--namespace is the namespace of a job: give it with --job JOB_ID "
                         "(or with `fleet --jobs`)")
    if len(named) > 1 and args.run is not None:
        raise UsageError("--run picks a run of one source: with several, the fleet lists "
                         "every run (filter them with / in the table)")
    for _label, ns in named:
        ns.run = args.run
    return [(label, source_request(ns, **kw)) for label, ns in named]


def dashboard_request(args):
    """What the dashboard opens: the source named, or the recording `replay FILE` names."""
    if args.command == "replay":
        req = source_request(args, speed=args.speed)
        req.watch, req.replay = None, args.file
        return req
    return source_request(args)


def open_request(req):
    from carl_tui.sources.open import RequestError, open_sources

    try:
        return open_sources(req)
    except RequestError as exc:
        raise UsageError(str(exc)) from None


def fail(message: str) -> int:
    """Say in one line why a command found nothing to print: exit status 1."""
    print(f"carl-tui: {message}", file=sys.stderr)
    return EXIT_NO_DATA


def write_output(path: str, write: Callable[[TextIO], int]) -> int | None:
    """`write` into the file `path` (`-o`): the count it returns, or None once it is said
    in one line why the file could not be written."""
    try:
        with open(path, "w", encoding="utf-8", newline="") as out:
            return write(out)
    except OSError as exc:
        fail(f"-o: cannot write {path}: {exc.strerror or exc}")
        return None
