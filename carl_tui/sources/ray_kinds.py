"""The Ray kinds: one job (`--ray-job ID [--ray-address URL]`) and every job of a cluster
(`fleet --ray [--ray-address URL]`), read from the cluster dashboard's Jobs REST API
(`engines/ray.py`). Stdlib only at import: httpx and the engine load with the sources."""

from __future__ import annotations

from typing import Any

from carl_tui.identity import RAY_JOB
from carl_tui.sources.kinds import Flag, Opened, RequestError, SourceKind, SourceRequest

RAY_ADDRESS = Flag(
    "--ray-address", metavar="URL", needs=("ray_job", "ray"),
    help="the Ray cluster's dashboard (default: $RAY_ADDRESS, else http://127.0.0.1:8265; "
         "a remote one through `ssh -N -L 8265:127.0.0.1:8265 user@head`)",
    needs_message="--ray-address is the dashboard of a Ray cluster: give it with --ray-job "
                  "ID (or with `fleet --ray`)")


def _check_address(req: SourceRequest) -> None:
    address = req.get("ray_address")
    if address is None:
        return
    from carl_tui.engines.ray import dashboard_url  # lazy: httpx, once a Ray flag is given

    try:
        dashboard_url(address)
    except Exception as exc:  # noqa: BLE001 - a CarlError: said naming the flag
        raise RequestError(f"--ray-address: {exc}") from None


def _check_job(req: SourceRequest, hint) -> None:
    if not req.get("ray_job").strip():
        raise RequestError("--ray-job needs a job's submission id (see `carl-tui fleet "
                           "--ray` or `ray job list`)")
    _check_address(req)


def _open_job(req: SourceRequest) -> Opened:
    job, address = req.get("ray_job").strip(), req.get("ray_address")

    def make() -> list[Any]:
        from carl_tui.sources.ray_job import ray_job_source  # lazy: httpx, on first use

        return [ray_job_source(job, address)]
    return Opened(make, f"carl-tui · Ray job {job}", req.run)


def _open_jobs(req: SourceRequest) -> Opened:
    address, headless = req.get("ray_address"), req.must_exist

    def make() -> list[Any]:
        from carl_tui.sources.ray_job import ray_jobs_source  # lazy: httpx, on first use

        # headless (`fleet --json`): each job's log read once; live: only the run in view's
        return [ray_jobs_source(address, read_logs=headless)]
    return Opened(make, f"carl-tui · Ray jobs of {address or 'the local cluster'}", req.run)


RAY_JOB_KIND = SourceKind(
    name=RAY_JOB,
    flags=(Flag("--ray-job", metavar="ID", help="follow a Ray job (its submission id)"),
           RAY_ADDRESS),
    open=_open_job,
    check=_check_job,
    remote=True,
    run_sources=(RAY_JOB,),
)

RAY_JOBS_KIND = SourceKind(
    name="ray-jobs",
    # The dashboard's too (`carl-tui --ray`: the cluster's jobs, newest first): a parser
    # without it took `fleet --ray` for an ambiguous --ray-job or --ray-address.
    flags=(Flag("--ray", switch=True, commands=frozenset({"dashboard", "fleet"}), type=None,
                help="every job of the Ray cluster at --ray-address, one row each, with "
                     "the steps, phase and task metric of its log: a list call and the "
                     "logs' new text a refresh (with --json: each job's log once)"),
           RAY_ADDRESS),
    open=_open_jobs,
    check=lambda req, hint: _check_address(req),
    remote=True,
    run_sources=(RAY_JOB,),
)
