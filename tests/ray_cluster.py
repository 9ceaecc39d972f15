"""Real job engines for the tests: a local Ray head, started and stopped with bounded times.

Ray lives in its own virtual environment (`make ray`: build/ray-venv), never the
project's. Without it the Ray tests skip with one line; under CI (env CI set) they fail.
The head's PATH puts this interpreter's folder first, so a job's `python` is the project's
(with torch and TRL), and its PYTHONPATH is this checkout, so `python -m carl_tui` is the
code under test. Every port is free-picked, the temp dir is short (Ray's socket paths have
a length limit), and `timings` records the set-up and tear-down seconds.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.machine import free_port, skip_or_fail

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 90.0  # `ray start` and the dashboard answering (3.6 s when idle)
STOP_TIMEOUT_S = 60.0
STOP_GRACE_S = 5.0  # after TERM, before KILL: a test head has nothing to save
timings: dict[str, float] = {}  # "setup", "teardown": seconds, for the report


def ray_binary() -> str | None:
    """The `ray` of build/ray-venv (`make ray`), else $CARL_TUI_RAY, else none."""
    found = ROOT / "build" / "ray-venv" / "bin" / "ray"
    if found.exists():
        return str(found)
    given = os.environ.get("CARL_TUI_RAY")
    return given if given and Path(given).exists() else None


def need_ray() -> str:
    """The `ray` program, or skip (fail under CI) saying how to get it."""
    ray = ray_binary()
    if ray is None:
        why = ("no Ray here: `make ray` installs it into build/ray-venv "
               "(python3 -m venv build/ray-venv && build/ray-venv/bin/pip install 'ray[default]')")
        skip_or_fail("Ray", why)
    return ray


@dataclass
class RayHead:
    url: str
    temp_dir: str
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None  # `ray start --block`, leader of its session


def head_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RAY_", "HF_TOKEN")) and k != "PYTHONPATH"}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = str(ROOT)
    env.update({"RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
                "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"})
    return env


def start_head(ray: str) -> RayHead:
    """`ray start --head --block` in a session of its own: the head and every process it
    starts are this test run's alone, and stopping them touches no other Ray on the
    machine (`ray stop` would stop every one)."""
    temp_dir = tempfile.mkdtemp(prefix="cray")
    dash = free_port()
    env = head_env()
    args = [ray, "start", "--head", "--block", f"--port={free_port()}",
            f"--dashboard-port={dash}",
            "--dashboard-host=127.0.0.1", "--include-dashboard=true", "--num-cpus=2",
            "--num-gpus=0", "--disable-usage-stats", f"--temp-dir={temp_dir}",
            f"--ray-client-server-port={free_port()}",
            f"--dashboard-agent-listen-port={free_port()}",
            f"--dashboard-agent-grpc-port={free_port()}",
            f"--runtime-env-agent-port={free_port()}",
            f"--metrics-export-port={free_port()}",
            f"--node-manager-port={free_port()}", f"--object-manager-port={free_port()}"]
    log = open(Path(temp_dir) / "ray-start.log", "w")  # noqa: SIM115 (kept by the head)
    proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    head = RayHead(f"http://127.0.0.1:{dash}", temp_dir, env, proc)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            if httpx.get(f"{head.url}/api/jobs/", timeout=2.0).status_code == 200:
                return head
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_head(head)
            said = (Path(temp_dir) / "ray-start.log").read_text(errors="replace")[-2000:] \
                if Path(temp_dir).exists() else ""
            raise RuntimeError(f"the Ray head did not answer at {head.url} within "
                               f"{START_TIMEOUT_S:.0f} s (ray start: {proc.poll()}): {said}")
        time.sleep(0.2)


def _processes_of(temp_dir: str) -> list[int]:
    """Processes whose command line names this head's temp dir (the ones Ray started in a
    session of their own, if any did)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if temp_dir.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def stop_head(head: RayHead) -> None:
    """End the head's session (TERM, then KILL after STOP_GRACE_S), and any process
    still naming its temp dir."""
    proc = head.proc
    if proc is not None:
        for sig, wait in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, STOP_TIMEOUT_S)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
    for pid in _processes_of(head.temp_dir):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(head.temp_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def ray_head():
    """A real Ray head on loopback for the session: its dashboard URL."""
    ray = need_ray()
    t0 = time.monotonic()
    head = start_head(ray)
    timings["setup"] = time.monotonic() - t0
    yield head
    t0 = time.monotonic()
    stop_head(head)
    timings["teardown"] = time.monotonic() - t0
    print(f"\nray head: set-up {timings['setup']:.1f} s, tear-down "
          f"{timings['teardown']:.1f} s", file=sys.stderr)
