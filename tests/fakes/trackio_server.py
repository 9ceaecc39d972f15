"""A real Trackio server on 127.0.0.1, and real `trackio.log` writers, as subprocesses.

`TrackioServer(data_dir)` runs `trackio show --host 127.0.0.1` with the port
taken from `GRADIO_SERVER_PORT` and `TRACKIO_DIR` pointing at `data_dir`;
it is ready when `GET /version` answers. `start_writer()` runs a separate
process that logs points with `trackio.init` / `trackio.log` into the same
directory, which the server reads.

Also `FaultProxy`: a loopback proxy in front of any server that can answer
with 5xx, garbage, 401 or slowly, to exercise a client's error handling.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.fakes.server import FakeServer, Request, Response
from tests.machine import free_port


def _env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACKIO_")}
    env.update(
        TRACKIO_DIR=str(data_dir),
        HF_HUB_OFFLINE="1",
        BROWSER="true",  # `trackio show` opens a browser; make that a no-op
        PYTHONUNBUFFERED="1",
        **extra,
    )
    env.pop("HF_TOKEN", None)
    return env


_SHOW = (
    "import sys; from trackio.cli import main; "
    "sys.argv = ['trackio', 'show', '--host', '127.0.0.1']; main()"
)


class TrackioServer:
    """`with TrackioServer(tmp_path) as srv:`; `srv.url`, `srv.stop()`, `srv.start()`."""

    def __init__(self, data_dir: Path, port: int | None = None):
        pytest.importorskip("trackio")  # the real server needs trackio
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None
        self._log = self.data_dir / "server.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> TrackioServer:
        log = open(self._log, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SHOW],
            env=_env(self.data_dir, GRADIO_SERVER_PORT=str(self.port)),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"trackio server exited: {self._log.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/version", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("trackio server did not answer /version in time")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


_WRITER = textwrap.dedent(
    """
    import json, sys, time
    import trackio
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    trackio.init(project=spec["project"], name=spec["run"], config=spec.get("config"),
                 embed=False, auto_log_cpu=False, auto_log_gpu=False)
    print("READY", flush=True)
    for point in spec["points"]:
        if "t_logged" in point:
            point["t_logged"] = time.time()
        trackio.log(point)
        if spec.get("delay"):
            time.sleep(spec["delay"])
    trackio.finish()
    print("DONE", flush=True)
    """
)


def start_writer(
    data_dir: Path,
    project: str,
    run: str,
    points: list[dict],
    *,
    config: dict | None = None,
    delay: float = 0.0,
) -> subprocess.Popen:
    """A separate process logging `points` one `trackio.log` call each, `delay` s apart."""
    pytest.importorskip("trackio")
    spec = {"project": project, "run": run, "points": points, "config": config, "delay": delay}
    spec_file = Path(data_dir) / f"writer-{uuid.uuid4().hex}.json"
    spec_file.write_text(json.dumps(spec))
    return subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(spec_file)],
        env=_env(Path(data_dir)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def wait_writer(proc: subprocess.Popen, timeout: float = 60.0) -> str:
    out, _ = proc.communicate(timeout=timeout)
    if proc.returncode != 0 or "DONE" not in out:
        raise RuntimeError(f"trackio writer failed ({proc.returncode}): {out[-2000:]}")
    return out


class FaultProxy:
    """Forwards every request to `upstream` unless a fault is set.

    `fault` is one of None, "500", "garbage", "401", "403", "404", "slow"
    (`slow_s` seconds before answering).
    """

    def __init__(self, upstream: str):
        self.upstream = upstream.rstrip("/")
        self.fault: str | None = None
        self.slow_s = 10.0
        self.forwarded = 0
        self.server = FakeServer()
        self._client = httpx.Client(timeout=30.0)
        self._lock = threading.Lock()
        for method in ("GET", "POST"):
            self.server.route(method, r"/.*", self._handle)

    @property
    def url(self) -> str:
        return self.server.url

    def _handle(self, req: Request) -> Response:
        fault = self.fault
        if fault == "500":
            return Response.json({"error": "internal failure"}, status=500)
        if fault == "garbage":
            return Response(200, b"<html>Space is building</html>", {"Content-Type": "text/html"})
        if fault in ("401", "403", "404"):
            return Response(int(fault), b"Unauthorized" if fault != "404" else b"Not Found")
        if fault == "slow":
            time.sleep(self.slow_s)
        r = self._client.request(
            req.method,
            self.upstream + req.path,
            content=req.body,
            headers={"Content-Type": req.headers.get("content-type", "application/json")},
        )
        with self._lock:
            self.forwarded += 1
        return Response(
            r.status_code, r.content, {"Content-Type": r.headers.get("content-type", "")}
        )

    def __enter__(self):
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()
        self._client.close()


_LIVE_WRITER = textwrap.dedent(
    """
    import json, sys, time
    import trackio
    project, run = sys.argv[1], sys.argv[2]
    trackio.init(project=project, name=run, embed=False, auto_log_cpu=False, auto_log_gpu=False)
    print("READY", flush=True)
    for line in sys.stdin:
        for point in json.loads(line):
            if "t_logged" in point:
                point["t_logged"] = time.time()
            trackio.log(point)
        print("LOGGED", flush=True)
    trackio.finish()
    """
)


class LiveWriter:
    """A long-lived process that calls `trackio.log` for each batch of points sent to it."""

    def __init__(self, data_dir: Path, project: str, run: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _LIVE_WRITER, project, run],
            env=_env(Path(data_dir)),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._expect("READY")

    def _expect(self, word: str) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip() == word:
                return
        raise RuntimeError(f"trackio writer exited before {word}")

    def log(self, points: list[dict]) -> None:
        """Returns once `trackio.log` was called for every point (the write follows
        within trackio's own batching interval)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(points) + "\n")
        self.proc.stdin.flush()
        self._expect("LOGGED")

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# -- system metrics and alerts ------------------------------------------------

_ACTION_WRITER = textwrap.dedent(
    """
    import json, sys, time
    import trackio
    spec = json.loads(sys.argv[1])
    trackio.init(project=spec["project"], name=spec["run"], embed=False, auto_log_cpu=False,
                 auto_log_gpu=spec["auto_log_gpu"], gpu_log_interval=spec["gpu_log_interval"])
    print("READY", flush=True)

    def act(action):
        kind, args = action[0], action[1:]
        if kind == "log":
            trackio.log(*args)
        elif kind == "system":
            trackio.log_system(args[0])
        elif kind == "cpu":
            print("CPU " + json.dumps(trackio.log_cpu()), flush=True)
        elif kind == "alert":
            title, text, level = args
            trackio.alert(title, text, level=trackio.AlertLevel(level))
        elif kind == "sleep":
            time.sleep(args[0])
        else:
            raise ValueError(kind)

    for line in sys.stdin:
        for action in json.loads(line):
            act(action)
        print("DONE-BATCH", flush=True)
    trackio.finish()
    print("FINISHED", flush=True)
    """
)


class ActionWriter:
    """A long-lived real trackio writer driven by lists of actions:
    `["log", {metrics}]`, `["system", {metrics}]` (`trackio.log_system`), `["cpu"]`
    (`trackio.log_cpu()`: real psutil readings, echoed back in `cpu_logged`),
    `["alert", title, text, level]` (`trackio.alert`), `["sleep", seconds]`.
    `auto_log_gpu` starts trackio's own GPU monitor (with a fake NVML on
    `extra_path`, see `write_fake_nvml`)."""

    def __init__(
        self,
        data_dir: Path,
        project: str,
        run: str,
        *,
        auto_log_gpu: bool = False,
        gpu_log_interval: float = 10.0,
        extra_path: Path | None = None,
        extra_env: dict[str, str] | None = None,
    ):
        spec = {"project": project, "run": run, "auto_log_gpu": auto_log_gpu,
                "gpu_log_interval": gpu_log_interval}
        env = _env(Path(data_dir), **(extra_env or {}))
        env.pop("CUDA_VISIBLE_DEVICES", None)
        if extra_path is not None:
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(extra_path), env.get("PYTHONPATH", "")) if p
            )
        self.cpu_logged: list[dict] = []
        self.output: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _ACTION_WRITER, json.dumps(spec)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._expect("READY")

    def _expect(self, word: str) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            if line.startswith("CPU "):
                self.cpu_logged.append(json.loads(line[4:]))
            if line.strip() == word:
                return
        raise RuntimeError(f"trackio writer exited before {word}: {''.join(self.output)[-2000:]}")

    def do(self, actions: list[list]) -> None:
        """Returns once every action was done (writes follow within trackio's batching)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(actions) + "\n")
        self.proc.stdin.flush()
        self._expect("DONE-BATCH")

    def close(self) -> None:
        """`trackio.finish()`: everything queued is written when this returns."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self._expect("FINISHED")
            self.proc.wait(30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(5)

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


_FAKE_NVML = textwrap.dedent(
    '''
    """A stand-in for NVIDIA's `pynvml` with two GPUs whose readings drift like a
    training's; every reading is appended to $FAKE_NVML_LOG (one JSON line per GPU
    per collection) so a test can compare what trackio stored with what it read."""
    import json, math, os

    NVML_TEMPERATURE_GPU = 0
    _COUNT = 2
    _ticks = {}

    class _Handle:
        def __init__(self, index):
            self.index = index
            self.reading = None

    class _Util:
        def __init__(self, gpu, memory):
            self.gpu, self.memory = gpu, memory

    class _Mem:
        def __init__(self, used, total):
            self.used, self.total, self.free = used, total, total - used

    def nvmlInit():
        pass

    def nvmlDeviceGetCount():
        return _COUNT

    def nvmlDeviceGetHandleByIndex(index):
        h = _Handle(index)
        n = _ticks[index] = _ticks.get(index, -1) + 1
        h.reading = {
            "gpu": index,
            "n": n,
            "util": int(round(55 + 35 * math.sin(0.7 * n + 1.3 * index))),
            "used": int(2**30 * (3.1 + 0.37 * n + 1.7 * index + 0.05 * math.cos(n))) + 4097,
            "total": 85_520_809_984,
            "power_mw": int(1000 * (160 + 45 * math.sin(0.3 * n + index))) + 7,
            "temp": 52 + (7 * n + 3 * index) % 19,
        }
        with open(os.environ["FAKE_NVML_LOG"], "a") as f:
            f.write(json.dumps(h.reading) + "\\n")
        return h

    def nvmlDeviceGetUtilizationRates(h):
        return _Util(h.reading["util"], 30)

    def nvmlDeviceGetMemoryInfo(h):
        return _Mem(h.reading["used"], h.reading["total"])

    def nvmlDeviceGetPowerUsage(h):
        return h.reading["power_mw"]

    def nvmlDeviceGetTemperature(h, sensor):
        return h.reading["temp"]
    '''
)


def write_fake_nvml(directory: Path) -> Path:
    """Write the stand-in `pynvml.py` into `directory` (put it on PYTHONPATH)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "pynvml.py").write_text(_FAKE_NVML)
    return directory
