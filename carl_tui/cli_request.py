"""What the command line asks for, shared by the commands: the exit statuses, the
`UsageError` a bad request raises, and the source a command names (`source_request`,
`dashboard_request`, `open_request`). `cli.py` parses; `report/` and `serve/` read
what it parsed through here, so that no module imports back from the one that
dispatches to it. Light: `carl-tui --help` imports this, and nothing heavy from here."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TextIO

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
        namespace=getattr(args, "namespace", None),
        tensorboard=getattr(args, "tensorboard", None),
        wandb=getattr(args, "wandb", None),
        file_format=getattr(args, "file_format", "auto") or "auto",
        **kw,
    )


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
