"""The job engines the launch form, `s`, `j` and the guards drive, by name: one line each.

`ENGINES` maps a launch target (`LaunchSpec.target`) to the factory of its engine (given
the cluster's address, "" for its default) and `KINDS` maps the source kind of a run (its
`RunRef.source`) to its target, so the controller finds the engine of the run in view
without knowing which it is. `FOLLOWERS` names the source that follows a job of a target
where it is not the engine-neutral `EngineJobSource` (Slurm's reads the job's `StdOut`
file as it grows). For Slurm the "address" is whose jobs are listed (a run's project is
its user; "": yours).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from carl_tui.engines.base import JobEngine
from carl_tui.events import Job

if TYPE_CHECKING:  # pragma: no cover
    from carl_tui.sources.base import Source


def _ray(address: str) -> JobEngine:
    from carl_tui.engines.ray import RayEngine  # httpx: loaded when a Ray job is driven

    return RayEngine(address or None)


def _slurm(user: str) -> JobEngine:
    from carl_tui.engines.slurm import SlurmEngine  # its commands: run when a job is driven

    return SlurmEngine(user or None)


def _slurm_source(engine: JobEngine, job: Job) -> Source:
    from carl_tui.sources.slurm_job import SlurmJobSource  # loaded when a job is followed

    return SlurmJobSource(job.job_id, engine=engine)  # type: ignore[arg-type]


ENGINES: dict[str, Callable[[str], JobEngine]] = {"ray": _ray, "slurm": _slurm}
# a run's source kind -> its launch target
KINDS: dict[str, str] = {"ray-job": "ray", "slurm-job": "slurm"}
NAMES: dict[str, str] = {"ray": "Ray", "slurm": "Slurm"}  # a target as said in messages
FOLLOWERS: dict[str, Callable[[JobEngine, Job], Source]] = {"slurm": _slurm_source}


def is_cluster_kind(kind: str) -> bool:
    """A run of this source kind is a job of a registered engine."""
    return kind in KINDS


def make_engine(target: str, address: str = "") -> JobEngine:
    """The engine of `target` (a launch target, or a run's source kind) at `address`."""
    target = KINDS.get(target, target)
    try:
        factory = ENGINES[target]
    except KeyError:
        raise ValueError(f"no job engine {target!r} (known: {', '.join(ENGINES)})") from None
    return factory(address)


def engine_name(target: str) -> str:
    target = KINDS.get(target, target)
    return NAMES.get(target, target)


def job_source(engine: JobEngine, job: Job) -> Source:
    """The source that follows `job` of `engine` (its state and its log)."""
    factory = FOLLOWERS.get(KINDS.get(job.run.source, job.run.source))
    if factory is not None:
        return factory(engine, job)
    from carl_tui.sources.engine_job import EngineJobSource  # loaded when a job is followed

    return EngineJobSource(engine, job.job_id, run=job.run)
