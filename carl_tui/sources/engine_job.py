"""Follow a job of any `JobEngine` (a Ray cluster, a Slurm cluster), and list an engine's
jobs, one run each: the engine-neutral halves of `--ray-job` and `fleet --ray`.

`EngineJobSource` polls one job: its state (`engine.job`), then its log from where the
last poll stopped (`engine.log(id, offset)`: only new text), split into whole lines (a
line cut by the read waits for its end) and parsed as a Trainer's console output
(`TrainerOutput`, the parser `--watch` and `--job` use). The state is read before the
log, so once the job has ended, the log read after it holds every line: the rest is
parsed, what the parser held is released, and the source is finished. The job's stage
becomes the run's life (`JobNews`): finished, failed (a stopped job: failed, with the
engine's own word, STOPPED or CANCELLED, as its reason).

`EngineJobsListSource` lists the engine's jobs, one call a poll. Live (the fleet table,
the dashboard), the log of the run in view only is read, by the `EngineJobSource` it
gives as its `companion`; headless (`fleet --json`), each started job's log is read once,
through the same parser as `summary`.
"""

from __future__ import annotations

import time
from typing import Any

from carl_tui.engines.base import JobEngine
from carl_tui.errors import CarlError
from carl_tui.events import Event, Job, RunRef
from carl_tui.sources.base import PolledSource, Source, SourceError
from carl_tui.sources.job_news import JobNews
from carl_tui.sources.trainer_log import TrainerOutput

STATUS_INTERVAL_S = 1.0
LIST_INTERVAL_S = 5.0


def _source_error(exc: CarlError) -> SourceError:
    return SourceError(str(exc), retry=exc.retry)


class EngineJobSource(PolledSource):
    """One job of `engine`: its state and its log, read incrementally."""

    def __init__(self, engine: JobEngine, job_id: str, *, run: RunRef | None = None,
                 interval: float = STATUS_INTERVAL_S, logging_steps: int = 1):
        self.engine = engine
        self.job_id = job_id
        self._interval = interval
        self.name = f"{engine.kind}: {job_id}"
        self.finished = False
        self.offset = 0  # where the next log read starts (the engine's unit)
        self.partial = ""  # the end of the log read, not yet a whole line
        self.news = JobNews()
        self.state: Job | None = None
        self.output = TrainerOutput(run or RunRef(engine.kind, "", job_id, job_id),
                                    self.tally, logging_steps=logging_steps)

    def __repr__(self) -> str:
        return f"EngineJobSource({self.engine!r}, {self.job_id!r})"

    @property
    def run(self) -> RunRef:
        return self.output.run

    def poll(self) -> list[Event]:
        if self.finished:
            return []
        try:
            job = self.engine.job(self.job_id)
            chunk = self.engine.log(self.job_id, self.offset)
        except CarlError as exc:
            raise _source_error(exc) from None
        self.state = job
        self.output.run = job.run
        events: list[Event] = list(self.news.events(job, None, self))
        self.offset = chunk.offset
        text = self.partial + chunk.text
        lines = text.split("\n")
        self.partial = lines.pop()
        if job.ended:  # the log was read after the end: nothing more comes
            if self.partial:
                lines.append(self.partial)
                self.partial = ""
            self.finished = True
        events.extend(self.output.events(lines, time.monotonic(), ended=self.finished))
        if self.finished:
            events.extend(self.output.flush())
        return events

    def drain(self) -> list[Event]:
        """The line cut short and what the parser holds (`summary` stops here)."""
        lines = [self.partial] if self.partial else []
        self.partial = ""
        return [*self.output.events(lines, time.monotonic(), ended=True),
                *self.output.flush()]

    def resume(self) -> EngineJobSource:
        """A new source for this one's job that goes on where it stopped (the same parser,
        offset and news): nothing reaches the store twice."""
        new = EngineJobSource(self.engine, self.job_id, interval=self._interval)
        new.output, new.tally, new.news = self.output, self.tally, self.news
        new.offset, new.partial = self.offset, self.partial
        return new


class EngineJobsListSource(PolledSource):
    """Every job `engine` lists, one run each; one list call a poll."""

    def __init__(self, engine: JobEngine, *, interval: float = LIST_INTERVAL_S,
                 read_logs: bool = False):
        self.engine = engine
        self._interval = interval
        self.read_logs = read_logs
        self.name = f"{engine.kind}s: {engine.describe()}"
        self.finished = False
        self.list_calls = 0
        self.news = JobNews()
        self.jobs: dict[str, Job] = {}  # run key -> the job as last listed
        self._streams: dict[str, EngineJobSource] = {}
        self.log_errors: dict[str, str] = {}  # job id -> why its log could not be read

    def __repr__(self) -> str:
        return f"EngineJobsListSource({self.engine!r})"

    def poll(self) -> list[Event]:
        if self.finished:
            return []
        try:
            self.list_calls += 1
            listed = self.engine.jobs()
        except CarlError as exc:
            raise _source_error(exc) from None
        events: list[Event] = []
        for job in listed:
            self.jobs[job.run.key] = job
            events.extend(self.news.events(job, None, self))
            if self.read_logs and job.started_at is not None:
                events.extend(self._read_once(job))
        if self.read_logs:
            self.finished = True  # headless: listed once, each log read once
        return events

    def _read_once(self, job: Job) -> list[Event]:
        """The events of a job's log as it is now (parsed as `summary` parses it)."""
        try:
            text = self.engine.log(job.job_id, 0).text
        except CarlError as exc:
            self.log_errors[job.job_id] = str(exc)
            return []
        output = TrainerOutput(job.run, self.tally)
        return [*output.events(text.split("\n"), time.monotonic(), ended=True),
                *output.flush()]

    def companion(self, run_key: str) -> Source | None:
        """The source that reads the job in view (its state and log), made again from
        where it stopped; None once it was read to its end."""
        job: Any = self.jobs.get(run_key)
        if job is None or self.read_logs:
            return None
        old = self._streams.get(run_key)
        if old is not None and old.finished:
            return None
        new = old.resume() if old is not None else EngineJobSource(self.engine, job.job_id,
                                                                   run=job.run)
        self._streams[run_key] = new
        return new
