"""Every Hugging Face job of a namespace, one run each (`carl-tui fleet --jobs`).

One poll is one `list_jobs` call, whatever the number of jobs: it gives each job's
stage, flavor, times and command, which become a `Job` event (the row's state, flavor
and cost so far), the job's meta once (its command with secrets masked, for the run
card) and its life. No job's log is read by polling the list:

- live (the fleet table, the dashboard): the log of the run in view only is streamed,
  by the `HfJobSource` this source gives as its `companion` for that run (the follower
  asks when the run in view changes, and closes the previous one's). A job brought back
  into view goes on where its stream stopped (`HfJobSource.resume`): nothing is read
  twice into the store.
- `read_logs` (headless `fleet --jobs --json`): each job that has started has its log
  read once (`fetch_job_logs(follow=False)`), at most LOG_READERS at a time (the running
  ones first: their reads wait for quiet while the ended ones' go on), through the same
  parser as `summary --job` (the same steps, phase and numbers). A running job's read
  ends when its stream does, or when nothing more came for `quiet_s` (what it has
  logged so far has come). The reading stops at the command's `--timeout` with what
  came. A job with no log yet has no steps: its row says "-", not an error.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from carl_tui.events import Event, Job
from carl_tui.hub import find_token, hub_error, job_of, make_api, whoami
from carl_tui.identity import job_run
from carl_tui.sources.base import PolledSource, Source, SourceError
from carl_tui.sources.job_news import JobNews
from carl_tui.sources.trainer_log import TrainerOutput

LIST_INTERVAL_S = 5.0  # seconds between two list calls (one call a poll)
LOG_READERS = 16  # jobs whose log is read at once (headless)
QUIET_S = 2.0  # a running job's log read once: done when quiet this long (collect's settle)


class LogRead:
    """One job's log, read once in a daemon thread (`fetch_job_logs(follow=False)`)."""

    def __init__(self, fetch: Callable[[], Any], running: bool, clock=time.monotonic):
        self.lines: list[str] = []
        self.error: BaseException | None = None
        self.running = running
        self.clock = clock
        self.started = self.last_line = clock()
        self.ended = False  # the stream ended (or failed)
        self.taken = False  # its lines were handed on: later ones are ignored
        self._lock = threading.Lock()
        threading.Thread(target=self._read, args=(fetch,), daemon=True,
                         name="hf-jobs:log-once").start()

    def _read(self, fetch: Callable[[], Any]) -> None:
        try:
            for line in fetch():
                with self._lock:
                    if self.taken:
                        return
                    self.lines.append(line)
                    self.last_line = self.clock()
        except Exception as exc:  # noqa: BLE001 - said as the job's, not the list's, failure
            self.error = exc
        finally:
            self.ended = True

    def done(self, quiet_s: float) -> bool:
        return self.ended or (self.running and self.clock() - self.last_line >= quiet_s)

    def take(self) -> list[str]:
        with self._lock:
            self.taken = True
            return list(self.lines)


class HfJobsListSource(PolledSource):
    """Your (or `namespace`'s) Hugging Face jobs, one run each, one list call a poll."""

    threaded = True  # headless: the logs arrive from reader threads

    def __init__(self, namespace: str | None = None, *, token: Any = None, api: Any = None,
                 interval: float = LIST_INTERVAL_S, read_logs: bool = False,
                 log_readers: int = LOG_READERS, quiet_s: float = QUIET_S):
        self.namespace = namespace
        self._token = find_token(token) if api is None else None
        self.api = api or make_api(self._token)
        self._interval = interval
        self.read_logs = read_logs
        self.log_readers = log_readers
        self.quiet_s = quiet_s
        self.name = f"hf-jobs: {namespace or 'your jobs'}"
        self.list_calls = 0  # list requests made
        self._listed = False  # a list call succeeded
        self.news = JobNews()  # each job's status as events, each told once
        self._jobs: dict[str, Job] = {}  # run key -> the job, as last listed
        self._waiting: list[Job] = []  # headless: started jobs whose log is not read yet
        self._reads: dict[str, tuple[Job, LogRead]] = {}  # job id -> its read under way
        self._streams: dict[str, Source] = {}  # run key -> the companion made for it
        self.log_errors: dict[str, str] = {}  # job id -> why its log could not be read

    def __repr__(self) -> str:
        return f"HfJobsListSource(namespace={self.namespace!r})"

    # -- the source contract ----------------------------------------------------------

    def poll(self) -> list[Event]:
        if self.read_logs and self._listed:  # headless: listed once, then the logs
            events = self._take_reads()
            self.behind = bool(self._waiting or self._reads)
            self.finished = not self.behind
            return events
        events = self._list()
        if self.read_logs:
            self._start_reads()
            self.behind = bool(self._waiting or self._reads)
            self.finished = not self.behind
        return events

    def drain(self) -> list[Event]:
        """The reader stops here (`--timeout`): what the unfinished log reads hold."""
        events: list[Event] = []
        for job, read in self._reads.values():
            events.extend(self._parsed(job, read))
        self._reads.clear()
        self._waiting.clear()
        return events

    def companion(self, run_key: str) -> Source | None:
        """The stream of the job in view (its log, state and usage), where it is one of
        these jobs and reading it can bring more; made again from where it stopped."""
        job = self._jobs.get(run_key)
        if job is None or self.read_logs:
            return None
        old = self._streams.get(run_key)
        if old is not None and old.finished:
            return None  # read to its end already: the store holds it
        # lazy: a job's log reader loads only once a job is opened
        from carl_tui.sources.hf_jobs import HfJobSource

        new = (old.resume() if isinstance(old, HfJobSource)
               else HfJobSource(job.job_id, namespace=job.namespace, api=self.api))
        self._streams[run_key] = new
        return new

    # -- listing ----------------------------------------------------------------------

    def _list(self) -> list[Event]:
        try:
            if self.namespace is None:
                self.namespace = whoami(self.api)
            self.list_calls += 1
            infos = list(self.api.list_jobs(namespace=self.namespace))
        except Exception as exc:  # noqa: BLE001 - any Hub failure: one readable message
            err = hub_error(exc, "Listing your jobs", namespace=self.namespace or "",
                            token=self._token)
            raise SourceError(str(err), retry=err.retry) from None
        self._listed = True
        events: list[Event] = []
        for info in infos:
            events.extend(self._job_events(info))
        return events

    def _job_events(self, info: Any) -> list[Event]:
        job = job_of(info, self.namespace or "")
        self._jobs[job.run.key] = job
        if self.read_logs and not self.news.seen(job.job_id) and job.started_at is not None:
            # its log is read once, running ones first
            self._waiting.insert(0 if job.life == "live" else len(self._waiting), job)
        return self.news.events(job, info, self)

    # -- reading each job's log once (headless) -----------------------------------------

    def _start_reads(self) -> None:
        while self._waiting and len(self._reads) < self.log_readers:
            job = self._waiting.pop(0)

            def fetch(job: Job = job):
                return self.api.fetch_job_logs(job_id=job.job_id, namespace=job.namespace,
                                               follow=False)
            self._reads[job.job_id] = (job, LogRead(fetch, running=job.life == "live"))

    def _take_reads(self) -> list[Event]:
        events: list[Event] = []
        for job_id, (job, read) in list(self._reads.items()):
            if not read.done(self.quiet_s):
                continue
            del self._reads[job_id]
            events.extend(self._parsed(job, read))
        self._start_reads()
        return events

    def _parsed(self, job: Job, read: LogRead) -> list[Event]:
        """The events of a job's log as read (parsed as `summary --job` parses it)."""
        lines = read.take()
        if read.error is not None and not lines:
            self.log_errors[job.job_id] = str(hub_error(
                read.error, f"Reading job {job.job_id}", namespace=job.namespace,
                token=self._token))
        output = TrainerOutput(job_run(job.namespace, job.job_id), self.unused_input)
        return [*output.events(lines, time.monotonic(), ended=True), *output.flush()]
