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
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import httpx

from tests.fakes.server import FakeServer, Request, Response


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


_SHOW = "import sys; from trackio.cli import main; sys.argv = ['trackio', 'show', '--host', '127.0.0.1']; main()"


class TrackioServer:
    """`with TrackioServer(tmp_path) as srv:`; `srv.url`, `srv.stop()`, `srv.start()`."""

    def __init__(self, data_dir: Path, port: int | None = None):
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
