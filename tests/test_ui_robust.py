"""The dashboard never waits on I/O to quit, and keys pressed while it quits do nothing."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

from carl_tui.sources.trackio.remote import TrackioRemoteSource
from carl_tui.ui.app import DashboardConfig, build_app
from tests.conftest import ScriptedSource

SIZE = (120, 36)


class SilentServer:
    """Accepts connections and never answers: a hung server."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.conns: list[socket.socket] = []
        self.accepted = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            self.accepted.set()

    def close(self) -> None:
        for c in self.conns:
            c.close()
        self.sock.close()


async def test_quitting_while_a_server_hangs_does_not_wait_for_it():
    server = SilentServer()
    try:
        source = TrackioRemoteSource(server.url, project="p", timeout=30.0)
        app = build_app(DashboardConfig(sources=[source], refresh_interval=0.05))
        async with app.run_test(size=SIZE) as pilot:
            assert await _wait(lambda: server.accepted.is_set(), 5.0), "no request was made"
            t0 = time.monotonic()
            await pilot.press("q")
        quit_s = time.monotonic() - t0
        # The request would hang for 30 s; quitting is not held up by it.
        assert quit_s < 5.0 and app.return_code == 0
    finally:
        server.close()


async def test_keys_pressed_while_quitting_do_nothing():
    src = ScriptedSource()
    app = build_app(DashboardConfig(sources=[src], refresh_interval=0.05))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause(0.2)
        await pilot.press("q", "m", "r", "f", "x")
    assert app.return_code == 0


def test_q_then_m_in_a_real_terminal_exits_cleanly(tmp_path):
    """The real CLI under a pseudo-terminal: q then m at once, exit status 0, no traceback."""
    stream = tmp_path / "s.jsonl"
    stream.write_text('{"step": 1, "loss": 0.5}\n')
    code = (
        "import os, pty, sys, time, select\n"
        f"argv = [sys.executable, '-m', 'carl_tui', '--watch', {str(stream)!r}]\n"
        "pid, fd = pty.fork()\n"
        "if pid == 0:\n"
        "    os.environ['TERM'] = 'xterm-256color'\n"
        "    os.execv(argv[0], argv)\n"
        "out = b''\n"
        "deadline = time.time() + 20\n"
        "while time.time() < deadline and b'loss' not in out:\n"
        "    r, _, _ = select.select([fd], [], [], 0.2)\n"
        "    if r:\n"
        "        try: out += os.read(fd, 65536)\n"
        "        except OSError: break\n"
        "os.write(fd, b'qm')\n"
        "while True:\n"
        "    r, _, _ = select.select([fd], [], [], 5)\n"
        "    if not r: break\n"
        "    try:\n"
        "        chunk = os.read(fd, 65536)\n"
        "    except OSError:\n"
        "        break\n"
        "    if not chunk: break\n"
        "    out += chunk\n"
        "_, status = os.waitpid(pid, 0)\n"
        "print('STATUS', os.waitstatus_to_exitcode(status))\n"
        "print('TRACEBACK' if b'Traceback' in out or b'NoMatches' in out else 'CLEAN')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True,
                         text=True,
                         timeout=60)
    assert "STATUS 0" in res.stdout and "CLEAN" in res.stdout, res.stdout + res.stderr


async def _wait(predicate, timeout: float) -> bool:
    import asyncio

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.05)
    return False
