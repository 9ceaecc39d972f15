"""Everything about talking to the Hugging Face Hub, in one place.

Used by both sides: the jobs source (`sources/hf_jobs.py`) and the actions
(launch, stop, push, the jobs list), as nvitop's `api/` stands apart from its
`tui/`. huggingface_hub is imported on first use, so start-up stays light and
the dashboard runs without the `[hub]` extra.

- The token: an explicit one, else `HF_TOKEN`, else the token saved by
  `hf auth login`. `HubToken` never prints its value.
- The client: `make_api()`, an `HfApi` with the user's token.
- Jobs: `TERMINAL_STAGES`, `stage_text()`, `job_of()` (a `JobInfo` as the one job type,
  `events.Job`), `list_jobs()` and `job_prices()`.
- Errors: `hub_error()` turns any failure of huggingface_hub (or the HTTP
  stack under it) into a `HubError` whose message is a plain sentence (no
  traceback, no token), with `kind`, `status` and `retry` set.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

from carl_tui.errors import CarlError, is_network_error
from carl_tui.events import STAGE_LIFE, Job, RunRef
from carl_tui.identity import job_run
from carl_tui.redact import MASK, redact, redact_argv

HUB_MISSING = "this needs huggingface_hub: pip install 'carl-tui[hub]'"
# The stages of a job that has ended: "COMPLETED", "CANCELED", "ERROR", "DELETED".
TERMINAL_STAGES = frozenset(s for s, life in STAGE_LIFE.items()
                            if life in ("finished", "failed", "stopped") and s != "ENDED")
NOT_AUTHORISED = (
    "the Hugging Face Hub rejected the token (401): log in again with `hf auth login` "
    "or set HF_TOKEN"
)


class HubError(CarlError):
    """A Hub request failed; the message says what and what to do."""


# -- the token ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HubToken:
    """A token and where it came from ("argument", "HF_TOKEN", "saved login")."""

    value: str = field(repr=False)
    origin: str = "argument"

    def __repr__(self) -> str:
        return f"HubToken(origin={self.origin!r}, value={MASK!r})"

    __str__ = __repr__

    def auth_header(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.value}"}


def hub_module():
    """`huggingface_hub`, imported on first use; a clear ImportError when it is missing."""
    try:
        # lazy: huggingface_hub only for what reaches the Hub (the [hub] extra)
        import huggingface_hub
    except ImportError:
        raise ImportError(HUB_MISSING) from None
    return huggingface_hub


def find_token(explicit: str | HubToken | None = None) -> HubToken | None:
    """The token to use, or None when the user has none."""
    if isinstance(explicit, HubToken):
        return explicit
    if explicit:
        return HubToken(explicit, "argument")
    env = os.environ.get("HF_TOKEN", "").strip()
    if env:
        return HubToken(env, "HF_TOKEN")
    try:
        from huggingface_hub import get_token  # lazy: keeps start-up light
    except ImportError:
        return None
    try:
        saved = get_token()
    except (OSError, ValueError):  # a broken token file must not stop the dashboard
        return None
    return HubToken(saved, "saved login") if saved else None


# -- the client -----------------------------------------------------------------------


def make_api(token: str | HubToken | None = None, endpoint: str | None = None) -> Any:
    """An `HfApi` with the user's token for `endpoint` (None: HF_ENDPOINT or the Hub)."""
    found = find_token(token)
    return hub_module().HfApi(endpoint=endpoint, token=found.value if found else None)


def whoami(api: Any) -> str:
    """The token's user name."""
    token = getattr(api, "token", None)
    return api.whoami(token=token)["name"] if token else api.whoami()["name"]


# -- jobs -----------------------------------------------------------------------------


def stage_text(value: Any) -> str:
    """Enum members (JobStage, JobHardware) and plain strings alike, as their value."""
    return str(getattr(value, "value", value))


def epoch(dt: Any) -> float | None:
    return dt.timestamp() if dt is not None and hasattr(dt, "timestamp") else None


def job_label(info: Any) -> str:
    """What the jobs list shows beside a job: its labels, else its command (or image),
    secrets masked, then cut to 80 characters."""
    labels = getattr(info, "labels", None) or {}
    if labels:
        return redact(", ".join(f"{k}={v}" for k, v in labels.items()))
    command = getattr(info, "command", None) or []
    text = " ".join(str(c) for c in command) or (getattr(info, "docker_image", None) or "")
    text = redact(text)  # a command line may carry a token: mask before cutting it short
    return text if len(text) <= 80 else text[:77] + "..."


def job_of(info: Any, namespace: str, run: RunRef | None = None, **kw: Any) -> Job:
    """A `JobInfo` of huggingface_hub (launched, inspected or listed) as a `Job` of `run`
    (default: the run the HF Jobs source follows for it). `kw` sets other fields (the
    name given at launch). Its command and label are masked here."""
    status = getattr(info, "status", None)
    job = Job(
        run or job_run(namespace, info.id),
        info.id,
        stage_text(getattr(status, "stage", None) or "UNKNOWN"),
        namespace=namespace,
        flavor=stage_text(getattr(info, "flavor", None) or ""),
        message=str(getattr(status, "message", None) or ""),
        url=str(getattr(info, "url", "") or ""),
        created_at=epoch(getattr(info, "created_at", None)),
        started_at=epoch(getattr(info, "started_at", None)),
        finished_at=epoch(getattr(info, "finished_at", None)),
        command=redact_argv(getattr(info, "command", None) or ()),
        label=job_label(info),
    )
    return replace(job, **kw) if kw else job


def list_jobs(
    namespace: str | None = None, api: Any = None, *, token: str | HubToken | None = None
) -> list[Job]:
    """The user's (or `namespace`'s) jobs, newest first. Raises HubError."""
    api = api or make_api(token)
    try:
        ns = namespace or whoami(api)
        infos = list(api.list_jobs(namespace=ns))
    except Exception as exc:  # noqa: BLE001 - any Hub failure becomes a readable message
        raise hub_error(exc, "Listing your jobs", token=getattr(api, "token", None)) from None
    rows = [job_of(info, ns) for info in infos]
    rows.sort(key=lambda r: r.created_at or 0.0, reverse=True)
    return rows


_PER_HOUR = {"second": 3600.0, "minute": 60.0, "hour": 1.0, "day": 1.0 / 24}


def price_per_hour(unit_cost_usd: float, unit_label: str) -> float:
    """A Jobs hardware price (USD per `unit_label`: "minute", "hour", ...) per hour."""
    return float(unit_cost_usd) * _PER_HOUR.get((unit_label or "minute").lower().rstrip("s"),
                                                60.0)


def job_prices(api: Any = None) -> dict[str, float]:
    """Each Jobs hardware flavor's price in USD per hour, as the Hub lists them. Raises
    HubError."""
    api = api or make_api()
    try:
        raw = api.list_jobs_hardware()
    except Exception as exc:  # noqa: BLE001 - any Hub failure becomes a readable message
        raise hub_error(exc, "Listing Jobs hardware", token=getattr(api, "token", None)) from None
    return {hw.name: price_per_hour(hw.unit_cost_usd, hw.unit_label) for hw in raw}


# -- errors ---------------------------------------------------------------------------


def _status(exc: BaseException) -> int | None:
    code = getattr(getattr(exc, "response", None), "status_code", None)
    return code if isinstance(code, int) else None


def hub_error(
    exc: BaseException,
    what: str = "",
    *,
    repo_id: str = "",
    namespace: str = "",
    token: Any = None,
) -> CarlError:
    """A plain message for a failure of huggingface_hub during `what` ("" for a source,
    whose status bar already names it)."""
    if isinstance(exc, CarlError):
        return exc
    failed = f"{what} failed: " if what else ""
    status = _status(exc)
    target = repo_id or namespace
    on = f" on {target}" if target else ""

    def err(text: str, kind: str, retry: bool) -> HubError:
        return HubError(failed + text, kind=kind, status=status, retry=retry)

    if status == 401:
        return err(NOT_AUTHORISED, "auth", False)
    if status == 403:
        return err(f"permission denied{on} (403): the token needs write access to that "
                   "namespace (a fine-grained token may lack it)", "forbidden", False)
    if status == 402:
        return err("payment required (402): Jobs need a billing method or credits on the "
                   "namespace", "forbidden", False)
    if status == 404:
        return err(f"not found{on} (404)", "not_found", False)
    if status == 409:
        return err(f"conflict{on} (409)", "conflict", False)
    if status == 429:
        return err("rate limited by the Hugging Face Hub (429): wait a minute and retry",
                   "rate_limit", True)
    if status is not None and status >= 500:
        return err(f"the Hugging Face Hub had a server error ({status}); try again shortly",
                   "server", True)
    if status is not None:
        return err(f"the Hub answered {status}", "unknown", True)
    if is_network_error(exc):
        name = type(exc).__name__
        if "Timeout" in name:
            return err("the Hugging Face Hub did not answer in time", "network", True)
        return err("the connection to the Hugging Face Hub was lost or refused; check your "
                   "network", "network", True)
    if isinstance(exc, FileNotFoundError):
        return err(f"{exc.filename or exc} does not exist", "missing", False)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    detail = redact(f"{type(exc).__name__}: {text}" if text else type(exc).__name__, [token])
    return err(detail[:300], "unknown", True)
