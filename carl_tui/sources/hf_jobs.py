"""Follow a Hugging Face Job: status, log lines, Trainer metrics, resource usage.

Everything goes through huggingface_hub (`inspect_job`, `fetch_job_logs`,
`fetch_job_metrics`, `list_jobs`). Following logs and metrics are blocking
generators, so each runs in its own daemon thread that pushes into a queue,
and a third thread refreshes the job's status every few seconds. `poll()`
only drains the queue: it never blocks on the network.

On reconnect the Hub replays the log from its first line. The log thread
counts the lines it has already delivered and skips that many of the
replay, so every line arrives once, in order.

Log lines become `LogLines` (raw, as printed), `ScalarBatch` (the Trainer's
dict lines, see `trainer_log`), `Progress` (tqdm bars) and, for the
end-of-training summary, `RunMeta`. The job's state becomes a `Job` each time it
changes. Each metrics sample becomes a `SystemSample` (per GPU, for the system panel;
the job bar's totals are read from it, `store/system.py`).
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from carl_tui.events import (
    Event,
    GpuSample,
    RunRef,
    SystemSample,
)
from carl_tui.hub import (
    TERMINAL_STAGES,
    HubToken,
    find_token,
    hub_error,
    job_of,
    make_api,
    stage_text,
    whoami,
)
from carl_tui.identity import HF_JOB, job_run
from carl_tui.metric_names import valid_number
from carl_tui.sources.base import Backoff, PolledSource, SourceError
from carl_tui.sources.job_news import JobNews
from carl_tui.sources.trainer_log import TrainerLogParser, TrainerOutput
from carl_tui.sources.unused_input import UnusedInput

log = logging.getLogger(__name__)

SOURCE = HF_JOB
MAX_GPUS = 64  # GPU ids numbered per job; more are ignored (a sample is one machine)


class HfJobSource(PolledSource):
    """Poll a Hugging Face Job. Threads start on the first `poll()`."""

    threaded = True  # the log, the status and the metrics arrive from threads

    def __init__(
        self,
        job_id: str,
        *,
        namespace: str | None = None,
        token: str | HubToken | None = None,
        api: Any = None,
        interval: float = 0.5,
        status_interval: float = 3.0,
        logging_steps: int = 1,
        max_lines_per_poll: int = 5_000,
    ):
        self.job_id = job_id
        self.namespace = namespace
        self._token = find_token(token) if api is None else None
        self.api = api or make_api(self._token)
        self._interval = interval
        self.behind = False  # more lines are queued than one poll hands out
        self.status_interval = status_interval
        self.max_lines_per_poll = max_lines_per_poll
        self.name = f"hf-job: {job_id}"
        self.finished = False
        self.unused_input = UnusedInput()  # values left out, dict lines that could not be read
        self.limitation = ""
        # The job's log as events (its run follows `run`, set again once the namespace is known).
        self.output = TrainerOutput(job_run(namespace or "", job_id), self.unused_input,
                                    logging_steps=logging_steps)
        self.lines_seen = 0  # lines delivered by the log thread (resume position)
        self.lines_parsed = 0  # lines handed to the parser (where `resume` goes on)
        self.reconnects = 0
        self.replayed_lines_skipped = 0  # lines of a replay already delivered before
        self._q: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._ns_ready = threading.Event()
        self._errors: dict[str, tuple[str, bool]] = {}  # channel -> (message, retry)
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._stage: str | None = None
        self.news = JobNews()  # the job's status as events, each told once
        self._logs_done = False
        self._gpu_index: dict[str, int] = {}  # the Jobs API's GPU id -> index, first seen first

    def __repr__(self) -> str:
        return f"HfJobSource(job_id={self.job_id!r}, namespace={self.namespace!r})"

    @property
    def run(self) -> RunRef:
        return self.output.run

    @run.setter
    def run(self, run: RunRef) -> None:
        self.output.run = run

    @property
    def parser(self) -> TrainerLogParser:
        return self.output.parser

    # -- the source contract (sources.base.Source) ------------------------


    def poll(self) -> list[Event]:
        if not self._threads:
            self._start_threads()
        lines: list[str] = []
        usage: list[SystemSample] = []
        events: list[Event] = []
        budget = self.max_lines_per_poll
        while budget > 0:
            try:
                kind, item = self._q.get_nowait()
            except queue.Empty:
                break
            if kind == "line":
                lines.append(item)
                budget -= 1
            elif kind == "status":
                events.extend(self._status_events(item))
            elif kind == "system":
                usage.append(item)
            elif kind == "logs_done":
                self._logs_done = True
        self.behind = budget <= 0
        events.extend(self._line_events(lines))  # also flushes held dicts when idle or done
        self.lines_parsed += len(lines)
        events.extend(usage)
        if self._logs_done and self._stage in TERMINAL_STAGES and self._q.empty():
            self.finished = True
        if not events and not self.finished:
            with self._lock:
                errors = list(self._errors.values())
            if errors:
                message, retry = errors[0]
                raise SourceError(message, retry=retry)
        return events

    def drain(self) -> list[Event]:
        """Release the dicts held back for a bar (the reader stops here: summary, export)."""
        return self.output.flush()

    def close(self) -> None:
        self._stop.set()
        self._ns_ready.set()

    def resume(self) -> HfJobSource:
        """A new source for this (closed) one's job that goes on where it stopped: the same
        parser, and the log's lines it parsed are skipped (the Hub replays a log from its
        start), so no line reaches the store twice; lines it had queued but not parsed
        are read again."""
        new = HfJobSource(self.job_id, namespace=self.namespace, api=self.api,
                          interval=self._interval, status_interval=self.status_interval,
                          max_lines_per_poll=self.max_lines_per_poll)
        new._token, new.output, new.unused_input = self._token, self.output, self.unused_input
        new.lines_seen = new.lines_parsed = self.lines_parsed
        new.news = self.news
        return new

    # -- events ------------------------------------------------------------

    def _status_events(self, info: Any) -> list[Event]:
        job = job_of(info, self.namespace or "", self.run, job_id=self.job_id)
        self._stage = job.stage  # the stage's name, whether a str or an Enum came
        return self.news.events(job, info, self)

    def _line_events(self, lines: list[str]) -> list[Event]:
        """Events of new log lines; what the parser holds back for a bar is released
        once the log has ended or has been idle (see `TrainerOutput`)."""
        return self.output.events(lines, time.monotonic(), ended=self._logs_done)

    # -- threads -------------------------------------------------------------

    def _start_threads(self) -> None:
        for target, label in (
            (self._status_loop, "status"),
            (self._logs_loop, "logs"),
            (self._metrics_loop, "metrics"),
        ):
            t = threading.Thread(target=target, name=f"hf-job:{label}:{self.job_id}", daemon=True)
            t.start()
            self._threads.append(t)

    def _fail(self, channel: str, exc: BaseException) -> bool:
        """Record a failure; returns whether retrying can help."""
        err = hub_error(exc, f"Reading job {self.job_id}", namespace=self.namespace or "",
                        token=self._token)
        message, retry = str(err), err.retry
        with self._lock:
            self._errors[channel] = (message, retry)
        log.debug("hf job %s: %s failed: %s", self.job_id, channel, message)
        return retry

    def _ok(self, channel: str) -> None:
        if channel in self._errors:
            with self._lock:
                self._errors.pop(channel, None)

    def _call(self, fn: Callable[..., Any], **kw: Any) -> Any:
        return fn(job_id=self.job_id, namespace=self.namespace, **kw)

    def _status_loop(self) -> None:
        backoff = Backoff(base=1.0, cap=30.0)
        while not self._stop.is_set():
            try:
                if self.namespace is None:
                    self.namespace = whoami(self.api)
                    self.run = job_run(self.namespace, self.job_id)
                self._ns_ready.set()
                info = self._call(self.api.inspect_job)
            except Exception as exc:  # noqa: BLE001 - reported in the status bar
                retry = self._fail("status", exc)
                self._stop.wait(backoff.next_delay() if retry else 30.0)
                continue
            backoff.reset()
            self._ok("status")
            self._stage = stage_text(info.status.stage)
            self._q.put(("status", info))
            if self._stage in TERMINAL_STAGES:
                return
            self._stop.wait(self.status_interval)

    def _logs_loop(self) -> None:
        self._ns_ready.wait()
        backoff = Backoff(base=1.0, cap=30.0)
        while not self._stop.is_set():
            try:
                index = 0
                stream: Iterable[str] = self._call(self.api.fetch_job_logs, follow=True)
                for line in stream:
                    if self._stop.is_set():
                        return
                    index += 1
                    self._ok("logs")
                    if index <= self.lines_seen:
                        self.replayed_lines_skipped += 1
                        continue  # replayed from the start after a reconnect
                    self.lines_seen = index
                    self._q.put(("line", line))
                backoff.reset()
                self._ok("logs")
                if self._job_finished():
                    self._q.put(("logs_done", None))
                    return
                delay = 1.0  # the stream ended early: reconnect
            except Exception as exc:  # noqa: BLE001 - reported in the status bar
                retry = self._fail("logs", exc)
                if not retry and self._stage in TERMINAL_STAGES:
                    self._q.put(("logs_done", None))  # e.g. a deleted job's log is gone
                    return
                delay = backoff.next_delay() if retry else 30.0
            self.reconnects += 1
            self._stop.wait(delay)

    def _job_finished(self) -> bool:
        try:
            info = self._call(self.api.inspect_job)
        except Exception:  # noqa: BLE001 - the status thread reports it
            return False
        self._q.put(("status", info))
        return str(info.status.stage) in TERMINAL_STAGES

    def _metrics_loop(self) -> None:
        fetch = getattr(self.api, "fetch_job_metrics", None)
        if fetch is None:  # older huggingface_hub
            self.limitation = "no job metrics in this huggingface_hub"
            return
        self._ns_ready.wait()
        backoff = Backoff(base=1.0, cap=30.0)
        while not self._stop.is_set():
            if self._stage in TERMINAL_STAGES:
                return
            if self._stage != "RUNNING":
                self._stop.wait(0.5)
                continue
            try:
                for sample in self._call(fetch, follow=True):
                    if self._stop.is_set():
                        return
                    system = system_from_sample(self.run, sample, self._gpu_index, time.time())
                    if system is not None:
                        self._q.put(("system", system))
                backoff.reset()
                delay = 1.0
            except Exception as exc:  # noqa: BLE001 - usage is optional: log, retry quietly
                log.debug("hf job %s: metrics failed: %s", self.job_id, hub_error(exc))
                delay = backoff.next_delay()
            self._stop.wait(delay)


def _num(x: Any) -> float | None:
    v = valid_number(x)
    return v if v is not None and math.isfinite(v) else None


def _mib(x: Any) -> float | None:
    v = _num(x)
    return v / 2**20 if v is not None else None


def system_from_sample(
    run: RunRef,
    sample: Any,
    gpu_index: dict[str, int] | None = None,
    wall_time: float | None = None,
) -> SystemSample | None:
    """A Jobs metrics sample -> SystemSample: one GpuSample per entry of its `gpus` dict
    (utilization %, memory in MiB; the API reports no power or temperature), CPU %
    and RAM. The API names GPUs by an id: `gpu_index` (kept by the caller across
    samples) numbers them in the order first seen, so a GPU keeps its index.
    None for a sample that is not a dict or holds none of these."""
    if not isinstance(sample, dict):
        return None
    index = gpu_index if gpu_index is not None else {}
    gpus = sample.get("gpus") if isinstance(sample.get("gpus"), dict) else {}
    out: list[GpuSample] = []
    for gid, g in gpus.items():
        if not isinstance(g, dict) or (str(gid) not in index and len(index) >= MAX_GPUS):
            continue
        i = index.setdefault(str(gid), len(index))
        out.append(GpuSample(
            index=i,
            utilization=_num(g.get("utilization")),
            memory_used_mb=_mib(g.get("memory_used_bytes")),
            memory_total_mb=_mib(g.get("memory_total_bytes")),
        ))
    cpu = _num(sample.get("cpu_usage_pct"))
    used, total = _mib(sample.get("memory_used_bytes")), _mib(sample.get("memory_total_bytes"))
    if not out and cpu is None and used is None and total is None:
        return None
    return SystemSample(
        run=run,
        step=None,
        wall_time=wall_time,
        gpus=tuple(sorted(out, key=lambda g: g.index)),
        cpu_percent=cpu,
        memory_mb=used,
        memory_total_mb=total,
    )
