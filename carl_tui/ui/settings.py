"""What the dashboard is given, in two objects: `Settings` (the user's choices, plain
typed values: the CLI's flags, the config file's alerts) and `Services` (what it talks
to: the Hub, Claude, the sources it opens later, the clock; factories the tests point
at loopback fakes). `DashboardConfig` (app.py) holds one of each, with the sources.

No Textual import: the CLI builds both before anything heavy loads.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from carl_tui import metric_names as mn
from carl_tui.events import RunRef
from carl_tui.identity import HF_JOB, LOCAL, LOCAL_PROJECT
from carl_tui.ui.plot_view import ChartSettings

if TYPE_CHECKING:  # pragma: no cover
    from huggingface_hub import HfApi

    from carl_tui.actions.diagnosis import Diagnoser
    from carl_tui.actions.jobs import JobsClient
    from carl_tui.actions.launch_spec import LaunchSpec
    from carl_tui.actions.local_job import LocalJob
    from carl_tui.actions.push import PushProgress, PushResult
    from carl_tui.engines.base import JobEngine
    from carl_tui.events import Job
    from carl_tui.sources.base import Source
    from carl_tui.ui.attention import AlertConfig

DEFAULT_THEME = "carl-dark"


@dataclass
class Settings:
    """The user's choices: what the dashboard shows and how."""

    theme: str = DEFAULT_THEME
    run: str | None = None  # preferred run: run_id, name or key
    vocab_size: int | None = None
    gate_metric: str = mn.ACCURACY
    keymap: dict[str, str] = field(default_factory=dict)
    refresh_interval: float = 0.25
    title: str = "carl-tui"
    chart: ChartSettings = field(default_factory=ChartSettings)
    plot_metrics: tuple[str, ...] | list[str] = ()  # metrics plotted in the grid from the start
    alerts: AlertConfig | None = None  # None: read the config file
    # The guards: flag -> "notify" | "ask" | "stop" | "stop+push" (actions/guard.py),
    # `--guard` over the config file's [guard]; None: the config file's alone.
    guard: dict[str, str] | None = None
    save_dir: str = "."  # where ctrl+s writes the screen and the plotted data
    read_only: bool = False  # no key that acts on the world, nor ctrl+s (READ_ONLY_HIDDEN)
    # A recording played back (`replay`): its run has no job to stop and no checkpoint to
    # push here; launching and the account's jobs are left out too (RECORDING_HIDDEN).
    recording: bool = False
    demo: bool = False  # `carl-tui demo`: no launch, and no checkpoint to push (DEMO_HIDDEN)
    output_dir: str | None = None  # where the run's checkpoints are (p), unless its meta says
    push_repo: str | None = None  # default target repo of p
    launch_defaults: LaunchSpec | None = None  # the launch form's; None: LaunchSpec()
    fleet: bool = False  # open on the fleet table (`carl-tui fleet`), the dashboard under it


@dataclass
class Services:
    """What the dashboard talks to. Each factory left None is the real one."""

    hub_endpoint: str | None = None  # None: HF_ENDPOINT or the Hub
    jobs_client_factory: Callable[[], JobsClient] | None = None
    diagnoser_factory: Callable[[], Diagnoser] | None = None
    job_source_factory: Callable[[str, str], Source] | None = None  # (job id, namespace)
    local_starter: Callable[[LaunchSpec, Path], LocalJob] | None = None  # a run started here
    # Project picker (P): list project names (may do I/O: runs in a worker) and open one.
    list_projects: Callable[[], list[str]] | None = None
    open_project: Callable[[str], Source] | None = None
    # The completions view (a): (run, its meta) -> the readers of its completions.
    completions: Callable[[RunRef, Any], list] | None = None
    clock: Callable[[], float] = time.time  # for "updated 3s ago"; fixed in snapshot tests
    # The clusters' job engines (Ray, Slurm: actions/engines.py): `ray_address` is the
    # Ray dashboard the launch form offers and `j` lists ("": $RAY_ADDRESS or the local
    # one; `j` lists it where `list_ray`; your Slurm jobs where `list_slurm`); `engines`
    # keeps each engine by the (source kind, project) of the runs it launched or listed,
    # so `s` stops a job through its own.
    ray_address: str = ""
    list_ray: bool = False
    list_slurm: bool = False
    engines: dict[tuple[str, str], JobEngine] = field(default_factory=dict)

    def engine(self, target: str, address: str = "") -> JobEngine:
        """A new engine of `target` ("ray", or a run's source kind) at `address` ("": its
        default). Hugging Face's goes through `jobs_client` (the tests point it)."""
        # lazy: actions, when a job is driven
        from carl_tui.actions.engines import KINDS, make_engine

        target = KINDS.get(target, target)
        if target == "hf-jobs":
            from carl_tui.actions.hf_engine import HfJobsEngine  # lazy: the Hub, as above

            return HfJobsEngine(self.jobs_client(), namespace=address)
        return make_engine(target, address or (self.ray_address if target == "ray" else ""))

    def local_engine(self) -> JobEngine:
        """This machine's engine: one a dashboard, so what it started it can stop."""
        return self.engine_for(RunRef(LOCAL, LOCAL_PROJECT, "", ""))

    def remember(self, engine: JobEngine, jobs: list[Job]) -> None:
        """`engine` launched or listed these jobs: `engine_for` their runs gives it."""
        for job in jobs:
            self.engines[(job.run.source, job.run.project)] = engine

    def engine_for(self, run: RunRef) -> JobEngine:
        """The engine of a job's run: the one that launched or listed it, else one made
        for its place (the run's project: the Ray dashboard's host:port, the Hub's
        namespace, this machine)."""
        engine = self.engines.get((run.source, run.project))
        if engine is None:
            engine = self.engines[(run.source, run.project)] = self.engine(run.source,
                                                                          run.project)
        return engine

    def job_follower(self, job: Job, stream: Path | None = None) -> Source:
        """The source that follows a job (its state, its log, its metrics): a Hugging Face
        job's own, a run of this machine's stream (`stream`, else the one its engine
        knows), a cluster job's state and log."""
        # lazy: the readers, on first use
        from carl_tui.sources.engine_job import follow_job
        from carl_tui.sources.open import open_file

        if job.run.source == HF_JOB:
            return self.job_source(job.job_id, job.namespace or job.run.project)
        if job.run.source == LOCAL:
            path = stream or self.engine_for(job.run).stream_of(job.job_id)
            return open_file(path, "jsonl", run=job.run)
        return follow_job(self.engine_for(job.run), job)

    def cluster_names(self) -> list[str]:
        """The engines `j` lists the jobs of ("Ray", "Slurm"), in the registry's order."""
        # lazy: as `engine`
        from carl_tui.actions.engines import ENGINES, KINDS, engine_name, is_cluster_kind

        kinds = {KINDS[source] for source, _ in self.engines if is_cluster_kind(source)}
        kinds |= {t for t, on in (("ray", self.list_ray), ("slurm", self.list_slurm)) if on}
        return [engine_name(t) for t in ENGINES if t in kinds]

    def list_cluster_jobs(self) -> list[Job]:
        """The jobs `j` lists of the clusters: the Ray cluster named (`list_ray`), your
        Slurm jobs (`list_slurm`), and each cluster a job was launched on or listed from
        here."""
        from carl_tui.actions.engines import is_cluster_kind  # lazy: as `engine`

        engines = {e.describe(): e for (source, _), e in self.engines.items()
                   if is_cluster_kind(source)}  # one per cluster
        for target, listed in (("ray", self.list_ray), ("slurm", self.list_slurm)):
            if listed:
                engine = self.engine(target)
                engines.setdefault(engine.describe(), engine)
        jobs: list[Job] = []
        for engine in engines.values():
            listed = engine.jobs()
            self.remember(engine, listed)
            jobs += listed
        return jobs

    def jobs_client(self) -> JobsClient:
        if self.jobs_client_factory is not None:
            return self.jobs_client_factory()
        # lazy: the actions and the Hub load when first used, not with the first frame
        from carl_tui.actions.jobs import JobsClient

        return JobsClient(endpoint=self.hub_endpoint)

    def diagnoser(self) -> Diagnoser:
        if self.diagnoser_factory is not None:
            return self.diagnoser_factory()
        # lazy: the actions and the Hub load when first used, not with the first frame
        from carl_tui.actions.diagnosis import Diagnoser

        return Diagnoser()

    def hub_api(self) -> HfApi:
        """An `HfApi` with the user's token (never shown) for the configured endpoint."""
        # lazy: the actions and the Hub load when first used, not with the first frame
        from carl_tui.hub import make_api

        return make_api(None, endpoint=self.hub_endpoint)

    def job_source(self, job_id: str, namespace: str) -> Source:
        if self.job_source_factory is not None:
            return self.job_source_factory(job_id, namespace)
        # lazy: the actions and the Hub load when first used, not with the first frame
        from carl_tui.sources.hf_jobs import HfJobSource

        return HfJobSource(job_id, namespace=namespace, api=self.hub_api())

    def list_jobs(self) -> list[Job]:
        """The account's Hugging Face jobs, newest first (raises CarlError)."""
        # lazy: the actions and the Hub load when first used, not with the first frame
        from carl_tui.hub import list_jobs

        return list_jobs(None, api=self.hub_api())

    def push_folder(self, folder: Path, repo_id: str,
                    progress: Callable[[PushProgress], None]) -> PushResult:
        """Upload a checkpoint folder to a private model repo (raises CarlError)."""
        # lazy: the actions and the Hub load when first used, not with the first frame
        from carl_tui.actions.push import push_folder

        return push_folder(folder, repo_id, endpoint=self.hub_endpoint, private=True,
                           progress=progress)

    def start_local(self, spec: LaunchSpec, stream: Path) -> LocalJob:
        """Start the training `spec` on this machine, writing its stream to `stream`."""
        if self.local_starter is not None:
            return self.local_starter(spec, stream)
        # lazy: the actions and the Hub load when first used, not with the first frame
        from carl_tui.actions.local_job import LocalJob

        return LocalJob.start(spec, stream)

