"""Kinds of source as a registry: what a kind declares, and the registry itself.

A kind (a file, a Trackio server, a Hugging Face Job, a TensorBoard logdir, ...)
declares in its own module its flags (`Flag`: argparse's name, help, metavar and
type, repeatable in `fleet` or not, which commands get it, a companion's rule, a
default from the environment), the checks of their values, its opener (returning
`Opened`), its directory hint and its fleet label, and is added with
`register(kind)`. The parser, the request and the opener read the registry: adding a
kind edits none of them (the README's "Adding a source").

What the user named is a `SourceRequest`: the values of the source flags given, by
their key (`watch`, `trackio`, ...), and the kinds they name. Stdlib only: the
parser imports this before the first frame.
"""

from __future__ import annotations

import argparse
import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from carl_tui.errors import CarlError

#: The commands that take source flags: the dashboard (`carl-tui`, `carl-tui serve`),
#: `summary`, `export` and `fleet`.
COMMANDS = frozenset({"dashboard", "summary", "export", "fleet"})


class RequestError(CarlError):
    """What the user asked for cannot be opened; the message names the flag. `kind`:
    "usage" (a bad flag) or "not_found" (a well-formed source with nothing there: no such
    file, no Trackio project; `summary`/`export` exit 1 on it, as on an empty run)."""

    def __init__(self, message: str, kind: str = "usage"):
        super().__init__(message, retry=False, kind=kind)


# -- the values a flag takes (argparse types) ---------------------------------------

# Longest names and texts taken from the command line (a metric, run or project name, a
# job id; a path; a URL or a keymap): what a person types, with room to spare.
MAX_NAME, MAX_PATH, MAX_TEXT = 256, 4096, 2048


def bounded(text: str, limit: int = MAX_NAME, what: str = "a name") -> str:
    """A name (or `what`) of at most `limit` characters, without control characters."""
    if len(text) > limit:
        raise argparse.ArgumentTypeError(f"too long for {what} ({len(text):,} characters; "
                                         f"at most {limit:,})")
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise argparse.ArgumentTypeError(f"control characters in {what}: {text[:60]!r}")
    return text


def path_arg(text: str) -> str:
    return bounded(text, MAX_PATH, "a path")


def text_arg(text: str) -> str:
    return bounded(text, MAX_TEXT, "this option")


def nonempty(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return bounded(text.strip())


# -- what a kind declares -----------------------------------------------------------


@dataclass(frozen=True)
class Flag:
    """One flag of a kind. The first flag of a kind names it (`--tensorboard DIR`); the
    others go with it (`--namespace` with `--job`). `key`: the request's key for its value
    (argparse's dest; by default the name without dashes, `-` as `_`)."""

    name: str
    help: str
    metavar: str | None = None
    type: Callable[[str], Any] | None = bounded
    key: str = ""
    repeatable: bool = False  # in `fleet`: given more than once, one source each
    commands: frozenset[str] = COMMANDS  # which commands get it (`{"fleet"}`: fleet only)
    switch: bool = False  # `--jobs`: no value, true when given
    choices: tuple[str, ...] | None = None
    default: Any = None
    env: str | None = None  # its default read from this environment variable
    fleet_help: str | None = None  # its help in `fleet`, when it says more there
    needs: tuple[str, ...] = ()  # a companion: given only with one of these flags (keys)
    needs_message: str = ""  # what is said when it comes alone

    def __post_init__(self):
        if not self.key:
            object.__setattr__(self, "key", self.name.lstrip("-").replace("-", "_"))

    def default_value(self) -> Any:
        if self.env and os.environ.get(self.env):
            return os.environ[self.env]
        return self.default


def _no_check(req: SourceRequest, hint: Callable[[Path], str]) -> None:
    return None


def _no_hint(p: Path, names: list[str]) -> str:
    return ""


@dataclass(frozen=True)
class SourceKind:
    """A kind of source. `open(req)` says how to build its sources (an `Opened`); it
    imports its readers lazily, in `Opened.make`. `check(req, hint)` raises RequestError
    for a value that cannot work (`hint(path)`: the flag to use for a folder another
    kind reads). `hint(folder, names)`: " (it holds ...: use --flag folder)" when the
    folder (its entries' `names`) is this kind's, else "". `label`: how the request names
    it ("--watch"; the first flag's name by default). `fleet(pool)`: its requests in
    `fleet` from the values given (by default one per value of its first flag, labelled
    "--flag value"). `near(req)`: the files and folders it reads (completions are looked
    for beside them). `remote`: read over the network (a reader waits patiently).
    `default`: the kind read when no kind is named (one: the local Trackio store)."""

    name: str
    flags: tuple[Flag, ...]
    open: Callable[[SourceRequest], Opened]
    check: Callable[[SourceRequest, Callable[[Path], str]], None] = _no_check
    hint: Callable[[Path, list[str]], str] = _no_hint
    label: str = ""
    fleet: Callable[[dict[str, Any]], list[tuple[str, dict[str, Any]]]] | None = None
    near: Callable[[SourceRequest], list[Path]] | None = None
    remote: bool = False
    default: bool = False
    run_sources: tuple[str, ...] = ()  # the `RunRef.source` its runs carry (identity.py)

    def __post_init__(self):
        if not self.label and self.flags:
            object.__setattr__(self, "label", self.flags[0].name)

    @property
    def key(self) -> str | None:
        """The key of the value that names this kind (None for the default kind)."""
        return None if self.default or not self.flags else self.flags[0].key


# -- what the user named ------------------------------------------------------------


@dataclass
class SourceRequest:
    """The source flags given (`values`, by key: the flags of every kind, None where not
    given), the kinds they name (in the registry's order; none: the default kind), the run
    to open first, and `must_exist` (summary, export: a missing file is an error, not a
    wait). Built by `request()` (sources/open.py) or `cli_request.source_request`."""

    values: dict[str, Any]
    kinds: tuple[SourceKind, ...]
    default: SourceKind | None = None
    run: str | None = None
    must_exist: bool = False

    def get(self, key: str, default: Any = None) -> Any:
        value = self.values.get(key)
        return default if value is None else value

    @property
    def kind(self) -> SourceKind:
        """The kind to open: the one named, else the default."""
        if self.kinds:
            return self.kinds[0]
        if self.default is None:
            raise RequestError("no source named, and no default kind of source")
        return self.default

    @property
    def remote(self) -> bool:
        """A source read over the network (a Trackio server, a job, your jobs): a reader
        waits for it patiently (`collect`)."""
        return any(k.remote for k in self.kinds)

    def flags_given(self) -> list[str]:
        """The source flags given, as the user typed them (`--watch`, `replay`, ...)."""
        return [k.label for k in self.kinds]


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


# -- the registry -------------------------------------------------------------------

_KINDS: list[SourceKind] = []


def register(kind: SourceKind) -> SourceKind:
    """Add `kind` (replacing one of its name); returns it."""
    unregister(kind.name)
    _KINDS.append(kind)
    return kind


def unregister(name: str) -> None:
    _KINDS[:] = [k for k in _KINDS if k.name != name]


def registered() -> tuple[SourceKind, ...]:
    """Every kind registered, in order. The built-in kinds are registered by
    `carl_tui.sources.registry`: import it (or `sources.open`) before reading this."""
    return tuple(_KINDS)


def flags(command: str | None = None) -> list[tuple[SourceKind, Flag]]:
    """Every kind's flags (those `command` gets), each once (the first kind declaring it)."""
    out: list[tuple[SourceKind, Flag]] = []
    seen: set[str] = set()
    for kind in _KINDS:
        for f in kind.flags:
            if f.key not in seen and (command is None or command in f.commands):
                seen.add(f.key)
                out.append((kind, f))
    return out


def directory_hint(p: Path) -> str:
    """Suggest the flag for a directory a tracker wrote (a kind's `hint`)."""
    try:
        names = [c.name for c in p.iterdir()][:2000]
    except OSError:
        return ""
    for kind in _KINDS:
        said = kind.hint(p, names)
        if said:
            return said
    return ""


def walk_names(p: Path, depth: int) -> Iterable[str]:
    """The names below `p`, `depth` levels down (500 entries a folder at most)."""
    if depth <= 0:
        return
    try:
        children = list(p.iterdir())[:500]
    except OSError:
        return
    for c in children:
        yield c.name
        if c.is_dir():
            yield from walk_names(c, depth - 1)


# -- checks a kind may use ----------------------------------------------------------


def check_file(flag: str, path: str, must_exist: bool, hint: Callable[[Path], str],
               folder: Callable[[str], None] | None = None) -> None:
    """A file to read (or one to wait for, unless `must_exist`). A folder is refused,
    with the flag for it when another kind reads it, unless `folder` takes it (it
    raises when it does not)."""
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
        said = hint(Path(path))
        if said or folder is None:
            raise RequestError(f"{flag}: {path} is a directory; give a file{said}")
        folder(path)
        return
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
        raise RequestError(f"{flag}: {path} is not a regular file or a pipe")
    if not os.access(path, os.R_OK):
        raise RequestError(f"{flag}: {path} is not readable", "not_found")


def check_dir(flag: str, path: str, must_exist: bool) -> None:
    """A folder to read (or one to wait for, unless `must_exist`)."""
    if not path.strip():
        raise RequestError(f"{flag} needs a directory")
    p = Path(path)
    if not p.exists():
        if must_exist:
            raise RequestError(f"{flag}: no such directory: {path}", "not_found")
        return
    if not p.is_dir():
        raise RequestError(f"{flag}: {path} is not a directory")
