"""Ray Jobs: a Ray cluster's dashboard, through its Jobs REST API, over plain HTTP (httpx).

No Ray install is needed on the user's side. The endpoints and field names are Ray's own
(`ray/dashboard/modules/job/job_head.py`, `common.py`, `pydantic_models.py`):

    POST /api/jobs/                  {entrypoint, submission_id, runtime_env, metadata,
                                      entrypoint_num_cpus, entrypoint_num_gpus}
                                     -> {job_id, submission_id}
    GET  /api/jobs/                  -> [JobDetails, ...] (submitted jobs and bare drivers)
    GET  /api/jobs/{id}              -> JobDetails: status, message, entrypoint, start_time
                                        and end_time (epoch ms), submission_id, job_id, ...
    GET  /api/jobs/{id}/logs         -> {logs: "<every line so far>"}
    POST /api/jobs/{id}/stop         -> {stopped: bool}

A job is keyed by its `submission_id` (`job_id` is null until the entrypoint calls
`ray.init`). Ray's states map to the dashboard's stage words: PENDING -> SCHEDULING,
RUNNING -> RUNNING, SUCCEEDED -> COMPLETED, FAILED -> ERROR, STOPPED -> CANCELED; Ray's
own word and its message go in `Job.message`. The log endpoint gives the whole text each
time: `log(id, offset)` hands on only what came after `offset` (characters).

A Ray cluster keeps no secrets: a submission with secrets is refused (see `SECRETS_REFUSED`)
rather than put into `runtime_env.env_vars`, which the dashboard shows to anyone who can
reach it.
"""

from __future__ import annotations

import os
import re
import shlex
import time
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from carl_tui.engines.base import LogChunk, Submission
from carl_tui.errors import CarlError
from carl_tui.events import Job, RunRef
from carl_tui.identity import RAY_JOB
from carl_tui.redact import redact, redact_argv

DEFAULT_ADDRESS = "http://127.0.0.1:8265"
TIMEOUT_S = 10.0
RETRIES = 3  # attempts after a dropped connection or a timeout, with backoff
MAX_GPUS = 1024

# Ray's job states -> the dashboard's stage words (`events.STAGE_LIFE`).
RAY_STAGES: Mapping[str, str] = {
    "PENDING": "SCHEDULING",
    "RUNNING": "RUNNING",
    "SUCCEEDED": "COMPLETED",
    "FAILED": "ERROR",
    "STOPPED": "CANCELED",
}
RAY_TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")

SECRETS_REFUSED = (
    "A Ray cluster has no secrets store, and runtime_env env_vars are shown by its "
    "dashboard to anyone who reaches it: give the cluster its token instead (set "
    "HF_TOKEN in the environment of `ray start` on every node, or log the nodes in with "
    "`hf auth login`), then launch without secrets."
)
_SUBMISSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
_OPTIONS = ("pip",)  # Submission.options a Ray job understands


def default_address() -> str:
    """`$RAY_ADDRESS`, else the local dashboard's address."""
    return os.environ.get("RAY_ADDRESS", "").strip() or DEFAULT_ADDRESS


def dashboard_url(address: str | None = None) -> str:
    """The dashboard's base URL for `address` (default: `default_address()`): a bare
    host:port gets http://. Raises CarlError for what is no dashboard URL (a `ray://`
    client address, `auto`) or a URL that carries credentials."""
    raw = (address if address is not None else default_address()).strip().rstrip("/")
    if not raw:
        raw = DEFAULT_ADDRESS
    if "://" not in raw:
        raw = f"http://{raw}"
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CarlError(
            f"{redact(raw)} is not a Ray dashboard address: give its HTTP URL, such as "
            f"{DEFAULT_ADDRESS} (the dashboard's port, not the `ray://` client port)",
            retry=False, kind="usage")
    if parts.username or parts.password:
        raise CarlError("The Ray address holds a user name or password: give it without "
                        "them (a URL is shown and logged; credentials do not go in one)",
                        retry=False, kind="usage")
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


def cluster_name(url: str) -> str:
    """What names a cluster in a run's identity: its dashboard's host:port."""
    return urlsplit(url).netloc or url


def ray_run(url: str, submission_id: str) -> RunRef:
    """A Ray job's run: project = the cluster (host:port), named by its submission id."""
    return RunRef(RAY_JOB, cluster_name(url), submission_id, submission_id)


def _seconds(ms: Any) -> float | None:
    return ms / 1000.0 if isinstance(ms, (int, float)) and ms > 0 else None


def job_from_details(url: str, info: Mapping[str, Any]) -> Job:
    """A Ray `JobDetails` reply -> `Job`: stage mapped, Ray's word and message kept, the
    entrypoint masked (`command`, `label`)."""
    sid = str(info.get("submission_id") or info.get("job_id") or "")
    state = str(info.get("status") or "PENDING")
    message = " ".join(str(info.get("message") or "").split())
    started = _seconds(info.get("start_time"))
    entry = str(info.get("entrypoint") or "")
    try:
        argv = tuple(shlex.split(entry))
    except ValueError:  # an unbalanced quote: shown as one piece
        argv = (entry,) if entry else ()
    command = redact_argv(argv)
    meta = info.get("metadata") if isinstance(info.get("metadata"), Mapping) else {}
    return Job(
        run=ray_run(url, sid),
        job_id=sid,
        stage=RAY_STAGES.get(state, "RUNNING"),
        namespace=cluster_name(url),
        name=str(meta.get("name") or sid),
        flavor=_resources(info),
        message=redact(f"{state}: {message}" if message else state),
        url=f"{url}/#/jobs/{quote(sid)}",
        created_at=started,
        started_at=started if state != "PENDING" else None,
        finished_at=_seconds(info.get("end_time")),
        command=command,
        label=" ".join(command),
    )


def _resources(info: Mapping[str, Any]) -> str:
    """The entrypoint's resource request, said where a flavor is ("1 GPU + 1 CPU")."""
    said = []
    for key, unit in (("entrypoint_num_gpus", "GPU"), ("entrypoint_num_cpus", "CPU")):
        n = info.get(key)
        if isinstance(n, (int, float)) and n > 0:
            said.append(f"{n:g} {unit}")
    return " + ".join(said) or "ray"


def _error_line(text: str) -> str:
    """The line of an error reply that says what happened: the dashboard answers with a
    Python traceback (its last `...Error: ...` line), else a line of text."""
    lines = [line.strip() for line in text.splitlines() if len(line.strip()) > 1]
    said = [line for line in lines if "Error: " in line]
    return (said or lines or [""])[-1]


class RayEngine:
    """Jobs on the Ray cluster whose dashboard is at `address` (`JobEngine`)."""

    kind = RAY_JOB

    def __init__(self, address: str | None = None, *, timeout: float = TIMEOUT_S,
                 retries: int = RETRIES, backoff_s: float = 0.5,
                 client: httpx.Client | None = None):
        self.url = dashboard_url(address)
        self.retries = retries
        self.backoff_s = backoff_s
        self._client = client or httpx.Client(base_url=self.url, timeout=timeout,
                                              follow_redirects=False)

    def __repr__(self) -> str:
        return f"RayEngine({self.url!r})"

    def describe(self) -> str:
        return f"Ray cluster at {self.url}"

    def close(self) -> None:
        self._client.close()

    # -- HTTP ------------------------------------------------------------------------

    def _request(self, method: str, path: str, what: str, **kw: Any) -> Any:
        """One call, retried with backoff when the connection drops or times out; its
        JSON. Every failure a CarlError saying what to do."""
        delay = self.backoff_s
        for attempt in range(self.retries + 1):
            try:
                reply = self._client.request(method, path, **kw)
                break
            except httpx.ConnectError as exc:
                if attempt < self.retries and "refused" not in str(exc).lower():
                    time.sleep(delay)
                    delay *= 2
                    continue
                raise CarlError(
                    f"{what}: no Ray dashboard at {self.url}: start one with "
                    "`ray start --head` or tunnel it: `ssh -L 8265:localhost:8265 HEAD`",
                    kind="network") from None
            except (httpx.TimeoutException, httpx.RemoteProtocolError, httpx.ReadError,
                    httpx.WriteError) as exc:
                if attempt < self.retries:
                    time.sleep(delay)
                    delay *= 2
                    continue
                raise CarlError(f"{what}: the Ray dashboard at {self.url} did not answer "
                                f"({type(exc).__name__}) after {self.retries + 1} tries",
                                kind="network") from None
        if reply.status_code == 404:
            raise CarlError(f"{what}: the Ray dashboard at {self.url} has no such job "
                            "(see `carl-tui fleet --ray`)", retry=False, kind="not_found",
                            status=404)
        if reply.status_code >= 400:
            text = redact(_error_line(reply.text))
            raise CarlError(f"{what}: the Ray dashboard at {self.url} answered "
                            f"{reply.status_code}" + (f": {text[:300]}" if text else ""),
                            retry=reply.status_code >= 500, kind="http",
                            status=reply.status_code)
        try:
            return reply.json()
        except ValueError:
            raise CarlError(f"{what}: {self.url} answered with no JSON: is it a Ray "
                            "dashboard?", retry=False, kind="http") from None

    # -- the JobEngine interface -----------------------------------------------------

    def check(self, submission: Submission) -> list[str]:
        p: list[str] = []
        if submission.secrets:
            p.append(SECRETS_REFUSED)
        if not submission.command or not any(str(a).strip() for a in submission.command):
            p.append("The job has no command to run.")
        for what, n in (("GPUs", submission.gpus), ("CPUs", submission.cpus)):
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                p.append(f"The number of {what} must be a whole number of 0 or more "
                         f"(got {n!r}).")
        if isinstance(submission.gpus, int) and submission.gpus > MAX_GPUS:
            p.append(f"{submission.gpus} GPUs for one job is more than {MAX_GPUS}: a typo?")
        if submission.name and not _SUBMISSION_ID.match(submission.name):
            p.append(f"Job name {submission.name!r} may use letters, digits, '-', '_' "
                     "and '.' only.")
        for key in submission.options:
            if key not in _OPTIONS:
                p.append(f"Ray jobs take no option {key!r} (known: {', '.join(_OPTIONS)}).")
        for key in submission.env:
            if key.upper() in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "ANTHROPIC_API_KEY"):
                p.append(f"{key} is a secret, not plain environment. {SECRETS_REFUSED}")
        return p

    def payload(self, submission: Submission) -> dict[str, Any]:
        """The body of POST /api/jobs/ for `submission` (checked first by `submit`)."""
        entry = shlex.join(str(a) for a in submission.command)
        runtime_env: dict[str, Any] = {}
        if submission.env:
            runtime_env["env_vars"] = dict(submission.env)
        if submission.options.get("pip"):
            runtime_env["pip"] = [s.strip() for s in submission.options["pip"].split(",")
                                  if s.strip()]
        if submission.working_dir:
            if "://" in submission.working_dir:  # a package Ray fetches (s3://, https://…zip)
                runtime_env["working_dir"] = submission.working_dir
            else:  # a folder on the cluster's nodes
                entry = f"cd {shlex.quote(submission.working_dir)} && {entry}"
        stamp = uuid.uuid4().hex[:8]
        body: dict[str, Any] = {
            "entrypoint": entry,
            "submission_id": f"{submission.name or 'carl'}-{stamp}",
            "metadata": {"name": submission.name, "app": "carl-tui",
                         **{str(k): str(v) for k, v in submission.labels.items()}},
        }
        if runtime_env:
            body["runtime_env"] = runtime_env
        if submission.cpus:
            body["entrypoint_num_cpus"] = submission.cpus
        if submission.gpus:
            body["entrypoint_num_gpus"] = submission.gpus
        return body

    def submit(self, submission: Submission) -> Job:
        problems = self.check(submission)
        if problems:
            raise CarlError("Cannot launch on Ray:\n- " + "\n- ".join(problems),
                            retry=False, kind="invalid")
        body = self.payload(submission)
        try:
            reply = self._request("POST", "/api/jobs/", "Submitting the job", json=body)
        except CarlError as exc:  # a retried submit that had gone through: the same job
            if exc.status not in (400, 500) or "already exists" not in str(exc):
                raise
            reply = {}
        sid = str((reply or {}).get("submission_id") or body["submission_id"])
        try:
            return self.job(sid)
        except CarlError:  # submitted: its first state is PENDING until read again
            return job_from_details(self.url, {**body, "submission_id": sid,
                                               "status": "PENDING",
                                               "start_time": int(time.time() * 1000)})

    def jobs(self) -> list[Job]:
        """The cluster's submitted jobs, newest first (bare `ray.init` drivers have no
        submission id and no log here: left out)."""
        reply = self._request("GET", "/api/jobs/", "Listing the Ray jobs")
        rows = reply.values() if isinstance(reply, dict) else reply  # old Rays: a dict
        jobs = [job_from_details(self.url, r) for r in rows or []
                if isinstance(r, Mapping) and r.get("submission_id")]
        return sorted(jobs, key=lambda j: j.created_at or 0.0, reverse=True)

    def job(self, job_id: str) -> Job:
        reply = self._request("GET", f"/api/jobs/{quote(job_id, safe='')}",
                              f"Reading Ray job {job_id}")
        return job_from_details(self.url, reply)

    def log(self, job_id: str, offset: int = 0) -> LogChunk:
        reply = self._request("GET", f"/api/jobs/{quote(job_id, safe='')}/logs",
                              f"Reading the log of Ray job {job_id}")
        text = str((reply or {}).get("logs") or "")
        if len(text) < offset:  # the log started over (a new driver): all of it again
            offset = 0
        return LogChunk(text[offset:], len(text))

    def stop(self, job_id: str) -> Job:
        self._request("POST", f"/api/jobs/{quote(job_id, safe='')}/stop",
                      f"Stopping Ray job {job_id}")
        return self.job(job_id)
