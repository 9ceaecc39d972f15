"""The one place that turns what the user named into sources.

What the user named is a `SourceRequest` (sources/kinds.py): the values of the source
flags given and the kinds they name. The kinds are a registry: each declares its flags,
checks, opener and hints in its own module (file_kind.py, trackio/kinds.py,
hf_job_kinds.py, tensorboard_kind.py, wandb_kind.py, replay_kind.py; registry.py lists
them). The CLI (dashboard, `summary`, `export`, `fleet`), the pickers and the launch
form all open sources here.

`check_request` validates without touching the network and raises `RequestError`
naming the flag and what it accepts; `open_sources` checks what can be checked on this
machine (the file, the Trackio project) and says how to build the sources:
`Opened.sources` builds them on first use. Nothing here imports a reader (numpy and the
rest) before that, so the dashboard draws its first frame first.
"""

from __future__ import annotations

from typing import Any

from carl_tui.sources import registry
from carl_tui.sources.file_kind import WATCHED_SUFFIXES, open_file, watched_files
from carl_tui.sources.kinds import (
    Opened,
    RequestError,
    SourceKind,
    SourceRequest,
    directory_hint,
    registered,
)

__all__ = [
    "WATCHED_SUFFIXES",
    "Opened",
    "RequestError",
    "SourceRequest",
    "check_companions",
    "check_request",
    "default_kind",
    "open_file",
    "open_sources",
    "registered",
    "registry",
    "request",
    "watched_files",
]


def default_kind() -> SourceKind | None:
    return next((k for k in registered() if k.default), None)


def request(values: dict[str, Any] | None = None, *, run: str | None = None,
            must_exist: bool = False, **given: Any) -> SourceRequest:
    """A request for the source flags' `values` (and `given`), by key: `request(watch=
    "a.jsonl")`. The kinds named are those whose first flag has a value."""
    values = {**(values or {}), **given}
    known = {f.key for k in registered() for f in k.flags}
    unknown = sorted(set(values) - known)
    if unknown:
        raise TypeError(f"no kind of source takes {', '.join(unknown)}")
    named = tuple(k for k in registered()
                  if k.key is not None and values.get(k.key) not in (None, False))
    return SourceRequest(values, named, default_kind(), run=run, must_exist=must_exist)


def check_companions(values: dict[str, Any]) -> None:
    """A flag that goes with others (`--namespace` with `--job`) given without them."""
    for kind in registered():
        for f in kind.flags:
            if f.needs and values.get(f.key) is not None and not any(
                    values.get(k) not in (None, False, []) for k in f.needs):
                raise RequestError(f.needs_message)


def check_request(req: SourceRequest) -> None:
    """Raise RequestError for anything that cannot work, before a screen opens."""
    named = req.flags_given()
    if len(named) > 1:
        raise RequestError(f"{' and '.join(named)}: choose one source")
    check_companions(req.values)
    req.kind.check(req, directory_hint)


def open_sources(req: SourceRequest) -> Opened:
    """The sources for `req` (checked first), built on first use of `Opened.sources`, or
    now with `must_exist` (`summary`, `export`: no screen to draw first). Raises
    RequestError."""
    check_request(req)
    opened = req.kind.open(req)
    if req.must_exist:
        _ = opened.sources
    return opened
