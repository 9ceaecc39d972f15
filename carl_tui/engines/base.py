"""The one job interface: launch, list, status, logs, stop.

A `JobEngine` is a place jobs run: Hugging Face Jobs, this machine, a Ray cluster
(its dashboard's Jobs REST API) or a Slurm cluster (its commands). The launch form,
`j`, `s`, the guards and the job sources go through this interface only. Every engine
reports a job as an `events.Job` whose `stage` is one of the dashboard's stage words
(`events.STAGE_LIFE`: SCHEDULING, RUNNING, COMPLETED, ERROR, CANCELED), mapped from the
engine's own state, which goes in `message` with its reason (Slurm's "PENDING (Resources)",
Ray's "STOPPED"), so `Job.life` means the same for every engine.

Engines sit below the sources and the actions: they import nothing of carl-tui above
`events`, `errors` and `redact`. Secrets: a `Submission` carries secret values apart from
its plain environment; an engine passes them the way its platform keeps secrets, or
refuses them (a Ray cluster has no secrets store: it says so), and never puts them in a
command line, a URL, a script on disk or a log line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from carl_tui.events import Job


@dataclass(frozen=True)
class Submission:
    """What to run, said once for every engine. `command` is an argv list (the engine
    quotes it); `env` is plain environment; `secrets` are values the job needs but no one
    may read (tokens). `gpus`/`cpus` are the job's resource request, `time_limit_s` its
    wall-clock limit (None: the engine's default). `options` are the engine's own
    (Slurm's partition, Ray's runtime_env pip list, HF's flavor), each checked by
    `JobEngine.check`."""

    name: str
    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    secrets: Mapping[str, str] = field(default_factory=dict)
    gpus: int = 0
    cpus: int = 1
    time_limit_s: int | None = None
    working_dir: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    options: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LogChunk:
    """Text of a job's log from a position on: `text` is what is new, `offset` where
    the next read starts (bytes or lines, the engine's own unit; opaque to callers)."""

    text: str
    offset: int


@runtime_checkable
class JobEngine(Protocol):
    """A place jobs run. Every call blocks (HTTP, a subprocess): callers run it in a
    worker thread. Errors are `errors.CarlError`s whose message says what to do."""

    kind: str  # the identity source kind of its runs ("hf-job", "local", "ray-job", ...)

    def describe(self) -> str:
        """Where jobs go, for a confirmation dialog: "Ray cluster at http://127.0.0.1:8265"."""
        ...

    def check(self, submission: Submission) -> list[str]:
        """Every problem with `submission` on this engine, each a sentence; empty when
        fine. Nothing is sent."""
        ...

    def submit(self, submission: Submission) -> Job:
        """Start the job; its `Job` as the engine first reports it."""
        ...

    def jobs(self) -> list[Job]:
        """Every job the engine lists (the user's, where the engine knows users)."""
        ...

    def job(self, job_id: str) -> Job:
        """One job's state now."""
        ...

    def log(self, job_id: str, offset: int = 0) -> LogChunk:
        """The job's log from `offset` on."""
        ...

    def stop(self, job_id: str) -> Job:
        """Ask the engine to stop the job; its state after asking (it may still be
        stopping: callers poll `job` until `Job.ended`)."""
        ...
