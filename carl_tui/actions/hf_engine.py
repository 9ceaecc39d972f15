"""Hugging Face Jobs as a `JobEngine` (engines/base.py): submit, list, state, log, stop,
over the Hub code the rest of carl-tui uses (`hub.py`, `actions/jobs.JobsClient`).

It lives in `actions/`, not `engines/`: the layers keep `engines` and `hub` apart (neither
imports the other), and this is the one place that joins them. A `Submission`'s
`options` carry the Hub's own: `flavor` (default cpu-basic), `namespace` (default the
token's user) and `image` (default the launch form's). Its secrets go to the Hub as the
job's secrets, with the user's token as `HF_TOKEN` unless one is given; never in its
command, its environment or a message. The log's offset counts lines: the Hub replays a
job's log from its start on every read, and `log` returns the lines after `offset`.
"""

from __future__ import annotations

import time
from dataclasses import replace

from carl_tui.actions.action_error import ActionError
from carl_tui.actions.jobs import JobsClient
from carl_tui.actions.launch_spec import JOB_IMAGE, gpus_in_flavor
from carl_tui.engines.base import LogChunk, Submission
from carl_tui.events import Job
from carl_tui.hub import hub_error, job_of, list_jobs, stage_text
from carl_tui.identity import HF_JOB

DEFAULT_FLAVOR = "cpu-basic"


class HfJobsEngine:
    """Hugging Face Jobs of one namespace, through `client` (its token and endpoint)."""

    kind = HF_JOB

    def __init__(self, client: JobsClient | None = None, namespace: str = ""):
        self.client = client if client is not None else JobsClient()
        self._namespace = namespace

    def _ns(self, explicit: str = "") -> str:
        return self.client.namespace(explicit or self._namespace or None)

    def describe(self) -> str:
        ns = self._namespace or self.client._namespace
        return f"Hugging Face Jobs ({ns})" if ns else "Hugging Face Jobs"

    def check(self, submission: Submission) -> list[str]:
        problems = []
        if not submission.command:
            problems.append("the job has no command")
        flavor = submission.options.get("flavor") or DEFAULT_FLAVOR
        if submission.gpus > gpus_in_flavor(flavor):
            problems.append(f"the flavor {flavor} has {gpus_in_flavor(flavor)} GPUs, "
                            f"not the {submission.gpus} asked for: pick a bigger flavor")
        if submission.time_limit_s is not None and submission.time_limit_s <= 0:
            problems.append("the time limit must be a positive number of seconds")
        return problems

    def submit(self, submission: Submission) -> Job:
        problems = self.check(submission)
        if problems:
            raise ActionError("Cannot launch:\n- " + "\n- ".join(problems), kind="invalid")
        secrets = dict(submission.secrets)
        if "HF_TOKEN" not in secrets:
            secrets["HF_TOKEN"] = self.client._need_token("Launching the job")
        ns = self._ns(submission.options.get("namespace", ""))
        flavor = submission.options.get("flavor") or DEFAULT_FLAVOR
        try:
            info = self.client.api.run_job(
                image=submission.options.get("image") or JOB_IMAGE,
                command=list(submission.command), env=dict(submission.env), secrets=secrets,
                flavor=flavor, timeout=submission.time_limit_s, name=submission.name,
                labels=dict(submission.labels) or None, namespace=ns)
        except Exception as exc:  # noqa: BLE001  (any client failure becomes a plain message)
            raise hub_error(exc, "Launching the job", namespace=ns) from None
        job = job_of(info, ns, name=submission.name, flavor=stage_text(info.flavor or flavor))
        if info.status is None:
            job = replace(job, stage="SCHEDULING")
        return job if job.created_at is not None else replace(job, created_at=time.time())

    def jobs(self) -> list[Job]:
        return list_jobs(self._ns(), api=self.client.api)

    def job(self, job_id: str) -> Job:
        return self.client.inspect(job_id, namespace=self._ns())

    def log(self, job_id: str, offset: int = 0) -> LogChunk:
        """The lines after the first `offset` (a read of what the Hub holds now: it waits
        for the Hub's stream to go quiet, a few seconds while the job runs)."""
        ns = self._ns()
        try:
            lines = [str(line).rstrip("\n") for line in
                     self.client.api.fetch_job_logs(job_id=job_id, namespace=ns, follow=False)]
        except Exception as exc:  # noqa: BLE001  (any client failure becomes a plain message)
            raise hub_error(exc, f"Reading the log of job {job_id}", namespace=ns) from None
        offset = max(0, min(offset, len(lines)))
        return LogChunk("".join(line + "\n" for line in lines[offset:]), len(lines))

    def stop(self, job_id: str) -> Job:
        ns = self._ns()
        self.client.cancel(job_id, namespace=ns)
        return self.client.inspect(job_id, namespace=ns)
