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

`EngineJobsListSource` lists the engine's jobs, one call a poll, and reads the new text
of their logs itself (the same `JobLog` and parser), at most LOG_READERS a poll, so every
row has its steps, phase and task metric; headless (`fleet --json`), each started job's
log is read once, through the same parser as `summary`.
"""

from __future__ import annotations

import time

from carl_tui.engines.base import JobEngine, LogChunk
from carl_tui.errors import CarlError
from carl_tui.events import Event, Job, RunRef
from carl_tui.identity import SLURM_JOB
from carl_tui.sources.base import PolledSource, SourceError
from carl_tui.sources.job_news import JobNews
from carl_tui.sources.trainer_log import TrainerOutput
from carl_tui.sources.unused_input import UnusedInput

STATUS_INTERVAL_S = 1.0
LIST_INTERVAL_S = 2.0
LOG_READERS = 16  # jobs whose log the list reads a poll (running ones first)


def _source_error(exc: CarlError) -> SourceError:
    return SourceError(str(exc), retry=exc.retry)


class JobLog:
    """One job's log as events, read piece by piece: where the next read starts, the end
    of the last read that is not yet a whole line, and the Trainer-log parser."""

    def __init__(self, run: RunRef, unused: UnusedInput, logging_steps: int = 1):
        self.offset = 0  # where the next log read starts (the engine's unit)
        self.partial = ""
        self.done = False  # read to its end after the job ended
        self.output = TrainerOutput(run, unused, logging_steps=logging_steps)

    def feed(self, chunk: LogChunk, ended: bool) -> list[Event]:
        """The events of a new piece; `ended`: it was read after the job ended, so it is
        the last (the cut line is kept, what the parser holds is released)."""
        self.offset = chunk.offset
        lines = (self.partial + chunk.text).split("\n")
        self.partial = lines.pop()
        if ended:
            if self.partial:
                lines.append(self.partial)
                self.partial = ""
            self.done = True
        events = self.output.events(lines, time.monotonic(), ended=ended)
        return [*events, *self.output.flush()] if ended else events

    def drain(self) -> list[Event]:
        """The line cut short and what the parser holds (a reader stops here)."""
        lines = [self.partial] if self.partial else []
        self.partial = ""
        return [*self.output.events(lines, time.monotonic(), ended=True),
                *self.output.flush()]


class EngineJobSource(PolledSource):
    """One job of `engine`: its state and its log, read incrementally."""

    def __init__(self, engine: JobEngine, job_id: str, *, run: RunRef | None = None,
                 interval: float = STATUS_INTERVAL_S, logging_steps: int = 1):
        self.engine = engine
        self.job_id = job_id
        self._interval = interval
        self.name = f"{engine.kind}: {job_id}"
        self.finished = False
        self.news = JobNews()
        self.state: Job | None = None
        self.log = JobLog(run or RunRef(engine.kind, "", job_id, job_id), self.unused_input,
                          logging_steps)

    def __repr__(self) -> str:
        return f"EngineJobSource({self.engine!r}, {self.job_id!r})"

    @property
    def run(self) -> RunRef:
        return self.log.output.run

    def poll(self) -> list[Event]:
        if self.finished:
            return []
        try:  # the state first: a log read after the end holds every line
            job = self.engine.job(self.job_id)
            chunk = self.engine.log(self.job_id, self.log.offset)
        except CarlError as exc:
            raise _source_error(exc) from None
        self.state = job
        self.log.output.run = job.run
        events: list[Event] = list(self.news.events(job, None, self))
        events.extend(self.log.feed(chunk, ended=job.ended))
        self.finished = self.log.done
        return events

    def drain(self) -> list[Event]:
        return self.log.drain()


class EngineJobsListSource(PolledSource):
    """Every job `engine` lists, one run each: one list call a poll, then the new text of
    the logs of at most LOG_READERS jobs that have started and not been read to their end
    (running ones first), so each row has its steps, phase and task metric. Headless
    (`read_logs`: `fleet --json`): listed once, each log read as it is, then finished."""

    def __init__(self, engine: JobEngine, *, interval: float = LIST_INTERVAL_S,
                 read_logs: bool = False, log_readers: int = LOG_READERS):
        self.engine = engine
        self._interval = interval
        self.read_logs = read_logs
        self.log_readers = log_readers
        self.name = f"{engine.kind}s: {engine.describe()}"
        self.finished = False
        self.list_calls = 0
        self.news = JobNews()
        self.jobs: dict[str, Job] = {}  # run key -> the job as last listed
        self.logs: dict[str, JobLog] = {}  # job id -> its log, read so far
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
        reading = [j for j in listed if j.started_at is not None
                   and not (j.job_id in self.logs and self.logs[j.job_id].done)]
        reading.sort(key=lambda j: j.ended)  # running ones first
        for job in reading[:self.log_readers]:
            events.extend(self._read(job))
        if self.read_logs:
            for log in self.logs.values():
                events.extend(log.drain())
            self.finished = True  # headless: listed once, each log read once
        return events

    def _read(self, job: Job) -> list[Event]:
        log = self.logs.get(job.job_id)
        if log is None:
            log = self.logs[job.job_id] = JobLog(job.run, self.unused_input)
        try:
            chunk = self.engine.log(job.job_id, log.offset)
        except CarlError as exc:
            self.log_errors[job.job_id] = str(exc)
            return []
        self.log_errors.pop(job.job_id, None)
        return log.feed(chunk, ended=job.ended)


def follow_job(engine: JobEngine, job: Job) -> PolledSource:
    """The source that follows `job` of `engine`: a Slurm job's reads its `StdOut` file as
    it grows (`SlurmJobSource`), any other job's its engine's log (`EngineJobSource`)."""
    if job.run.source == SLURM_JOB:
        from carl_tui.sources.slurm_job import SlurmJobSource  # lazy: it imports this module

        return SlurmJobSource(job.job_id, engine=engine)  # type: ignore[arg-type]
    return EngineJobSource(engine, job.job_id, run=job.run)
