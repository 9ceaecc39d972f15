"""The Hugging Face Jobs kinds: one job (`--job ID [--namespace NS]`) and every job of a
namespace (`fleet --jobs [--namespace NS]`). Stdlib only at import: huggingface_hub is
looked for without importing it, and imported when the sources are built."""

from __future__ import annotations

from importlib.util import find_spec
from typing import Any

from carl_tui.identity import HF_JOB
from carl_tui.sources.kinds import Flag, Opened, RequestError, SourceKind, SourceRequest

NAMESPACE = Flag("--namespace", help="namespace of the job (user or org)",
                 fleet_help="namespace of --job or --jobs (user or org; default: yours)",
                 needs=("job", "jobs"),
                 needs_message="--namespace is the namespace of a job: give it with --job "
                               "JOB_ID (or with `fleet --jobs`)")


def _need_hub(flag: str) -> None:
    if find_spec("huggingface_hub") is None:  # found without importing it (0.1 s)
        raise RequestError(f"{flag} needs the [hub] extra: pip install 'carl-tui[hub]' "
                           "(no module named 'huggingface_hub')")


def _check_job(req: SourceRequest, hint) -> None:
    if not req.get("job").strip():
        raise RequestError("--job needs a job id (see `j` in the dashboard or `hf jobs ps`)")


def _open_job(req: SourceRequest) -> Opened:
    _need_hub("--job")
    job, namespace = req.get("job").strip(), req.get("namespace")

    def make() -> list[Any]:
        from carl_tui.sources.hf_jobs import HfJobSource  # huggingface_hub: on first use

        return [HfJobSource(job, namespace=namespace)]
    return Opened(make, f"carl-tui · job {req.get('job')}", req.run)


def _open_jobs(req: SourceRequest) -> Opened:
    _need_hub("--jobs")
    namespace, headless = req.get("namespace"), req.must_exist

    def make() -> list[Any]:
        from carl_tui.sources.hf_jobs_list import HfJobsListSource  # on first use

        # headless (`fleet --json`): each job's log read once; live: only the run in view's
        return [HfJobsListSource(namespace, read_logs=headless)]
    return Opened(make, f"carl-tui · jobs of {namespace or 'yours'}", req.run)


HF_JOB_KIND = SourceKind(
    name=HF_JOB,
    flags=(Flag("--job", metavar="JOB_ID", help="follow a Hugging Face Job"), NAMESPACE),
    open=_open_job,
    check=_check_job,
    remote=True,
    run_sources=(HF_JOB,),
)

HF_JOBS_KIND = SourceKind(
    name="hf-jobs",
    flags=(Flag("--jobs", switch=True, commands=frozenset({"fleet"}), type=None,
                help="every Hugging Face job of --namespace (default: yours), one "
                     "row each: one list call a refresh; a job's log is read for "
                     "the run opened (with --json: each job's log once)"), NAMESPACE),
    open=_open_jobs,
    remote=True,
    run_sources=(HF_JOB,),
)
