"""The keys that act: launch (`l`), stop (`s`), push (`p`), diagnose (`d`), jobs (`j`).

`ActionsMixin` is mixed into `CarlApp`. Its bindings are in `ACTION_BINDINGS`
(Textual merges BINDINGS only from DOM classes, so the app adds them to its
own). Blocking work (HTTP, stopping a process) runs in thread workers, which
reach the UI only through messages and `call_from_thread`. The clients are
made by `DashboardConfig` factories, so tests point them at loopback servers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual import work

from carl_tui.actions.diagnosis import Diagnoser, build_summary
from carl_tui.actions.jobs import JobsClient, status_event
from carl_tui.actions.launch_spec import LaunchSpec
from carl_tui.actions.local_job import RUNNING, STOPPING, LocalJob
from carl_tui.actions.push import PushResult, push_choices, push_folder
from carl_tui.errors import CarlError
from carl_tui.events import RunMeta, RunRef
from carl_tui.hub import TERMINAL_STAGES, list_jobs, make_api
from carl_tui.identity import HF_JOB, job_run
from carl_tui.ui.messages import StopFinished
from carl_tui.ui.screens.confirm import ConfirmScreen
from carl_tui.ui.screens.diagnosis import DiagnosisScreen
from carl_tui.ui.screens.jobs import JobsScreen
from carl_tui.ui.screens.launch import LaunchOutcome, LaunchScreen
from carl_tui.ui.screens.push import PushScreen
from carl_tui.ui.widgets.job_bar import JobBar

STOP_WAIT_S = 120.0  # how long `s` waits for a cancelled job to report CANCELED
LOCAL_GRACE_S = 30.0  # after the interrupt, before terminate


class ActionsMixin:
    """Launch, stop, push, diagnose and the jobs panel, for `CarlApp`."""


    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.local_jobs: dict[str, LocalJob] = {}  # run key -> process started with `l`
        self._local_runs: dict[str, RunRef] = {}
        self._local_stages: dict[str, str] = {}

    def on_mount(self) -> None:
        for run, local in self.config.local_jobs:
            self.adopt_local_job(run, local)
        self.set_interval(2.0, self._watch_local_jobs)

    def adopt_local_job(self, run: RunRef, local: LocalJob) -> None:
        """Show this local process's state as the run's job status; `s` can stop it."""
        self.local_jobs[run.key] = local
        self._local_runs[run.key] = run
        event = local.status_event(run)
        self._local_stages[run.key] = event.stage
        self.store.apply([event])

    # -- clients (factories from the config; defaults are the real ones) ---------------

    def jobs_client(self) -> JobsClient:
        factory = self.config.jobs_client_factory
        return factory() if factory else JobsClient(endpoint=self.config.hub_endpoint)

    def diagnoser(self) -> Diagnoser:
        factory = self.config.diagnoser_factory
        return factory() if factory else Diagnoser()

    def hub_api(self):
        """An `HfApi` with the user's token (never shown) for the configured endpoint."""
        return make_api(None, endpoint=self.config.hub_endpoint)

    def job_source(self, job_id: str, namespace: str):
        factory = self.config.job_source_factory
        if factory:
            return factory(job_id, namespace)
        from carl_tui.sources.hf_jobs import HfJobSource

        return HfJobSource(job_id, namespace=namespace, api=self.hub_api())

    def _current_snapshot(self):
        key = self.current_run
        return self.store.snapshot(key) if key else None

    # -- the job line --------------------------------------------------------------

    def _refresh_job_bar(self) -> None:
        snap = self.snapshot
        bar = self.query_one(JobBar)
        bar.show(snap.job if snap is not None else None, snap.usage if snap is not None else None)

    def _watch_local_jobs(self) -> None:
        """Report a local run's end (completed, failed) as its job status."""
        for key, job in list(self.local_jobs.items()):
            event = job.status_event(self._local_runs[key])
            if self._local_stages.get(key) != event.stage:
                self._local_stages[key] = event.stage
                self.store.apply([event])

    # -- l: launch -------------------------------------------------------------------

    def action_launch(self) -> None:
        defaults = self.config.launch_defaults or LaunchSpec()
        starter = self.config.local_starter or LocalJob.start
        self.push_screen(LaunchScreen(defaults, self.jobs_client, starter), self._launched)

    def _launched(self, outcome: LaunchOutcome | None) -> None:
        if outcome is None:
            return
        spec = outcome.spec
        if outcome.job is not None:
            job = outcome.job
            self.store.apply([RunMeta(job.run, {"model": spec.model, "method": spec.method,
                                                "push_repo": spec.output_repo}),
                              job.status_event()])
            self.add_source(self.job_source(job.job_id, job.namespace), follow=job.run.key)
            self.notify(f"Launched job {job.job_id} on {job.flavor}; following it.", timeout=6)
            return
        if outcome.local is None or outcome.stream_path is None:
            return
        from carl_tui.sources.jsonl import JsonlSource

        run, local = outcome.run, outcome.local
        self.store.apply([RunMeta(run, {"model": spec.model, "method": spec.method,
                                        "output_dir": str(Path(spec.output_dir).resolve()),
                                        "push_repo": spec.output_repo})])
        self.adopt_local_job(run, local)
        self.add_source(JsonlSource(outcome.stream_path, run=run), follow=run.key)
        self.notify(f"Started {run.label} on this machine (pid {local.pid}). It keeps running "
                    f"if you quit; watch it again with --watch {outcome.stream_path}. "
                    f"Its output: {local.log_path}.", timeout=8)

    # -- s: stop -----------------------------------------------------------------------

    def action_stop_job(self) -> None:
        key = self.current_run
        snap = self._current_snapshot()
        if key in self.local_jobs:
            local = self.local_jobs[key]
            if local.poll() not in (RUNNING, STOPPING):
                self.notify(f"{self._local_runs[key].label} has already ended ({local.poll()}).")
                return
            label = self._local_runs[key].label
            body = (f"The local run {label} (pid {local.pid}) gets an interrupt, so the trainer "
                    f"can save and exit; it is terminated if still running after "
                    f"{LOCAL_GRACE_S:.0f} s.")

            def stop(yes: bool | None) -> None:
                if yes:
                    self._stop_local(key)

            self.push_screen(ConfirmScreen(f"Stop {label}?", body, "Stop"), stop)
            return
        job = snap.job if snap is not None else None
        if snap is None or job is None or snap.run.source != HF_JOB:
            self.notify("The current run has no job to stop.", severity="warning")
            return
        if job.stage in TERMINAL_STAGES:
            self.notify(f"Job {job.job_id} has already ended ({job.stage}).")
            return
        namespace = snap.run.project
        flavor = f" on {job.flavor}" if job.flavor else ""
        body = (f"Job {job.job_id} ({job.stage}{flavor}) in {namespace} will be cancelled on "
                "Hugging Face Jobs. Training since its last push is lost.")
        run = snap.run

        def cancel(yes: bool | None) -> None:
            if yes:
                self._cancel_remote(job.job_id, namespace, run)

        self.push_screen(ConfirmScreen(f"Cancel job {job.job_id}?", body, "Cancel job"), cancel)

    @work(thread=True, exclusive=True, exit_on_error=False, group="stop",
          description="cancelling the job")
    def _cancel_remote(self, job_id: str, namespace: str, run: RunRef) -> None:
        label = f"Job {job_id}"
        try:
            client = self.jobs_client()
            client.cancel(job_id, namespace=namespace)
            state = client.wait_for(
                job_id, TERMINAL_STAGES, namespace=namespace, timeout=STOP_WAIT_S, interval=1.0,
                on_state=lambda st: self.store.apply([status_event(st, run)]),
            )
        except CarlError as exc:
            self.post_message(StopFinished(label, error=str(exc)))
            return
        self.post_message(StopFinished(label, stage=state.stage))

    @work(thread=True, exclusive=False, exit_on_error=False, group="stop",
          description="stopping the local run")
    def _stop_local(self, key: str) -> None:
        local, run = self.local_jobs[key], self._local_runs[key]
        try:
            local.stop(grace=LOCAL_GRACE_S)
        except OSError as exc:
            self.post_message(StopFinished(run.label, error=f"Could not stop {run.label}: {exc}."))
            return
        event = local.status_event(run)
        self._local_stages[key] = event.stage
        self.store.apply([event])
        self.post_message(StopFinished(run.label, stage=event.stage))

    def on_stop_finished(self, msg: StopFinished) -> None:
        if msg.error:
            self.notify(msg.error, title="stop", severity="error", timeout=10)
        else:
            self.notify(f"{msg.label}: {msg.stage}", title="stop", timeout=5)
        self._refresh_job_bar()

    # -- p: push ---------------------------------------------------------------------

    def _run_output_dir(self, meta) -> str | None:
        config = meta.get("config") if isinstance(meta.get("config"), dict) else {}
        return meta.get("output_dir") or config.get("output_dir") or self.config.output_dir

    def action_push_checkpoint(self) -> None:
        snap = self._current_snapshot()
        meta = dict(snap.meta) if snap is not None else {}
        out = self._run_output_dir(meta)
        if not out:
            self.notify("No output directory is known for this run: its metadata has no "
                        "output_dir and the dashboard was given none.", severity="warning",
                        timeout=8)
            return
        config = meta.get("config") if isinstance(meta.get("config"), dict) else {}
        repo = str(meta.get("push_repo") or config.get("hub_model_id") or self.config.push_repo or "")
        output_dir = Path(str(out)).expanduser()
        endpoint = self.config.hub_endpoint

        def pusher(folder, repo_id, progress) -> PushResult:
            return push_folder(folder, repo_id, endpoint=endpoint, private=True, progress=progress)

        self.push_screen(PushScreen(push_choices(output_dir), repo, pusher, output_dir=output_dir),
                         self._pushed)

    def _pushed(self, result: PushResult | None) -> None:
        if result is not None:
            self.notify(f"Pushed to {result.repo_id}: {result.commit_url}", timeout=8)

    # -- d: diagnosis -------------------------------------------------------------------

    def action_diagnose(self) -> None:
        snap = self._current_snapshot()
        if snap is None:
            self.notify("No run to diagnose yet.", severity="warning")
            return
        self.push_screen(DiagnosisScreen(build_summary(snap), snap.run.label, self.diagnoser))

    # -- j: jobs panel ---------------------------------------------------------------------

    def action_jobs(self) -> None:
        snap = self.snapshot
        current = snap.job.job_id if snap is not None and snap.job is not None else None
        self.push_screen(JobsScreen(lambda: list_jobs(None, api=self.hub_api()), current),
                         self._job_chosen)

    def _job_chosen(self, row) -> None:
        if row is None:
            return
        key = job_run(row.namespace, row.id).key
        followed = any(getattr(r.source, "job_id", None) == row.id for r in self.runners)
        if followed:
            self.follow(key)
        else:
            self.add_source(self.job_source(row.id, row.namespace), follow=key)
        self.notify(f"Following job {row.id} ({row.stage}).", timeout=4)
