"""The keys that act on a job, for every engine (Hugging Face Jobs, this machine, Ray,
Slurm): the launch form's outcome followed, `s` (after the confirmation, and said once
stopped), a guard's stop, and `j`'s rows and choice. Everything goes through `JobEngine`
(`engines/base.py`), found by the run's source kind (`actions/engines.py`): nothing here
knows which engine it drives. Blocking calls run in the controller's thread workers;
states go to the store through `Follower.emit`.

A job whose state no source reports (a process of this machine: its stream says its
metrics, not whether it lives) is `watched`: its engine is asked every two seconds and a
new stage is emitted.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from carl_tui.actions.engines import engine_name, has_engine, output_is_the_jobs
from carl_tui.errors import CarlError
from carl_tui.events import Job, RunMeta, RunRef

if TYPE_CHECKING:  # pragma: no cover
    from textual.app import App

    from carl_tui.engines.base import JobEngine
    from carl_tui.store import RunSnapshot
    from carl_tui.ui.follower import Follower
    from carl_tui.ui.settings import Services

STOP_WAIT_S = 120.0  # how long a stop waits for the engine to say the job has ended
STOP_POLL_S = 0.5


class Owner(Protocol):
    """What the job part needs of the controller that holds it (named here, not
    imported: the controller imports this module)."""

    app: App
    follower: Follower
    services: Services

    def _worker(self, fn, *args, group: str, description: str,
                exclusive: bool = False) -> None: ...

    def _notify(self, text: str, **kw: Any) -> None: ...


class EngineJobs:
    """What the controller does with a job of any engine; `controller` shows and emits."""

    def __init__(self, controller: Owner):
        self.c = controller
        self.watched: dict[str, tuple[RunRef, str, str]] = {}  # key -> run, job id, stage

    def owns(self, run: RunRef) -> bool:
        """The run is a job of an engine (by its source kind, or a process adopted)."""
        return has_engine(run.source) or run.key in self.watched

    def _engine(self, run: RunRef) -> tuple[JobEngine, str]:
        """The run's engine and its name in messages ("Ray", "local")."""
        engine = self.c.services.engine_for(run)
        return engine, engine_name(engine.kind)

    # -- jobs whose state only their engine knows ---------------------------------------

    def adopt(self, run: RunRef, process: Any) -> Job:
        """A process started on this machine before (the demo's, the form's): its engine
        answers for it, its state is watched and `s` can stop it."""
        engine = self.c.services.local_engine()
        job = engine.adopt(run, process)
        self.c.services.remember(engine, [job])  # the demo's run too: `engine_for` finds it
        self.watched[run.key] = (run, job.job_id, job.stage)
        self.c.follower.emit([job])
        return job

    def poll_watched(self) -> None:
        """Emit a watched job's new stage (its end: completed, failed)."""
        for key, (run, job_id, said) in list(self.watched.items()):
            job = self.c.services.engine_for(run).job(job_id)
            if job.stage != said:
                self.watched[key] = (run, job_id, job.stage)
                self.c.follower.emit([job])

    # -- l: a launched job, followed --------------------------------------------------

    def launched(self, spec: Any, job: Job, stream: Path | None = None) -> None:
        """Follow the job the form launched (`stream`: the file a run of this machine
        writes its metrics to)."""
        c = self.c
        meta = {"model": spec.model, "method": spec.method, "push_repo": spec.output_repo}
        if output_is_the_jobs(job.run.source):  # HF's job writes in its container
            meta["output_dir"] = str(Path(spec.output_dir).resolve()) if stream else \
                spec.output_dir
        c.follower.emit([RunMeta(job.run, meta), job])
        c.follower.add_source(c.services.job_follower(job, stream), follow=job.run.key)
        engine, name = self._engine(job.run)
        where = engine.describe()
        on = f"{where}, {job.flavor}" if job.flavor and job.flavor not in where else where
        text = f"Launched {name} job {job.job_id} on {on}; following it."
        if stream is not None:
            text += (f" It keeps running if you quit; watch it again with --watch {stream}.")
        c.app.notify(text, timeout=8)

    # -- s: stop -----------------------------------------------------------------------

    def confirm_stop(self, snap: RunSnapshot | None) -> None:
        from carl_tui.ui.screens.confirm import ConfirmScreen  # lazy: a screen, when shown

        c = self.c
        why = self.why_not(snap)
        if why:
            job = snap.job if snap is not None and self.owns(snap.run) else None
            if job is None:
                c.app.notify("The current run has no job to stop.", severity="warning")
            else:
                c.app.notify(f"Job {job.job_id}: {why}.")
            return
        run, job = snap.run, self._job(snap)
        engine, name = self._engine(run)
        how = getattr(engine, "stop_note", "")  # how the engine stops it, where it says
        body = (f"{name} job {job.job_id} ({job.message or job.stage}) on "
                f"{engine.describe()} will be stopped.{' ' + how if how else ''} Training "
                "since its last checkpoint is lost.")

        def answered(yes: bool | None) -> None:
            if yes:
                c._worker(self.stop, run, job.job_id, group="stop", exclusive=True,
                          description=f"stopping {name} job {job.job_id}")

        c.app.push_screen(ConfirmScreen(f"Stop {name} job {job.job_id}?", body, "Stop job"),
                          answered)

    def _job(self, snap: RunSnapshot) -> Job | None:
        """The run's job as it stands: asked of its engine where only it knows (a watched
        process: a cheap call), else as the store holds it."""
        watched = self.watched.get(snap.run.key)
        if watched is not None:
            return self.c.services.engine_for(snap.run).job(watched[1])
        return snap.job

    def why_not(self, snap: RunSnapshot | None) -> str:
        """Why the run's job cannot be stopped ("" when it can)."""
        if snap is None or not self.owns(snap.run):
            return "the run has no job to stop"
        job = self._job(snap)
        if job is None:
            return "the run has no job to stop"
        return f"it has already ended ({job.message or job.stage})" if job.ended else ""

    def stop(self, run: RunRef, job_id: str) -> str:
        """Stop the job and wait (in a worker thread) until its engine says it has ended;
        each state reaches the store; the end is said. Returns the engine's word."""
        engine, name = self._engine(run)
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
        if run.key in self.watched:
            self.watched[run.key] = (run, job_id, state.stage)
        word = state.message or state.stage
        self.c._notify(f"{name} job {job_id} has stopped: {word}", title="stop", timeout=6)
        return word

    def guard_stop(self, run: RunRef) -> str:
        """A guard's stop of the run's job (in a worker thread), in words."""
        watched = self.watched.get(run.key)
        job_id = watched[1] if watched else \
            self.c.follower.store.snapshot(run.key, 2, ()).job.job_id
        return f"job {job_id} stopped: {self.stop(run, job_id)}"

    # -- j: the jobs of this machine and the clusters beside the Hub's ------------------

    def rows(self) -> list[Job]:
        """This machine's runs and the clusters' jobs for `j` (a cluster that cannot be
        read lists none: the other rows are listed all the same)."""
        rows = self.c.services.local_engine().jobs()
        try:
            return rows + self.c.services.list_cluster_jobs()
        except CarlError as exc:
            self.c._notify(f"The cluster's jobs are not listed: {exc}", severity="warning",
                           timeout=8)
            return rows

    def chosen(self, row: Job) -> None:
        """Follow a chosen job: the run in view when it is known, else a new source."""
        c = self.c
        known = c.follower.store.snapshot(row.run.key, 2, ()) is not None  # `fleet --ray`'s
        if not (known or c.follower.follows_job(row.job_id)):
            source = c.services.job_follower(row)
            if source.path is None or not c.follower.follows_file(source.path):  # read once
                c.follower.add_source(source)
        c.follower.follow(row.run.key)
        c.app.notify(f"Following {self._engine(row.run)[1]} job {row.job_id} "
                     f"({row.stage}).", timeout=4)
