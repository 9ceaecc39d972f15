"""What a Hugging Face job's status says, told once (`JobNews`).

A job's status comes to two sources: the source that follows one job (`HfJobSource`,
its `inspect_job` every few seconds) and the jobs list (`HfJobsListSource`, one
`list_jobs` a poll). Both tell it the same way, here: the job's meta the first time
it is seen (its id, flavor, command with secrets masked, labels and page: the run
card's "job"), a `Job` event whenever its stage, flavor, message or times change (the
row's state and cost), and its run's life (live, finished, failed), which the source
says again only when it changes.
"""

from __future__ import annotations

from typing import Any

from carl_tui.events import STAGE_LIFE, Event, Job, RunMeta
from carl_tui.sources.base import PolledSource


class JobNews:
    """The status of jobs as events, each told once."""

    def __init__(self) -> None:
        self._said: dict[str, tuple] = {}  # job id -> what its last Job event said

    def seen(self, job_id: str) -> bool:
        """A status of this job was told already."""
        return job_id in self._said

    def events(self, job: Job, info: Any, source: PolledSource) -> list[Event]:
        """The events of one status of `job` (`info`: the Hub's `JobInfo` it was made
        of); its run's life is said through `source`."""
        out: list[Event] = []
        said = self._said.get(job.job_id)
        if said is None:
            meta = {"job_id": job.job_id, "flavor": job.flavor, "command": list(job.command),
                    "labels": dict(getattr(info, "labels", None) or {}), "url": job.url}
            out.append(RunMeta(job.run, meta))
        key = (job.stage, job.flavor, job.message, job.started_at, job.finished_at)
        if said != key:
            self._said[job.job_id] = key
            out.append(job)
        life = STAGE_LIFE.get(job.stage)
        if life is not None:
            ended_badly = life in ("failed", "stopped") and job.message
            reason = f"job {job.stage}: {job.message}" if ended_badly else ""
            when = job.finished_at or job.started_at or job.created_at
            source.report_run_state(job.run, life, when, reason)
        return out
