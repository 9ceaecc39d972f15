"""Every event is made secret-free as it enters the store.

The store is the one door between the sources and everything a user sees,
saves or sends (the screen, notices, `summary`/`export`, files, Claude), so
masking here covers them all: log lines, run names and projects, metric
names, metadata and config values, marker details, job messages and source
statuses (messages and skip examples). See `carl_tui/redact.py`.

Structured values are masked by field too: a string under a key that names a
secret (`hub_token`, `WANDB_API_KEY`, `secrets`) is masked whatever it looks
like, and so is the argument after a secret flag in a command line
(`["--hub_token", "..."]`).

Run keys (`source:project:run_id`) are internal and stay as the source made
them so lookups keep working; a run shown by its id (no name) gets its id
masked as its name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from functools import lru_cache
from typing import Any

from carl_tui.events import (
    Event,
    Job,
    LogLines,
    Marker,
    RunMeta,
    RunRef,
    ScalarBatch,
    SourceStatus,
)
from carl_tui.redact import MASK, Redactor, is_secret_key, redact_literals

_MAX_DEPTH = 8


@lru_cache(maxsize=4096)
def _cached(text: str, literals: tuple[str, ...]) -> str:
    """Short strings seen again and again (metric names, run names), cached with the
    literal secrets they were masked against (the environment may change)."""
    return redact_literals(text, literals)


class _Cleaner:
    """Masking for one event: the environment's secrets are read once."""

    __slots__ = ("redact",)

    def __init__(self) -> None:
        self.redact = Redactor()

    def name(self, text: str) -> str:
        return _cached(text, self.redact.literals) if text else text

    def run(self, run: RunRef) -> RunRef:
        name = self.name(run.name) if run.name else ""
        if not name and self.name(run.run_id) != run.run_id:
            name = self.name(run.run_id)
        project = self.name(run.project)
        if name == run.name and project == run.project:
            return run
        return dataclasses.replace(run, name=name, project=project)

    def value(self, value: Any, depth: int = 0) -> Any:
        """Strings masked inside any nesting of dicts, lists and tuples; every string
        under a secret-named key, and the argument after a secret flag, masked whole."""
        if isinstance(value, str):
            return self.redact(value)
        if depth >= _MAX_DEPTH:
            return self.masked(value, depth)
        if isinstance(value, Mapping):
            return {self.name(str(k)): self.masked(v, depth + 1) if is_secret_key(k)
                    else self.value(v, depth + 1) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            out = []
            secret_next = False
            for v in value:
                out.append(self.masked(v, depth + 1) if secret_next else self.value(v, depth + 1))
                secret_next = (isinstance(v, str) and v.startswith("-") and "=" not in v
                               and is_secret_key(v))
            return type(value)(out)
        return value

    def masked(self, value: Any, depth: int = 0) -> Any:
        """`value` with every string in it masked whole: it sits under a secret's name.
        Containers nested too deep to walk are masked whole."""
        if isinstance(value, str):
            return MASK if value else value
        if isinstance(value, (Mapping, list, tuple)) and depth >= _MAX_DEPTH:
            return MASK
        if isinstance(value, Mapping):
            return {self.name(str(k)): self.masked(v, depth + 1) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.masked(v, depth + 1) for v in value)
        return value


def clean_value(value: Any, depth: int = 0) -> Any:
    """Strings masked inside any nesting of dicts, lists and tuples (see `_Cleaner.value`)."""
    return _Cleaner().value(value, depth)


def clean_events(events: Iterable[Event]) -> Iterator[Event]:
    """Each event cleaned (`clean_event`), the environment's secrets read once for all
    of them (a poll of a thousand runs: two thousand events)."""
    c = _Cleaner()
    return (clean_event(ev, c) for ev in events)


def clean_event(ev: Event, cleaner: _Cleaner | None = None) -> Event:
    """`ev` with every secret masked: its run's names, its texts, its config's values."""
    c = cleaner or _Cleaner()
    redact = c.redact
    if isinstance(ev, SourceStatus):
        return dataclasses.replace(
            ev,
            source=c.name(ev.source),
            message=redact(ev.message),
            limitation=redact(ev.limitation),
            skip_reasons=tuple((r, n, redact(ex)) for r, n, ex in ev.skip_reasons),
        )
    run = c.run(ev.run)
    if isinstance(ev, ScalarBatch):
        columns = ev.columns
        if any(c.name(k) != k for k in columns):
            columns = {c.name(k): v for k, v in columns.items()}
        if run is ev.run and columns is ev.columns:
            return ev
        return dataclasses.replace(ev, run=run, columns=columns)
    if isinstance(ev, LogLines):
        return dataclasses.replace(ev, run=run, lines=tuple(map(redact, ev.lines)))
    if isinstance(ev, RunMeta):
        return dataclasses.replace(ev, run=run, meta=c.value(dict(ev.meta)))
    if isinstance(ev, Marker):
        return dataclasses.replace(ev, run=run, kind=c.name(ev.kind),
                                   detail=c.value(dict(ev.detail)))
    if isinstance(ev, Job):
        return dataclasses.replace(ev, run=run, message=redact(ev.message),
                                   flavor=c.name(ev.flavor), url=redact(ev.url),
                                   name=c.name(ev.name), label=redact(ev.label),
                                   command=c.value(ev.command))
    if run is ev.run:
        return ev
    return dataclasses.replace(ev, run=run)
