"""A real `carl-tui serve` in a child process, on 127.0.0.1 and a free port, for the serve
tests (HTTP and websockets in test_serve.py, a real browser in test_serve_browser.py)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORDING = ROOT / "recordings" / "tiny-demo.jsonl"
HF_SECRET = "hf_PlantedServeTokenShouldNeverShow99"


@dataclass
class Served:
    proc: subprocess.Popen
    url: str  # the one the server printed, with its token
    stderr: list[str] = field(default_factory=list)

    @property
    def base(self) -> str:
        return self.url.split("/?", 1)[0]

    @property
    def token(self) -> str:
        return self.url.split("token=", 1)[1]

    @property
    def port(self) -> int:
        return int(self.base.rsplit(":", 1)[1])

    def sessions(self) -> list:
        """The dashboard processes the server runs now (psutil processes)."""
        import psutil

        try:
            children = psutil.Process(self.proc.pid).children()
        except psutil.NoSuchProcess:
            return []
        return [c for c in children if _alive(c)]

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("carl-tui serve did not stop on SIGINT") from None


def _alive(proc) -> bool:
    import psutil

    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def start_serving(*args: str, cwd: Path = ROOT, timeout: float = 60.0,
                  env: dict[str, str] | None = None, plant: bool = True) -> Served:
    """`carl-tui serve --port 0 ARGS`, once it has printed its URL; `plant`: with HF_SECRET
    as its HF_TOKEN (the tests look for it everywhere a secret must not be)."""
    planted = {"HF_TOKEN": HF_SECRET} if plant else {}
    env = {**os.environ, **planted, "PYTHONPATH": str(ROOT), **(env or {})}
    proc = subprocess.Popen([sys.executable, "-m", "carl_tui", "serve", "--port", "0", *args],
                            cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    stderr: list[str] = []
    threading.Thread(target=lambda: stderr.extend(proc.stderr), daemon=True).start()
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    found = re.search(r"http://\S+", lines[0]) if lines else None
    if found is None:
        proc.kill()
        proc.wait()
        raise AssertionError(f"no URL from carl-tui serve: {lines} {''.join(stderr)[-2000:]}")
    return Served(proc, found.group(0), stderr)


async def open_tab(client, served: Served, *shown: str, timeout: float = 60.0):
    """A tab's websocket (aiohttp, holding the cookie), once its dashboard has drawn the
    panels and every text of `shown`; returns it and what it drew."""
    import asyncio

    import aiohttp

    ws = await client.ws_connect(served.base.replace("http", "ws") + "/ws?width=160&height=45",
                                 origin=served.base)  # as the page's browser says it
    drawn = ""
    want = ("phase", "metrics", *shown)
    while not all(w in drawn for w in want):
        msg = await asyncio.wait_for(ws.receive(), timeout)
        assert msg.type == aiohttp.WSMsgType.BINARY, (msg, [w for w in want if w not in drawn])
        drawn += msg.data.decode("utf-8", "replace")
    return ws, drawn


async def enter(client, served: Served) -> None:
    """The printed URL, as a visitor opens it: the cookie is set, the page served."""
    async with client.get(served.url) as r:
        assert r.status == 200
