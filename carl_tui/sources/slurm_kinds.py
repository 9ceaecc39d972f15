"""The Slurm kinds: one batch job (`--slurm-job ID`) and every job of a user (`fleet
--slurm [--user U]`). Stdlib only at import: the engine and the readers are imported
when the sources are built. The Slurm commands are looked for then: a machine without
them is told so by the source ("no scontrol on PATH: ... run it on a login node")."""

from __future__ import annotations

from typing import Any

from carl_tui.identity import SLURM_JOB
from carl_tui.sources.kinds import Flag, Opened, RequestError, SourceKind, SourceRequest

USER = Flag("--user", commands=frozenset({"fleet"}), needs=("slurm",),
            help="whose Slurm jobs --slurm lists (default: yours; '*': every user's)",
            needs_message="--user picks whose Slurm jobs `fleet --slurm` lists: give it "
                          "with --slurm")


def _check_job(req: SourceRequest, hint) -> None:
    job = req.get("slurm_job").strip()
    if not job.replace("_", "").isdigit():
        raise RequestError(f"--slurm-job takes a job id, a number ({job!r}: `squeue --me` "
                           "lists yours)")


def _open_job(req: SourceRequest) -> Opened:
    job = req.get("slurm_job").strip()

    def make() -> list[Any]:
        from carl_tui.sources.slurm_job import SlurmJobSource  # lazy: a kind's reader on first use

        return [SlurmJobSource(job)]
    return Opened(make, f"carl-tui · slurm job {job}", req.run)


def _open_jobs(req: SourceRequest) -> Opened:
    user, headless = req.get("user"), req.must_exist

    def make() -> list[Any]:
        from carl_tui.sources.slurm_job import SlurmJobsListSource  # lazy: on first use

        # headless (`fleet --json`): each job's log read once; live: only the run in view's
        return [SlurmJobsListSource(user, read_logs=headless)]
    return Opened(make, f"carl-tui · slurm jobs of {user or 'yours'}", req.run)


SLURM_JOB_KIND = SourceKind(
    name=SLURM_JOB,
    flags=(Flag("--slurm-job", metavar="JOB_ID",
                help="follow a Slurm batch job: its state from Slurm, its log from its "
                     "StdOut file (run where sbatch and squeue work: a login node)"),),
    open=_open_job,
    check=_check_job,
    remote=True,
    run_sources=(SLURM_JOB,),
)

SLURM_JOBS_KIND = SourceKind(
    name="slurm-jobs",
    flags=(Flag("--slurm", switch=True, commands=frozenset({"fleet"}), type=None,
                help="every Slurm job of --user (default: yours), one row each, a "
                     "pending job's reason beside its state: one squeue a refresh; a "
                     "job's log is read for the run opened (with --json: each job's "
                     "log once)"), USER),
    open=_open_jobs,
    remote=True,
    run_sources=(SLURM_JOB,),
)
