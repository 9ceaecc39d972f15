"""The keys that act: launch (`l`), stop (`s`), push (`p`), diagnose (`d`), jobs (`j`).

`ActionController` is handed what it needs (the app to show screens and
notices on, the follower to read the run on screen and to watch new runs, the
user's settings, the services it talks to) and called by the app's action
methods. It never writes the store: what it learns (a launched job's meta, a
job's new state) goes through `Follower.emit`, the one way in, which wakes the
UI. Blocking work (HTTP, stopping a process) runs in thread workers; a failure
is raised and shown by the app's one worker-error handler; results come back
through `call_from_thread`. The clients are made by `Services`, so tests point
them at loopback servers. Screens, the Hub and Claude are imported on first use. A job,
whichever engine runs it (Hugging Face Jobs, this machine, Ray, Slurm), is launched,
stopped, listed and chosen through `ui/engine_jobs.py`, one path for every engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from carl_tui.actions.diagnosis import build_summary
from carl_tui.actions.launch_spec import LaunchSpec
from carl_tui.actions.push import push_choices
from carl_tui.errors import describe
from carl_tui.events import RunRef
from carl_tui.ui.engine_jobs import EngineJobs
from carl_tui.ui.screens.diagnosis import DiagnosisScreen
from carl_tui.ui.screens.jobs import JobsScreen
from carl_tui.ui.screens.launch import LaunchScreen
from carl_tui.ui.screens.push import PushScreen

if TYPE_CHECKING:  # pragma: no cover
    from textual.app import App

    from carl_tui.store import RunSnapshot
    from carl_tui.ui.follower import Follower
    from carl_tui.ui.settings import Services, Settings


class ActionController:
    def __init__(self, app: App, follower: Follower, settings: Settings, services: Services):
        self.app = app
        self.follower = follower
        self.settings = settings
        self.services = services
        self.engines = EngineJobs(self)  # jobs of every JobEngine (HF, this machine, Ray, Slurm)

    def start(self, processes: Sequence[tuple[RunRef, Any]] = ()) -> None:
        """Watch the processes started on this machine before the app (the demo's run)."""
        for run, process in processes:
            self.engines.adopt(run, process)
        self.app.set_interval(2.0, self.engines.poll_watched)

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
        defaults = self.settings.launch_defaults or LaunchSpec()
        self.app.push_screen(LaunchScreen(defaults, self.services), self._launched)

    def _launched(self, outcome) -> None:
        if outcome is None:
            return
        job = outcome.job
        if job is None and outcome.local is not None and outcome.stream_path is not None:
            job = self.engines.adopt(outcome.run, outcome.local)  # started by the form
        if job is not None:
            self.engines.launched(outcome.spec, job, outcome.stream_path)

    # -- s: stop, and a guard's stop (ui/guard.py): the same path, no key pressed -------

    def stop(self) -> None:
        self.engines.confirm_stop(self._current_snapshot())

    def stoppable(self, key: str) -> str:
        """Why the run's job cannot be stopped ("" when it can)."""
        return self.engines.why_not(self.follower.store.snapshot(key, 2, ()))

    def guard_stop(self, run: RunRef, push: bool) -> str:
        """Stop the run's job (in a worker thread): push its last checkpoint first when
        `push`; the result in words."""
        said = [self._guard_push(run)] if push else []
        said.append(self.engines.guard_stop(run))
        return "; ".join(said)

    def _guard_push(self, run: RunRef) -> str:
        """Push the run's newest checkpoint (as `p` would offer it first); what happened."""
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
        snap = self._current_snapshot()
        if snap is None:
            self.app.notify("No run to diagnose yet.", severity="warning")
            return
        self.app.push_screen(DiagnosisScreen(build_summary(snap), snap.run.label,
                                             self.services))

    # -- j: jobs panel ---------------------------------------------------------------------

    def jobs(self) -> None:
        snap = self.follower.snapshot
        current = snap.run.key if snap is not None and snap.job is not None else None
        self.app.push_screen(JobsScreen(self.services, current, list_local=self.engines.rows),
                             self._job_chosen)

    def _job_chosen(self, row) -> None:
        if row is not None:
            self.engines.chosen(row)


def push_target(meta: dict, settings: Settings) -> tuple[Path | None, str]:
    """Where a run's checkpoints are (its output_dir, else the dashboard's) and the Hub repo
    they go to (the run's push_repo or hub_model_id, else the dashboard's): for `p` and for
    a guard's stop+push alike."""
    config = meta.get("config") if isinstance(meta.get("config"), dict) else {}
    out = meta.get("output_dir") or config.get("output_dir") or settings.output_dir
    repo = str(meta.get("push_repo") or config.get("hub_model_id") or settings.push_repo or "")
    return (Path(str(out)).expanduser() if out else None), repo
