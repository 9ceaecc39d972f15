"""The built-in kinds of source, registered in the order their flags are listed, said
("--watch and --job: choose one source") and read by `fleet` (its rows' order). Import
this (sources/open.py does) to read the registry; stdlib only at import."""

from __future__ import annotations

from carl_tui.sources.file_kind import FILE
from carl_tui.sources.hf_job_kinds import HF_JOB_KIND, HF_JOBS_KIND
from carl_tui.sources.kinds import register, registered
from carl_tui.sources.ray_kinds import RAY_JOB_KIND, RAY_JOBS_KIND
from carl_tui.sources.replay_kind import REPLAY_KIND
from carl_tui.sources.slurm_kinds import SLURM_JOB_KIND, SLURM_JOBS_KIND
from carl_tui.sources.tensorboard_kind import TENSORBOARD_KIND
from carl_tui.sources.trackio.kinds import TRACKIO_SERVER, TRACKIO_STORE
from carl_tui.sources.wandb_kind import WANDB_KIND

BUILT_IN = (FILE, TENSORBOARD_KIND, WANDB_KIND, TRACKIO_SERVER, HF_JOB_KIND, HF_JOBS_KIND,
            RAY_JOB_KIND, RAY_JOBS_KIND, SLURM_JOB_KIND, SLURM_JOBS_KIND, REPLAY_KIND,
            TRACKIO_STORE)

for _kind in BUILT_IN:
    if _kind not in registered():
        register(_kind)

__all__ = ["BUILT_IN"]
