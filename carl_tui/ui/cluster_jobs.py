"""The keys that act, for jobs on a cluster (Ray; Slurm through the same registry): the
launch form's outcome followed, `s` (after the confirmation, and said once stopped), a
guard's stop, and `j`'s rows. Everything goes through `JobEngine` (`engines/base.py`),
found by the run's source kind (`actions/engines.py`): nothing here knows which engine it
drives. Blocking calls run in the controller's thread workers; states go to the store
through `Follower.emit`."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol

from carl_tui.actions.engines import engine_name, is_cluster_kind
from carl_tui.errors import CarlError
from carl_tui.events import Job, RunMeta, RunRef

if TYPE_CHECKING:  # pragma: no cover
    from textual.app import App

    from carl_tui.store import RunSnapshot
    from carl_tui.ui.follower import Follower
    from carl_tui.ui.settings import Services

STOP_WAIT_S = 120.0  # how long a stop waits for the engine to say the job has ended
STOP_POLL_S = 0.5


class Owner(Protocol):
    """What a cluster job part needs of the controller that holds it (named here, not
    imported: the controller imports this module)."""

    app: App
    follower: Follower
    services: Services

    def _worker(self, fn, *args, group: str, description: str,
                exclusive: bool = False) -> None: ...

    def _notify(self, text: str, **kw: Any) -> None: ...


class ClusterJobs:
    """What the controller does with a cluster job; `controller` shows and emits."""

    def __init__(self, controller: Owner):
        self.c = controller

    @staticmethod
    def owns(run: RunRef) -> bool:
        return is_cluster_kind(run.source)

    # -- l: a launched job, followed --------------------------------------------------

    def launched(self, spec: Any, job: Job) -> None:
        c = self.c
        c.follower.emit([RunMeta(job.run, {"model": spec.model, "method": spec.method,
                                           "output_dir": spec.output_dir}), job])
        c.follower.add_source(c.services.cluster_job_source(job), follow=job.run.key)
        where = c.services.engine_for(job.run).describe()
        c.app.notify(f"Launched {engine_name(job.run.source)} job {job.job_id} on {where}; "
                     "following it.", timeout=6)

    # -- s: stop -----------------------------------------------------------------------

    def confirm_stop(self, snap: RunSnapshot) -> None:
        from carl_tui.ui.screens.confirm import ConfirmScreen  # lazy: a screen, when shown

        c, job, run = self.c, snap.job, snap.run
        why = self.why_not(snap)
        if why:
            c.app.notify(f"Job {job.job_id if job else run.run_id}: {why}.")
            return
        engine = c.services.engine_for(run)
        name = engine_name(run.source)
        body = (f"{name} job {job.job_id} ({job.message or job.stage}) on "
                f"{engine.describe()} will be stopped. Training since its last checkpoint "
                "is lost.")

        def answered(yes: bool | None) -> None:
            if yes:
                c._worker(self.stop, run, job.job_id, group="stop", exclusive=True,
                          description=f"stopping {name} job {job.job_id}")

        c.app.push_screen(ConfirmScreen(f"Stop {name} job {job.job_id}?", body, "Stop job"),
                          answered)

    def why_not(self, snap: RunSnapshot | None) -> str:
        """Why the run's cluster job cannot be stopped ("" when it can)."""
        job = snap.job if snap is not None else None
        if job is None:
            return "the run has no job to stop"
        return f"it has already ended ({job.message or job.stage})" if job.ended else ""

    def stop(self, run: RunRef, job_id: str) -> str:
        """Stop the job and wait (in a worker thread) until its engine says it has ended;
        each state reaches the store; the end is said. Returns the engine's word."""
        engine = self.c.services.engine_for(run)
        name = engine_name(run.source)
        state = engine.stop(job_id)
        deadline = time.monotonic() + STOP_WAIT_S
        while True:
            self.c.follower.emit([state])
            if state.ended:
                break
            if time.monotonic() >= deadline:
                raise CarlError(f"{name} job {job_id} is still {state.message or state.stage} "
                                f"{STOP_WAIT_S:.0f} s after the stop", kind="timeout")
            time.sleep(STOP_POLL_S)
            state = engine.job(job_id)
        word = state.message or state.stage
        self.c._notify(f"{name} job {job_id} has stopped: {word}", title="stop", timeout=6)
        return word

    def guard_stop(self, run: RunRef) -> str:
        """A guard's stop of the run's job (in a worker thread), in words."""
        job = self.c.follower.store.snapshot(run.key, 2, ()).job
        return f"job {job.job_id} stopped: {self.stop(run, job.job_id)}"

    # -- j: the cluster's jobs beside the others ---------------------------------------

    def rows(self) -> list[Job]:
        """The clusters' jobs for `j` (none when no cluster is named or it cannot be read:
        the other rows are listed all the same)."""
        try:
            return self.c.services.list_cluster_jobs()
        except CarlError as exc:
            self.c._notify(f"The cluster's jobs are not listed: {exc}", severity="warning",
                           timeout=8)
            return []

    def chosen(self, row: Job) -> bool:
        """Follow a chosen cluster job; False when the row is not one."""
        if not is_cluster_kind(row.run.source):
            return False
        c = self.c
        known = c.follower.store.snapshot(row.run.key, 2, ()) is not None  # `fleet --ray`'s
        if not (known or c.follower.follows_job(row.job_id)):
            c.follower.add_source(c.services.cluster_job_source(row))
        c.follower.follow(row.run.key)
        c.app.notify(f"Following {engine_name(row.run.source)} job {row.job_id} "
                     f"({row.stage}).", timeout=4)
        return True
