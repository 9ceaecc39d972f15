"""A fake of the Hugging Face Hub's Jobs HTTP API, for huggingface_hub to talk to.

Routes (as huggingface_hub 2.4 calls them):

    GET  /api/whoami-v2                      the user (optional, see install_jobs_routes)
    GET  /api/jobs/{ns}                      list jobs (one page, filter by ?stage=)
    GET  /api/jobs/{ns}/{id}                 inspect
    GET  /api/jobs/{ns}/{id}/logs            SSE: `data: {"data": line, "timestamp": iso}`,
                                             replayed from the start on every connection,
                                             then followed until the job ends
    GET  /api/jobs/{ns}/{id}/metrics         SSE: `event: metric` / `data: {...}` samples;
                                             406 once the job has finished
    POST /api/jobs/{ns}/{id}/cancel          cancel

A `JobsState` drives it: tests add jobs, move them between stages, append
log lines and metric samples, and inject faults (`fail_next`, `drop_logs_after`,
`fail_after_drop`).
Every route checks `Authorization: Bearer <state.token>`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from tests.fakes.server import FakeServer, Request, Response

TERMINAL = ("COMPLETED", "CANCELED", "ERROR", "DELETED")


def iso(t: float | None = None) -> str:
    dt = datetime.fromtimestamp(time.time() if t is None else t, tz=timezone.utc)
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class FakeJob:
    id: str
    namespace: str
    stage: str = "SCHEDULING"
    message: str | None = None
    flavor: str = "cpu-basic"
    docker_image: str | None = "python:3.12"
    command: list[str] = field(default_factory=lambda: ["python", "train.py"])
    labels: dict[str, str] | None = None
    created_at: float = field(default_factory=time.time)
    started_at: float | None = None
    finished_at: float | None = None
    log: list[tuple[str, str]] = field(default_factory=list)  # (line, iso timestamp)
    metrics: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self, owner: str) -> dict[str, Any]:
        d: dict[str, Any] = {
            "id": self.id,
            "createdAt": iso(self.created_at),
            "dockerImage": self.docker_image,
            "command": self.command,
            "arguments": [],
            "environment": {},
            "secrets": {},
            "flavor": self.flavor,
            "labels": self.labels,
            "status": {"stage": self.stage, "message": self.message},
            "owner": {"id": "0" * 24, "name": owner, "type": "user"},
        }
        if self.started_at:
            d["startedAt"] = iso(self.started_at)
        if self.finished_at:
            d["finishedAt"] = iso(self.finished_at)
        end = self.finished_at or time.time()
        d["durations"] = {"totalSecs": int(end - self.created_at)}
        return d


@dataclass
class Fault:
    status: int
    body: bytes = b'{"error": "fault"}'
    times: int = 1


class JobsState:
    """Scriptable state behind the fake. Thread-safe; streams wake on every change."""

    def __init__(self, user: str = "alice", token: str = "hf_dummy"):
        self.user = user
        self.token = token
        self.jobs: dict[str, FakeJob] = {}
        self.cond = threading.Condition()
        self.faults: dict[str, list[Fault]] = {}  # route name -> pending faults
        # Close the next logs stream abruptly after N events; then answer the
        # next logs request with `fail_after_drop` (an HTTP status), if set.
        self.drop_logs_after: int | None = None
        self.fail_after_drop: int | None = None
        self.log_connections = 0
        self.history: list[tuple] = []
        self.metrics_interval = 0.1
        # Seconds between keep-alives of a quiet logs stream (the real Hub: 30, so a read
        # that does not follow ends on the client's 5 s read timeout; default: quick).
        self.keepalive_s = 0.5

    # -- scripting -------------------------------------------------------

    def add_job(self, job_id: str, namespace: str | None = None, **kw: Any) -> FakeJob:
        job = FakeJob(job_id, namespace or self.user, **kw)
        with self.cond:
            self.jobs[job_id] = job
            self.cond.notify_all()
        return job

    def set_stage(self, job_id: str, stage: str, message: str | None = None) -> None:
        with self.cond:
            job = self.jobs[job_id]
            job.stage, job.message = stage, message
            if stage == "RUNNING" and job.started_at is None:
                job.started_at = time.time()
            if stage in TERMINAL and job.finished_at is None:
                job.finished_at = time.time()
            self.cond.notify_all()

    def append_log(self, job_id: str, *lines: str) -> None:
        with self.cond:
            job = self.jobs[job_id]
            job.log.extend((line, iso()) for line in lines)
            self.cond.notify_all()

    def add_metrics(self, job_id: str, *samples: dict[str, Any]) -> None:
        with self.cond:
            self.jobs[job_id].metrics.extend(samples)
            self.cond.notify_all()

    def fail_next(self, route: str, status: int, times: int = 1, body: bytes | None = None) -> None:
        """The next `times` requests to `route` ("inspect", "logs", "metrics", "list",
        "cancel", "whoami") answer `status`."""
        with self.cond:
            self.faults.setdefault(route, []).append(
                Fault(status, body if body is not None else b'{"error": "fault"}', times)
            )

    # -- helpers for the routes ------------------------------------------

    def _take_fault(self, route: str) -> Fault | None:
        with self.cond:
            pending = self.faults.get(route)
            if not pending:
                return None
            fault = pending[0]
            fault.times -= 1
            if fault.times <= 0:
                pending.pop(0)
            return fault


def _sse(obj: dict[str, Any], event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(obj)}\n\n".encode()


def install_jobs_routes(server: FakeServer, state: JobsState, *, whoami: bool = True) -> None:
    """Register the Jobs routes on `server` (leave `whoami` to another module with whoami=False)."""

    def guard(req: Request, route: str) -> Response | None:
        if req.headers.get("authorization") != f"Bearer {state.token}":
            return Response.json({"error": "Invalid credentials in Authorization header"}, 401)
        fault = state._take_fault(route)
        if fault is not None:
            return Response(fault.status, fault.body, {"Content-Type": "application/json"})
        return None

    def job_or_404(req: Request) -> FakeJob | Response:
        ns, job_id = req.match.group("ns"), req.match.group("id")  # type: ignore[union-attr]
        job = state.jobs.get(job_id)
        if job is None or job.namespace != ns:
            return Response.json({"error": f"Job {job_id} not found"}, 404)
        return job

    def do_whoami(req: Request) -> Response:
        if (r := guard(req, "whoami")) is not None:
            return r
        return Response.json({"type": "user", "name": state.user, "id": "0" * 24, "orgs": []})

    def do_list(req: Request) -> Response:
        if (r := guard(req, "list")) is not None:
            return r
        ns = req.match.group("ns")  # type: ignore[union-attr]
        stages = set(req.query.get("stage", []))
        with state.cond:
            jobs = [j for j in state.jobs.values() if j.namespace == ns]
            jobs = [j for j in jobs if not stages or j.stage in stages]
            return Response.json([j.to_json(ns) for j in jobs])

    def do_inspect(req: Request) -> Response:
        if (r := guard(req, "inspect")) is not None:
            return r
        job = job_or_404(req)
        if isinstance(job, Response):
            return job
        with state.cond:
            return Response.json(job.to_json(job.namespace))

    def do_cancel(req: Request) -> Response:
        if (r := guard(req, "cancel")) is not None:
            return r
        job = job_or_404(req)
        if isinstance(job, Response):
            return job
        if job.stage not in TERMINAL:
            state.set_stage(job.id, "CANCELED")
        return Response(200, b"")

    def log_stream(job: FakeJob, drop_after: int | None) -> Iterator[bytes]:
        sent = 0
        yield _sse(
            {"data": f"===== Job started at {iso(job.started_at)} =====", "timestamp": iso()}
        )
        while True:
            with state.cond:
                while sent >= len(job.log) and job.stage not in TERMINAL:
                    if not state.cond.wait(timeout=state.keepalive_s):
                        break
                pending = job.log[sent:]
                ended = job.stage in TERMINAL
            if not pending and not ended:
                yield b": keep-alive\n\n"
                continue
            for line, ts in pending:
                if drop_after is not None and sent >= drop_after:
                    if state.fail_after_drop:
                        state.fail_next("logs", state.fail_after_drop)
                        state.fail_after_drop = None
                    raise ConnectionAbortedError("fake: stream dropped")  # no final chunk
                yield _sse({"data": line, "timestamp": ts})
                sent += 1
            if ended and sent >= len(job.log):
                return

    def do_logs(req: Request) -> Response:
        if (r := guard(req, "logs")) is not None:
            return r
        job = job_or_404(req)
        if isinstance(job, Response):
            return job
        with state.cond:
            state.log_connections += 1
            state.history.append(("logs", time.time(), job.stage, len(job.log)))
            drop_after, state.drop_logs_after = state.drop_logs_after, None
        return Response(
            200, stream=log_stream(job, drop_after), headers={"Content-Type": "text/event-stream"}
        )

    def metrics_stream(job: FakeJob) -> Iterator[bytes]:
        sent = 0
        while True:
            with state.cond:
                samples = job.metrics[sent:]
                ended = job.stage in TERMINAL
            for sample in samples:
                yield _sse(sample, event="metric")
                sent += 1
            if ended:
                return
            time.sleep(state.metrics_interval)
            if not samples:
                yield b": keep-alive\n\n"

    def do_metrics(req: Request) -> Response:
        if (r := guard(req, "metrics")) is not None:
            return r
        job = job_or_404(req)
        if isinstance(job, Response):
            return job
        if job.stage in TERMINAL:
            return Response.json({"error": "Job has finished"}, 406)
        return Response(
            200, stream=metrics_stream(job), headers={"Content-Type": "text/event-stream"}
        )

    ns_id = r"/api/jobs/(?P<ns>[^/]+)/(?P<id>[^/]+)"
    if whoami:
        server.route("GET", r"/api/whoami-v2", do_whoami)
    server.route("GET", r"/api/jobs/(?P<ns>(?!hardware$)[^/]+)", do_list)
    server.route("GET", ns_id + r"/logs", do_logs)
    server.route("GET", ns_id + r"/metrics", do_metrics)
    server.route("POST", ns_id + r"/cancel", do_cancel)
    server.route("GET", ns_id, do_inspect)
