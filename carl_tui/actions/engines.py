"""The job engines the launch form, `s`, `j` and the guards drive, by name: one line each.

`ENGINES` maps a launch target (`LaunchSpec.target`) to the factory of its engine (given
the cluster's address, HF's namespace; "" for its default; this machine takes none)
and `KINDS` maps the source kind of a run (its `RunRef.source`) to its target, so the
controller finds the engine of the run in view without knowing which it is. For Slurm the
"address" is whose jobs are listed (a run's project is its user; "": yours). The source
that follows a job is chosen in `sources.engine_job.follow_job`.
"""

from __future__ import annotations

from collections.abc import Callable

from carl_tui.actions.local_engine import LocalEngine
from carl_tui.engines.base import JobEngine
from carl_tui.engines.slurm import SlurmEngine


def _ray(address: str) -> JobEngine:
    from carl_tui.engines.ray import RayEngine  # lazy: httpx, loaded when a Ray job is driven

    return RayEngine(address or None)


def _slurm(user: str) -> JobEngine:
    return SlurmEngine(user or None)


def _hf(namespace: str) -> JobEngine:
    from carl_tui.actions.hf_engine import HfJobsEngine  # lazy: the Hub, when a job is driven

    return HfJobsEngine(namespace=namespace)


def _local(_where: str) -> JobEngine:
    return LocalEngine()  # the user's registry (a run's project names no other)


ENGINES: dict[str, Callable[[str], JobEngine]] = {
    "hf-jobs": _hf, "local": _local, "ray": _ray, "slurm": _slurm}
# a run's source kind -> its launch target
KINDS: dict[str, str] = {"hf-job": "hf-jobs", "local": "local", "ray-job": "ray",
                         "slurm-job": "slurm"}
NAMES: dict[str, str] = {"hf-jobs": "Hugging Face", "local": "local", "ray": "Ray",
                         "slurm": "Slurm"}  # a target as said in messages
CLUSTERS = frozenset({"ray", "slurm"})  # the engines whose jobs `j` lists as a cluster's
# the engines whose job writes its checkpoints where the launch form's output_dir says
# (a Hugging Face job writes in its container: its checkpoints are pushed, not here)
OUTPUT_THERE = frozenset({"local", "ray", "slurm"})


def has_engine(kind: str) -> bool:
    """A run of this source kind is a job of a registered engine."""
    return kind in KINDS


def output_is_the_jobs(kind: str) -> bool:
    """A launched job of this source kind writes its checkpoints to the form's output_dir."""
    return KINDS.get(kind) in OUTPUT_THERE


def is_cluster_kind(kind: str) -> bool:
    """A run of this source kind is a job of a cluster's engine (Ray, Slurm)."""
    return KINDS.get(kind) in CLUSTERS


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

