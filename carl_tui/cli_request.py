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


def _given(args) -> dict[str, Any]:
    """The source flags' values on the parsed command line, by key (None where not given,
    or where the command has no such flag)."""
    from carl_tui.sources.open import registered  # with the built-in kinds registered

    return {f.key: getattr(args, f.key, None) for kind in registered() for f in kind.flags}


def source_request(args, **kw):
    """What the user named on the command line, as a `SourceRequest`."""
    from carl_tui.sources.open import request

    values = _given(args)
    if getattr(args, "file", None) is not None and args.command in ("summary", "export",
                                                                    "fleet"):
        if values.get("watch") is not None:
            raise UsageError("give the file once: either FILE or --watch FILE")
        values["watch"] = args.file
    return request(values, run=getattr(args, "run", None), **kw)


def fleet_requests(args, **kw) -> list[tuple[str, Any]]:
    """`fleet`'s sources: (the flag as typed, its `SourceRequest`) for each source named:
    several at once, each kind's repeatable flags (`--watch`, ...) one source a value.
    Each kind says which of its values name a source (`SourceKind.fleet`); the default
    kind (the local Trackio store) is read where its own flags name it, or where nothing
    else is named. `--run` picks a run of one source."""
    from carl_tui.sources.open import RequestError, check_companions, registered, request

    pool = _given(args)
    if args.file is not None:
        pool["watch"] = [args.file, *(pool.get("watch") or [])]
    try:
        check_companions(pool)
    except RequestError as exc:
        raise UsageError(str(exc)) from None
    named: list[tuple[str, dict[str, Any]]] = []
    default = None
    for kind in registered():
        if kind.default:
            default = kind
            continue
        named += _fleet_of(kind, pool)
    if default is not None:
        local = _fleet_of(default, pool)
        if not local and not named:
            local = [(default.label, {f.key: pool.get(f.key) for f in default.flags})]
        named += local
    if len(named) > 1 and args.run is not None:
        raise UsageError("--run picks a run of one source: with several, the fleet lists "
                         "every run (filter them with / in the table)")
    return [(label, request(values, run=args.run, **kw)) for label, values in named]


def _fleet_of(kind, pool: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """A kind's sources in `fleet`: as it says (`SourceKind.fleet`), else one per value of
    its first flag (a list when the flag is repeatable), labelled as typed, with its other
    flags' values."""
    if kind.fleet is not None:
        return kind.fleet(pool)
    first, *others = kind.flags
    given = pool.get(first.key)
    values = given if isinstance(given, list) else [] if given in (None, False) else [given]
    rest = {f.key: pool.get(f.key) for f in others}
    return [(first.name if v is True else f"{first.name} {v}", {first.key: v, **rest})
            for v in values]


def dashboard_request(args):
    """What the dashboard opens: the source named, or the recording `replay FILE` names."""
    from carl_tui.sources.open import request

    if args.command == "replay":
        values = {**_given(args), "watch": None, "replay": args.file, "speed": args.speed}
        return request(values, run=getattr(args, "run", None))
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
