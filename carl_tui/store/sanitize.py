"""Every event is made secret-free as it enters the store.

The store is the one door between the sources and everything a user sees,
saves or sends (the screen, notices, `summary`/`export`, files, Claude), so
masking here covers them all: log lines, run names and projects, metric
names, metadata and config values, marker details, job messages and source
statuses (messages and skip examples). See `carl_tui/redact.py`.

Run keys (`source:project:run_id`) are internal and stay as the source made
them so lookups keep working; a run shown by its id (no name) gets its id
masked as its name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from carl_tui.events import (
    Event,
    JobStatus,
    LogLines,
    Marker,
    RunMeta,
    RunRef,
    ScalarBatch,
    SourceStatus,
)
from carl_tui.redact import redact, redact_lines

_MAX_DEPTH = 8


@lru_cache(maxsize=4096)
def _name(text: str) -> str:
    """Short strings seen again and again (metric names, run names): cached."""
    return redact(text)


def clean_run(run: RunRef) -> RunRef:
    name = _name(run.name) if run.name else ""
    if not name and _name(run.run_id) != run.run_id:
        name = _name(run.run_id)
    project = _name(run.project)
    if name == run.name and project == run.project:
        return run
    return dataclasses.replace(run, name=name, project=project)


def clean_value(value: Any, depth: int = 0) -> Any:
    """Strings masked inside any nesting of dicts, lists and tuples."""
    if isinstance(value, str):
        return redact(value)
    if depth >= _MAX_DEPTH:
        return value
    if isinstance(value, Mapping):
        return {_name(str(k)): clean_value(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(clean_value(v, depth + 1) for v in value)
    return value


def clean_event(ev: Event) -> Event:
    if isinstance(ev, SourceStatus):
        return dataclasses.replace(
            ev,
            source=_name(ev.source),
            message=redact(ev.message),
            limitation=redact(ev.limitation),
            skip_reasons=tuple((r, n, redact(ex)) for r, n, ex in ev.skip_reasons),
        )
    run = clean_run(ev.run)
    if isinstance(ev, ScalarBatch):
        columns = ev.columns
        if any(_name(k) != k for k in columns):
            columns = {_name(k): v for k, v in columns.items()}
        if run is ev.run and columns is ev.columns:
            return ev
        return dataclasses.replace(ev, run=run, columns=columns)
    if isinstance(ev, LogLines):
        return dataclasses.replace(ev, run=run, lines=tuple(redact_lines(ev.lines)))
    if isinstance(ev, RunMeta):
        return dataclasses.replace(ev, run=run, meta=clean_value(dict(ev.meta)))
    if isinstance(ev, Marker):
        return dataclasses.replace(ev, run=run, kind=_name(ev.kind),
                                   detail=clean_value(dict(ev.detail)))
    if isinstance(ev, JobStatus):
        return dataclasses.replace(ev, run=run, message=redact(ev.message),
                                   flavor=_name(ev.flavor), url=redact(ev.url))
    if run is ev.run:
        return ev
    return dataclasses.replace(ev, run=run)
