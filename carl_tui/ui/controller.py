"""The keys that act: launch (`l`), stop (`s`), push (`p`), diagnose (`d`), jobs (`j`).

`ActionController` is handed what it needs (the app to show screens and
notices on, the follower to read the run on screen and to watch new runs, the
user's settings, the services it talks to) and called by the app's action
methods. It never writes the store: what it learns (a launched job's meta, a
job's new state) goes through `Follower.emit`, the one way in, which wakes the
UI. Blocking work (HTTP, stopping a process) runs in thread workers; a failure
is raised and shown by the app's one worker-error handler; results come back
through `call_from_thread`. The clients are made by `Services`, so tests point
them at loopback servers. Screens, the Hub and Claude are imported on first use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from carl_tui.actions.local_job import RUNNING, STOPPING, LocalJob
from carl_tui.events import RunMeta, RunRef
from carl_tui.identity import HF_JOB, local_run
from carl_tui.ui.cluster_jobs import ClusterJobs

if TYPE_CHECKING:  # pragma: no cover
    from textual.app import App

    from carl_tui.store import RunSnapshot
    from carl_tui.ui.follower import Follower
    from carl_tui.ui.settings import Services, Settings

STOP_WAIT_S = 120.0  # how long `s` waits for a cancelled job to report CANCELED
LOCAL_GRACE_S = 30.0  # after the interrupt, before terminate


class ActionController:
    def __init__(self, app: App, follower: Follower, settings: Settings, services: Services):
        self.app = app
        self.follower = follower
        self.settings = settings
        self.services = services
        self.local_jobs: dict[str, LocalJob] = {}  # run key -> process started with `l`
        self._local_runs: dict[str, RunRef] = {}
        self._local_stages: dict[str, str] = {}
        self._local_registry: dict[str, Any] = {}  # run key -> LocalRun, as last listed
        self.cluster = ClusterJobs(self)  # jobs of a JobEngine (Ray; Slurm)

    def start(self, local_jobs: Sequence[tuple[RunRef, LocalJob]] = ()) -> None:
        for run, local in local_jobs:
            self.adopt_local_job(run, local)
        self.app.set_interval(2.0, self.watch_local_jobs)

    def adopt_local_job(self, run: RunRef, local: LocalJob) -> None:
        """Show this local process's state as the run's job status; `s` can stop it."""
        self.local_jobs[run.key] = local
        self._local_runs[run.key] = run
        event = local.status_event(run)
        self._local_stages[run.key] = event.stage
        self.follower.emit([event])

    def watch_local_jobs(self) -> None:
        """Report a local run's end (completed, failed) as its job status."""
        for key, job in list(self.local_jobs.items()):
            event = job.status_event(self._local_runs[key])
            if self._local_stages.get(key) != event.stage:
                self._local_stages[key] = event.stage
                self.follower.emit([event])

    def _worker(self, fn, *args, group: str, description: str, exclusive: bool = False) -> None:
        self.app.run_worker(partial(fn, *args), thread=True, group=group, exclusive=exclusive,
                            exit_on_error=False, description=description)

    def _notify(self, text: str, **kw: Any) -> None:
        self.app.call_from_thread(self.app.notify, text, **kw)

    def _current_snapshot(self) -> RunSnapshot | None:
        """The run on screen, every point of it."""
        key = self.follower.current_run
        return self.follower.store.snapshot(key) if key else None

    # -- l: launch -------------------------------------------------------------------

    def launch(self) -> None:
        from carl_tui.actions.launch_spec import LaunchSpec
        from carl_tui.ui.screens.launch import LaunchScreen

        defaults = self.settings.launch_defaults or LaunchSpec()
        self.app.push_screen(LaunchScreen(defaults, self.services), self._launched)

    def _launched(self, outcome) -> None:
        if outcome is None:
            return
        spec = outcome.spec
        if outcome.job is not None and self.cluster.owns(outcome.job.run):
            return self.cluster.launched(spec, outcome.job)
        if outcome.job is not None:
            job = outcome.job
            self.follower.emit([RunMeta(job.run, {"model": spec.model, "method": spec.method,
                                                  "push_repo": spec.output_repo}), job])
            self.follower.add_source(self.services.job_source(job.job_id, job.namespace),
                                     follow=job.run.key)
            self.app.notify(f"Launched job {job.job_id} on {job.flavor}; following it.",
                            timeout=6)
            return
        if outcome.local is None or outcome.stream_path is None:
            return
        from carl_tui.sources.open import open_file

        run, local = outcome.run, outcome.local
        self.follower.emit([RunMeta(run, {"model": spec.model, "method": spec.method,
                                        "output_dir": str(Path(spec.output_dir).resolve()),
                                        "push_repo": spec.output_repo})])
        self.adopt_local_job(run, local)
        self.follower.add_source(open_file(outcome.stream_path, "jsonl", run=run),
                                 follow=run.key)
        self.app.notify(f"Started {run.label} on this machine (pid {local.pid}). It keeps "
                        f"running if you quit; watch it again with --watch "
                        f"{outcome.stream_path}. Its output: {local.log_path}.", timeout=8)

    # -- s: stop -----------------------------------------------------------------------

    def stop(self) -> None:
        from carl_tui.ui.screens.confirm import ConfirmScreen

        key = self.follower.current_run
        if key in self.local_jobs:
            self._confirm_local_stop(key)
            return
        snap = self._current_snapshot()
        job = snap.job if snap is not None else None
        if snap is not None and self.cluster.owns(snap.run):
            self.cluster.confirm_stop(snap)
            return
        if snap is None or job is None or snap.run.source != HF_JOB:
            self.app.notify("The current run has no job to stop.", severity="warning")
            return
        from carl_tui.hub import TERMINAL_STAGES

        if job.stage in TERMINAL_STAGES:
            self.app.notify(f"Job {job.job_id} has already ended ({job.stage}).")
            return
        namespace = snap.run.project
        flavor = f" on {job.flavor}" if job.flavor else ""
        body = (f"Job {job.job_id} ({job.stage}{flavor}) in {namespace} will be cancelled on "
                "Hugging Face Jobs. Training since its last push is lost.")
        run = snap.run

        def cancel(yes: bool | None) -> None:
            if yes:
                self._worker(self._cancel_remote, job.job_id, namespace, run, group="stop",
                             description=f"cancelling job {job.job_id}", exclusive=True)

        self.app.push_screen(ConfirmScreen(f"Cancel job {job.job_id}?", body, "Cancel job"),
                             cancel)

    def _confirm_local_stop(self, key: str) -> None:
        from carl_tui.ui.screens.confirm import ConfirmScreen

        local, label = self.local_jobs[key], self._local_runs[key].label
        if local.poll() not in (RUNNING, STOPPING):
            self.app.notify(f"{label} has already ended ({local.poll()}).")
            return
        body = (f"The local run {label} (pid {local.pid}) gets an interrupt, so the trainer "
                f"can save and exit; it is terminated if still running after "
                f"{LOCAL_GRACE_S:.0f} s.")

        def stop(yes: bool | None) -> None:
            if yes:
                self._worker(self._stop_local, key, group="stop",
                             description=f"stopping {label}")

        self.app.push_screen(ConfirmScreen(f"Stop {label}?", body, "Stop"), stop)

    def _cancel_remote(self, job_id: str, namespace: str, run: RunRef) -> str:
        from dataclasses import replace

        from carl_tui.hub import TERMINAL_STAGES

        client = self.services.jobs_client()
        client.cancel(job_id, namespace=namespace)
        state = client.wait_for(
            job_id, TERMINAL_STAGES, namespace=namespace, timeout=STOP_WAIT_S, interval=1.0,
            on_state=lambda st: self.follower.emit([replace(st, run=run)]),
        )
        self._notify(f"Job {job_id}: {state.stage}", title="stop", timeout=5)
        return state.stage

    def _stop_local(self, key: str) -> str:
        local, run = self.local_jobs[key], self._local_runs[key]
        local.stop(grace=LOCAL_GRACE_S)
        event = local.status_event(run)
        self._local_stages[key] = event.stage
        self.follower.emit([event])
        self._notify(f"{run.label}: {event.stage}", title="stop", timeout=5)
        return event.stage

    # -- a guard's stop (ui/guard.py): the same paths, no key pressed ----------------

    def stoppable(self, key: str) -> str:
        """Why the run's job cannot be stopped ("" when it can: a local run started here,
        or a Hugging Face job that has not ended)."""
        if key in self.local_jobs:
            state = self.local_jobs[key].poll()
            return "" if state in (RUNNING, STOPPING) else f"it has already ended ({state})"
        snap = self.follower.store.snapshot(key, 2, ())
        job = snap.job if snap is not None else None
        if snap is not None and self.cluster.owns(snap.run):
            return self.cluster.why_not(snap)
        if snap is None or job is None or snap.run.source != HF_JOB:
            return "the run has no job to stop"
        from carl_tui.hub import TERMINAL_STAGES

        return f"job {job.job_id} has already ended ({job.stage})" \
            if job.stage in TERMINAL_STAGES else ""

    def guard_stop(self, run: RunRef, push: bool) -> str:
        """Stop the run's job (in a worker thread): push its last checkpoint first when
        `push`; the result in words."""
        said = [self._guard_push(run)] if push else []
        if run.key in self.local_jobs:
            said.append(f"stopped: {self._stop_local(run.key)}")
        elif self.cluster.owns(run):
            said.append(self.cluster.guard_stop(run))
        else:
            snap = self.follower.store.snapshot(run.key, 2, ())
            job = snap.job
            said.append(f"job {job.job_id} cancelled: "
                        f"{self._cancel_remote(job.job_id, snap.run.project, run)}")
        return "; ".join(said)

    def _guard_push(self, run: RunRef) -> str:
        """Push the run's newest checkpoint (as `p` would offer it first); what happened."""
        from carl_tui.actions.push import push_choices
        from carl_tui.errors import describe

        snap = self.follower.store.snapshot(run.key, 2, ())
        out, repo = push_target(dict(snap.meta) if snap is not None else {}, self.settings)
        choices = push_choices(out) if out else []
        if not choices or not repo:
            return "no checkpoint pushed (no output directory or no repo known)"
        try:
            result = self.services.push_folder(choices[0], repo, lambda _p: None)
        except Exception as exc:  # noqa: BLE001  (the stop goes on; the log says why)
            return f"push of {choices[0].name} failed: {describe(exc)}"
        return f"pushed {choices[0].name} to {result.repo_id}"

    # -- p: push ---------------------------------------------------------------------

    def push(self) -> None:
        from carl_tui.actions.push import push_choices
        from carl_tui.ui.screens.push import PushScreen

        snap = self._current_snapshot()
        output_dir, repo = push_target(dict(snap.meta) if snap is not None else {},
                                       self.settings)
        if output_dir is None:
            self.app.notify("No output directory is known for this run: its metadata has no "
                            "output_dir and the dashboard was given none.", severity="warning",
                            timeout=8)
            return

        def pushed(result) -> None:
            if result is not None:
                self.app.notify(f"Pushed to {result.repo_id}: {result.commit_url}", timeout=8)

        self.app.push_screen(
            PushScreen(push_choices(output_dir), repo, self.services, output_dir=output_dir), pushed
        )

    # -- d: diagnosis -------------------------------------------------------------------

    def diagnose(self) -> None:
        from carl_tui.actions.diagnosis import build_summary
        from carl_tui.ui.screens.diagnosis import DiagnosisScreen

        snap = self._current_snapshot()
        if snap is None:
            self.app.notify("No run to diagnose yet.", severity="warning")
            return
        self.app.push_screen(DiagnosisScreen(build_summary(snap), snap.run.label,
                                             self.services))

    # -- j: jobs panel ---------------------------------------------------------------------

    def jobs(self) -> None:
        from carl_tui.ui.screens.jobs import JobsScreen

        snap = self.follower.snapshot
        current = snap.run.key if snap is not None and snap.job is not None else None
        self.app.push_screen(JobsScreen(self.services, current, list_local=self._local_rows),
                             self._job_chosen)

    def _local_rows(self):
        """Runs started on this machine (the registry), as rows of the jobs list."""
        from carl_tui.actions.local_job import list_local_runs

        rows, registry = [], {}
        for r in list_local_runs():
            rows.append(r.job())
            registry[rows[-1].run.key] = r
        self._local_registry = registry  # whole, at once: this runs in a worker thread
        # The processes this dashboard watches (the demo's training, a run started with
        # `l`), listed even where the registry does not hold them: without a Hub token
        # the list was empty, the demo's own job missing.
        pids = {row.job_id for row in rows}
        for key, local in list(self.local_jobs.items()):
            row = local.status_event(self._local_runs[key])
            if row.job_id not in pids:
                rows.append(replace(row, label=f"{row.name} · {local.stream_path}"))
        return rows + self.cluster.rows()

    def _job_chosen(self, row) -> None:
        if row is None or self.cluster.chosen(row):
            return
        if row.run.key in self.local_jobs:  # watched here already: show it
            self.follower.follow(row.run.key)
            return
        local = self._local_registry.get(row.run.key)
        if local is not None:  # a run of this machine: follow its stream
            from carl_tui.sources.open import open_file

            run = local_run(local.name, local.started_at, local.pid)
            if not self.follower.follows_file(local.stream_path):
                self.follower.add_source(open_file(local.stream_path, "jsonl", run=run))
            self.follower.follow(run.key)
            self.app.notify(f"Following {local.name} (pid {local.pid}, {row.stage}).",
                            timeout=4)
            return
        key = row.run.key
        if self.follower.follows_job(row.job_id):
            self.follower.follow(key)
        else:
            self.follower.add_source(self.services.job_source(row.job_id, row.namespace),
                                     follow=key)
        self.app.notify(f"Following job {row.job_id} ({row.stage}).", timeout=4)


def push_target(meta: dict, settings: Settings) -> tuple[Path | None, str]:
    """Where a run's checkpoints are (its output_dir, else the dashboard's) and the Hub repo
    they go to (the run's push_repo or hub_model_id, else the dashboard's): for `p` and for
    a guard's stop+push alike."""
    config = meta.get("config") if isinstance(meta.get("config"), dict) else {}
    out = meta.get("output_dir") or config.get("output_dir") or settings.output_dir
    repo = str(meta.get("push_repo") or config.get("hub_model_id") or settings.push_repo or "")
    return (Path(str(out)).expanduser() if out else None), repo
