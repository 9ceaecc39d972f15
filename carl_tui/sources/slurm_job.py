"""Follow Slurm batch jobs: one job (`carl-tui --slurm-job ID`), or every job of a user,
one run each (`carl-tui fleet --slurm [--user U]`).

A job's state comes from Slurm through the engine (`engines/slurm.py`: `scontrol show
job`, `squeue`), told once each time it changes (`JobNews`: the row's state, a pending
job's reason in its message, the run's life). Its log is the job's `StdOut` file, read
as it grows through the Trainer-log file source (`TrainerLogSource`: byte-offset
tailing, the Trainer's dicts and bars, steps recovered as for any Trainer log). Once
Slurm says the job ended and its log has been read to the end, what the parser holds is
released and the source is finished: a COMPLETED job's run is finished, a FAILED,
TIMEOUT or CANCELLED one's failed, Slurm's word in its reason. While the controller does
not answer (restarted, busy), the log is still read; the failure is said when nothing
came.
"""

from __future__ import annotations

import time

from carl_tui.engines.slurm import SlurmEngine
from carl_tui.engines.slurm_records import SlurmRecord
from carl_tui.errors import CarlError
from carl_tui.events import Event, Job, RunRef
from carl_tui.identity import slurm_run
from carl_tui.sources.base import WAITING, PolledSource, Source, SourceError
from carl_tui.sources.job_news import JobNews
from carl_tui.sources.trainer_file import TrainerLogSource
from carl_tui.sources.trainer_log import TrainerOutput

STATUS_S = 2.0  # seconds between two questions to Slurm about a running job
LIST_INTERVAL_S = 5.0  # seconds between two `squeue` calls of the list


def _source_error(exc: CarlError) -> SourceError:
    return SourceError(str(exc), retry=exc.retry, kind=exc.kind)


class _Info:
    """What `JobNews` reads of a job besides the `Job`: its labels (Slurm has none)."""

    labels = None


class SlurmJobSource(PolledSource):
    """One batch job: its state from Slurm every `status_interval` seconds while it
    lives, its log as it grows; finished once it ended and its log is read."""

    def __init__(self, job_id: str, *, engine: SlurmEngine | None = None,
                 interval: float = 0.5, status_interval: float = STATUS_S,
                 idle_flush_s: float = 2.0):
        self.job_id = str(job_id).strip()
        self.engine = engine or SlurmEngine()
        self.name = f"slurm-job: {self.job_id}"
        self._interval = interval
        self.status_interval = status_interval
        self.idle_flush_s = idle_flush_s
        self.finished = False
        self.limitation = ""
        self.run: RunRef = slurm_run("", self.job_id)
        self.news = JobNews()
        self.job: Job | None = None  # type: ignore[assignment]  (the job as last told)
        self.record: SlurmRecord | None = None
        self.log: TrainerLogSource | None = None
        self._asked = -float("inf")  # when Slurm was last asked (monotonic)

    def __repr__(self) -> str:
        return f"SlurmJobSource({self.job_id!r})"

    @property
    def path(self):  # type: ignore[override]  (the log file, once Slurm names it)
        return self.log.path if self.log is not None else None

    def poll(self) -> list[Event]:
        events: list[Event] = []
        now = time.monotonic()
        failed: SourceError | None = None
        if self.job is None or (not self.job.ended and now - self._asked >= self.status_interval):
            try:
                events += self._status()
            except SourceError as exc:  # the controller is away: its log still grows
                if self.log is None:
                    raise
                failed = exc
            self._asked = now
        if failed is not None:
            events += self.log.poll()
            if not events:
                raise failed
            return events
        if self.log is None:
            if self.job is not None and self.job.ended:
                self.finished = True  # it ended before it wrote a log (or never ran)
            return events
        try:
            events += self.log.poll()
        except SourceError as exc:
            if exc.kind != WAITING:
                raise
            if self.job is not None and self.job.ended:
                self.finished = True  # no log was ever written
            return events
        self.behind = self.log.behind
        if self.job is not None and self.job.ended and not self.behind:
            events += self.log.drain()  # read to its end after the job's: nothing more comes
            self.finished = True
        return events

    def _status(self) -> list[Event]:
        try:
            record = self.engine.record(self.job_id)
        except CarlError as exc:
            raise _source_error(exc) from None
        self.record, job = record, record.job()
        self.job, self.run = job, job.run
        if self.log is None and record.stdout and job.stage != "SCHEDULING":
            self.log = TrainerLogSource(record.stdout, run=job.run,
                                        idle_flush_s=self.idle_flush_s)
            self.unused_input = self.log.unused_input
        return self.news.events(job, _Info(), self)

    def drain(self) -> list[Event]:
        return self.log.drain() if self.log is not None else []

    def close(self) -> None:
        if self.log is not None:
            self.log.close()


class SlurmJobsListSource(PolledSource):
    """Every job `squeue` lists of `user` (default: yours; "*": everyone's), one run
    each, one `squeue` call a poll. Live, the log of the job in view is read by its
    `companion` (a `SlurmJobSource`); headless (`read_logs`: `fleet --slurm --json`),
    each job's log is read once as it is now, and the source is finished."""

    def __init__(self, user: str | None = None, *, engine: SlurmEngine | None = None,
                 interval: float = LIST_INTERVAL_S, read_logs: bool = False):
        self.engine = engine or SlurmEngine(user)
        self.user = self.engine.user
        self._interval = interval
        self.read_logs = read_logs
        self.name = f"slurm: {'every user' if self.user == '*' else self.user}"
        self.news = JobNews()
        self._jobs: dict[str, Job] = {}  # run key -> the job as last listed
        self._streams: dict[str, SlurmJobSource] = {}  # run key -> its companion

    def __repr__(self) -> str:
        return f"SlurmJobsListSource(user={self.user!r})"

    def poll(self) -> list[Event]:
        try:
            records = self.engine.records()
        except CarlError as exc:
            raise _source_error(exc) from None
        events: list[Event] = []
        for record in records:
            job = record.job()
            self._jobs[job.run.key] = job
            events += self.news.events(job, _Info(), self)
            if self.read_logs and job.stage != "SCHEDULING":
                events += self._log_once(job)
        if self.read_logs:
            self.finished = True
        return events

    def _log_once(self, job: Job) -> list[Event]:
        """The job's log as it is now, parsed as `summary --slurm-job` parses it (its
        `StdOut` path from `scontrol`: 22.05's squeue gives the unexpanded pattern)."""
        try:
            path = self.engine.record(job.job_id).stdout
            with open(path, encoding="utf-8", errors="replace") as fh:
                lines = fh.read().splitlines()
        except (CarlError, OSError):
            return []  # no log (yet, or no more): the row says "-"
        output = TrainerOutput(job.run, self.unused_input)
        return [*output.events(lines, time.monotonic(), ended=True), *output.flush()]

    def companion(self, run_key: str) -> Source | None:
        """The job in view, followed: its log and state (the same source again when it
        comes back into view: it goes on where it stopped)."""
        job = self._jobs.get(run_key)
        if job is None or self.read_logs:
            return None
        old = self._streams.get(run_key)
        if old is not None:
            return None if old.finished else old
        new = SlurmJobSource(job.job_id, engine=self.engine)
        self._streams[run_key] = new
        return new

