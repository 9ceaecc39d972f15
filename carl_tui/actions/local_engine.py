"""This machine as a `JobEngine` (engines/base.py): a job is a child process
(`actions/local_job.LocalJob`), recorded in the registry of runs started here.

`submit` starts the command in its own process group, its output in a log file beside
its stream (`options["stream"]`, else a file under the registry's folder); its secrets
reach it in its environment only (a process of this machine has no other way), never its
command line or the registry. `jobs` lists the registry (runs started here by any
dashboard, RUNNING while alive, else ENDED) with the processes this engine started or
adopted (`adopt`) as they stand. `log` reads the log file from a byte offset, whole lines
only while the job runs. `stop` interrupts (the trainer saves and exits), terminates after
`grace` seconds, kills after `term_grace`: blocking, like every engine call; a run this
engine did not start is not stopped (it says how).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import time
from dataclasses import replace
from pathlib import Path

from carl_tui.actions.action_error import ActionError
from carl_tui.actions.local_job import (
    RUNNING,
    STOPPING,
    LocalJob,
    LocalRun,
    list_local_runs,
    registry_path,
)
from carl_tui.engines.base import LogChunk, Submission
from carl_tui.events import Job, RunRef
from carl_tui.identity import LOCAL, local_run

LOCAL_GRACE_S = 30.0  # after the interrupt, before terminate
TERM_GRACE_S = 10.0  # after terminate, before kill


class LocalEngine:
    """Runs on this machine. `registry`: the registry file (None: the user's)."""

    kind = LOCAL

    def __init__(self, registry: str | Path | None = None, *, grace: float = LOCAL_GRACE_S,
                 term_grace: float = TERM_GRACE_S):
        self.registry = Path(registry) if registry is not None else None
        self.grace, self.term_grace = grace, term_grace
        self.started: dict[str, tuple[LocalJob, RunRef]] = {}  # job id -> process, run

    def adopt(self, run: RunRef, local: LocalJob) -> Job:
        """A process started elsewhere (the launch form, the demo): this engine answers
        for it from now on. Its job as it stands."""
        self.started[f"local-{local.pid}"] = (local, run)
        return local.status_event(run)

    def describe(self) -> str:
        return f"this machine ({socket.gethostname()})"

    @property
    def stop_note(self) -> str:
        """How `stop` goes, for the confirmation."""
        return (f"It gets an interrupt, so the trainer can save and exit; it is terminated "
                f"if still running after {self.grace:.0f} s.")

    def stream_of(self, job_id: str) -> Path:
        """The metrics stream the job writes (its run is read from it)."""
        if job_id in self.started:
            return self.started[job_id][0].stream_path
        recorded = self._recorded().get(job_id)
        if recorded is None:
            raise ActionError(f"No run {job_id} was started on this machine.",
                              kind="not_found")
        return recorded.stream_path

    def check(self, submission: Submission) -> list[str]:
        problems = []
        if not submission.command:
            problems.append("the job has no command")
        elif shutil.which(submission.command[0]) is None and not Path(
                submission.command[0]).is_file():
            problems.append(f"{submission.command[0]} is not a program on this machine")
        if submission.working_dir and not Path(submission.working_dir).is_dir():
            problems.append(f"the working folder {submission.working_dir} does not exist")
        return problems

    def submit(self, submission: Submission) -> Job:
        problems = self.check(submission)
        if problems:
            raise ActionError("Cannot start:\n- " + "\n- ".join(problems), kind="invalid")
        stream = submission.options.get("stream") or str(self._runs_dir() / (
            f"{re.sub(r'[^A-Za-z0-9._-]+', '-', submission.name) or 'job'}-"
            f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.jsonl"))
        env = {**os.environ, **submission.env, **submission.secrets}
        local = LocalJob.start(list(submission.command), stream,
                               log_path=submission.options.get("log") or None,
                               cwd=submission.working_dir or None, env=env)
        run = local_run(submission.name, local.started_at, local.pid)
        local.record(submission.name, path=self.registry)
        return self.adopt(run, local)

    def _runs_dir(self) -> Path:
        return (self.registry or registry_path()).parent / "runs"

    def _recorded(self) -> dict[str, LocalRun]:
        return {f"local-{r.pid}": r for r in list_local_runs(path=self.registry)}

    def jobs(self) -> list[Job]:
        rows = {job_id: run.job() for job_id, run in self._recorded().items()}
        for job_id, (local, run) in list(self.started.items()):
            row = local.status_event(run)
            rows[job_id] = replace(row, label=f"{row.name} · {local.stream_path}")
        return sorted(rows.values(), key=lambda j: j.created_at or 0.0, reverse=True)

    def job(self, job_id: str) -> Job:
        if job_id in self.started:
            local, run = self.started[job_id]
            return local.status_event(run)
        recorded = self._recorded().get(job_id)
        if recorded is None:
            raise ActionError(f"No run {job_id} was started on this machine.",
                              kind="not_found")
        return recorded.job()

    def log(self, job_id: str, offset: int = 0) -> LogChunk:
        if job_id in self.started:
            local, _ = self.started[job_id]
            path, ended = local.log_path, local.poll() not in (RUNNING, STOPPING)
        else:
            recorded = self._recorded().get(job_id)
            if recorded is None:
                raise ActionError(f"No run {job_id} was started on this machine.",
                                  kind="not_found")
            path, ended = recorded.log_path, not recorded.alive
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read()
        except FileNotFoundError:
            return LogChunk("", offset)
        except OSError as exc:
            raise ActionError(f"Cannot read {path}: {exc.strerror or exc}.",
                              kind="missing") from None
        if not ended:  # a line still being written waits for its end
            data = data[:data.rfind(b"\n") + 1]
        return LogChunk(data.decode("utf-8", errors="replace"), offset + len(data))

    def stop(self, job_id: str) -> Job:
        if job_id not in self.started:
            recorded = self._recorded().get(job_id)
            if recorded is not None and recorded.alive:
                raise ActionError(f"{recorded.name} (pid {recorded.pid}) was not started by "
                                  f"this dashboard: stop it where it runs, or with "
                                  f"`kill -INT {recorded.pid}`.", kind="invalid")
            return self.job(job_id)
        local, run = self.started[job_id]
        local.stop(grace=self.grace, term_grace=self.term_grace)
        return local.status_event(run)
