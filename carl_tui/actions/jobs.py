"""Launch, cancel, inspect Hugging Face Jobs, and list their hardware with prices.

Every call is blocking (one HTTP request, or a few): call them from a worker
thread. The HF token goes to the job only as a secret (`HF_TOKEN`); the job's
plain environment, its command line and every message here are free of it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from carl_tui.actions.action_error import ActionError
from carl_tui.actions.launch_spec import JOB_IMAGE, LaunchSpec
from carl_tui.events import Job
from carl_tui.hub import (
    TERMINAL_STAGES,
    find_token,
    hub_error,
    hub_module,
    job_of,
    price_per_hour,
    stage_text,
)


@dataclass(frozen=True)
class HardwareOption:
    """One Jobs hardware flavor, for the launch form's picker."""

    name: str
    pretty_name: str
    gpus: int
    accelerator: str  # e.g. "4x A10G (24 GB)", "" for CPU
    cpu: str
    ram: str
    price_per_hour_usd: float

    def label(self) -> str:
        acc = f" · {self.accelerator}" if self.accelerator else ""
        return f"{self.name} · {self.pretty_name}{acc} · ${self.price_per_hour_usd:.2f}/h"


def _hardware_option(hw) -> HardwareOption:
    acc = hw.accelerator
    gpus = 0
    acc_text = ""
    if acc is not None:
        try:
            gpus = int(str(acc.quantity).strip() or 0)
        except ValueError:
            gpus = 1
        acc_text = f"{acc.quantity}x {acc.model}" + (f" ({acc.vram})" if acc.vram else "")
    return HardwareOption(
        name=hw.name,
        pretty_name=hw.pretty_name,
        gpus=gpus,
        accelerator=acc_text,
        cpu=hw.cpu,
        ram=hw.ram,
        price_per_hour_usd=price_per_hour(hw.unit_cost_usd, hw.unit_label),
    )


class JobsClient:
    """Hugging Face Jobs for one user. `endpoint` defaults to HF_ENDPOINT / the Hub."""

    def __init__(self, *, token: str | None = None, endpoint: str | None = None,
                 namespace: str | None = None, api=None):
        if api is None:
            try:
                hub = hub_module()
            except ImportError as exc:
                raise ActionError(f"Hugging Face Jobs: {exc}.", kind="missing") from None
        found = find_token(token)
        self._token = found.value if found else None
        self._namespace = namespace or None
        self.api = api or hub.HfApi(endpoint=endpoint, token=self._token)

    # -- identity ------------------------------------------------------------

    def _need_token(self, what: str) -> str:
        if not self._token:
            raise ActionError(
                f"{what} failed: no Hugging Face token. Run `hf auth login` or set HF_TOKEN.",
                kind="auth",
            )
        return self._token

    def namespace(self, explicit: str | None = None) -> str:
        """The namespace to use: explicit, else the one given at creation, else the token's user."""
        if explicit:
            return explicit
        if self._namespace:
            return self._namespace
        self._need_token("Finding your user name")
        try:
            self._namespace = self.api.whoami()["name"]
        except Exception as exc:  # noqa: BLE001  (any client failure becomes a plain message)
            raise hub_error(exc, "Finding your user name") from None
        return self._namespace

    # -- hardware ------------------------------------------------------------

    def hardware(self, *, gpu_only: bool = False) -> list[HardwareOption]:
        """Flavors the Hub offers, cheapest first, with their price per hour."""
        try:
            raw = self.api.list_jobs_hardware()
        except Exception as exc:  # noqa: BLE001  (any client failure becomes a plain message)
            raise hub_error(exc, "Listing Jobs hardware") from None
        opts = [_hardware_option(hw) for hw in raw]
        if gpu_only:
            opts = [o for o in opts if o.gpus > 0]
        return sorted(opts, key=lambda o: (o.price_per_hour_usd, o.name))

    # -- launch / cancel / inspect -------------------------------------------

    def launch(self, spec: LaunchSpec, *, flavors: Iterable[str] | None = None) -> Job:
        """Validate `spec` and start the job. Raises `ActionError` listing every problem.
        The job it returns is the first state of the run the dashboard follows for it."""
        if spec.target != "hf-jobs":
            raise ActionError("This launch targets the local machine: use LocalJob.",
                              kind="invalid")
        problems = spec.validate(flavors=list(flavors) if flavors is not None else None)
        if problems:
            raise ActionError("Cannot launch:\n- " + "\n- ".join(problems), kind="invalid")
        token = self._need_token("Launching the job")
        ns = self.namespace(spec.namespace or None)
        try:
            info = self.api.run_job(
                image=JOB_IMAGE,
                command=spec.job_command(),
                env=spec.job_env(),
                secrets={"HF_TOKEN": token},
                flavor=spec.flavor,
                timeout=spec.timeout,
                name=spec.job_name(),
                labels=spec.job_labels(),
                namespace=ns,
            )
        except Exception as exc:  # noqa: BLE001  (any client failure becomes a plain message)
            raise hub_error(exc, "Launching the job", namespace=ns) from None
        job = job_of(info, ns, name=spec.job_name(),
                     flavor=stage_text(info.flavor or spec.flavor))
        if info.status is None:
            job = replace(job, stage="SCHEDULING")
        return job if job.created_at is not None else replace(job, created_at=time.time())

    def cancel(self, job_id: str, *, namespace: str | None = None) -> None:
        """Ask the Hub to cancel the job. The stage turns CANCELED shortly after."""
        ns = self.namespace(namespace)
        try:
            self.api.cancel_job(job_id=job_id, namespace=ns)
        except Exception as exc:  # noqa: BLE001  (any client failure becomes a plain message)
            raise hub_error(exc, f"Cancelling job {job_id}", namespace=ns) from None

    def inspect(self, job_id: str, *, namespace: str | None = None) -> Job:
        ns = self.namespace(namespace)
        try:
            info = self.api.inspect_job(job_id=job_id, namespace=ns)
        except Exception as exc:  # noqa: BLE001  (any client failure becomes a plain message)
            raise hub_error(exc, f"Reading job {job_id}", namespace=ns) from None
        return job_of(info, ns)

    def wait_for(
        self,
        job_id: str,
        stages: Iterable[str] = TERMINAL_STAGES,
        *,
        namespace: str | None = None,
        timeout: float = 60.0,
        interval: float = 2.0,
        on_state: Callable[[Job], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> Job:
        """Poll `inspect` until the job reaches one of `stages` (e.g. CANCELED after `cancel`).

        Raises `ActionError(kind="timeout")` when it does not within `timeout` seconds."""
        wanted = set(stages)
        deadline = time.monotonic() + timeout
        while True:
            state = self.inspect(job_id, namespace=namespace)
            if on_state is not None:
                on_state(state)
            if state.stage in wanted:
                return state
            if time.monotonic() >= deadline:
                raise ActionError(
                    f"Job {job_id} is still {state.stage} after {timeout:.0f} s.", kind="timeout"
                )
            sleep(interval)
