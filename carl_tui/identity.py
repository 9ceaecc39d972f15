"""Who a run is: the one place that builds a run's identity (`RunRef`).

Every source, the launch form and the CLI build run identities here, so the
same run read twice (a job launched with `l`, then found again with `j`; a
stream watched by the demo and by `--watch`) gets the same key.

A `RunRef` is `(source kind, project, run_id, display name)`; its `key`
(`kind:project:run_id`) identifies the run in the store.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from carl_tui.events import RunRef

# Source kinds, as they appear in run keys and the run picker.
JSONL = "jsonl"
REPLAY = "replay"
TRAINER_LOG = "trainer-log"
DEMO = "demo"
LOCAL = "local"
HF_JOB = "hf-job"
TRACKIO = "trackio"
TRACKIO_REMOTE = "trackio-remote"
TENSORBOARD = "tensorboard"
WANDB = "wandb"
RAY_JOB = "ray-job"  # a Ray job (engines/ray.py): project = its dashboard's host:port
SLURM_JOB = "slurm-job"

LOCAL_PROJECT = "this machine"


def file_run(path: str | os.PathLike, kind: str = JSONL) -> RunRef:
    """A run read from one file: project = the file's folder, id and name = its stem."""
    p = Path(path)
    project = p.resolve().parent.name or "local"
    return RunRef(source=kind, project=project, run_id=p.stem, name=p.stem)


def job_run(namespace: str, job_id: str) -> RunRef:
    """A Hugging Face Job: project = its namespace, named by its id."""
    return RunRef(source=HF_JOB, project=namespace or "", run_id=job_id, name=job_id)


def demo_run(seed: int) -> RunRef:
    return RunRef(DEMO, "carl-demo", f"tiny-reverse-seed{seed}", f"tiny-reverse (seed {seed})")


def local_run(name: str, started_at: float, pid: int) -> RunRef:
    """A training process started on this machine from the launch form (the same key
    when `j` finds it again in the registry of local runs after a restart)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(started_at))
    return RunRef(LOCAL, LOCAL_PROJECT, f"local-{stamp}-{pid}", name)


def trackio_run(project: str, run_id: str, name: str = "", *, remote: bool = False) -> RunRef:
    return RunRef(TRACKIO_REMOTE if remote else TRACKIO, project, run_id, name or run_id)


def tensorboard_run(logdir: str | os.PathLike, relative: str) -> RunRef:
    """A TensorBoard run: project = the logdir's folder name, id and name = its path in it."""
    project = Path(logdir).resolve().name or "tensorboard"
    return RunRef(TENSORBOARD, project, relative, relative)


def wandb_run(project: str, run_id: str, name: str = "") -> RunRef:
    return RunRef(WANDB, project or "wandb", run_id, name or run_id)


def slurm_run(user: str, job_id: str, name: str = "") -> RunRef:
    """A Slurm batch job: project = its user, id = its job id (the same key from
    `squeue`, `scontrol` and the launch form), shown as "NAME (ID)"."""
    return RunRef(SLURM_JOB, user or "", job_id, f"{name} ({job_id})" if name else job_id)
