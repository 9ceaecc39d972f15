"""The dashboard never waits on I/O to quit, and keys pressed while it quits do nothing."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from benchmarks.pty_screen import Session
from carl_tui.sources.trackio.remote import TrackioRemoteSource
from carl_tui.ui.app import DashboardConfig, Settings, build_app
from tests.conftest import ScriptedSource, wait_for

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
        app = build_app(DashboardConfig(sources=[source], settings=Settings(refresh_interval=0.05)))
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, server.accepted.is_set, what="a request to the server")
            t0 = time.monotonic()
            await pilot.press("q")
        quit_s = time.monotonic() - t0
        # The request would hang for 30 s; quitting is not held up by it.
        assert quit_s < 5.0 and app.return_code == 0
    finally:
        server.close()


async def test_keys_pressed_while_quitting_do_nothing():
    src = ScriptedSource()
    app = build_app(DashboardConfig(sources=[src], settings=Settings(refresh_interval=0.05)))
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


@pytest.mark.parametrize("term", ["dumb", "unknown"])
def test_a_dumb_terminal_draws_idles_and_quits_on_q(tmp_path, term):
    """TERM=dumb (CI logs, editor shells, serial consoles; Rich reports 80x25 there until
    the real size arrives): the dashboard draws at the real size, idles, and q ends it.
    It used to flip between two layouts at 100 % of a core and ignore every key."""
    stream = tmp_path / "s.jsonl"
    stream.write_text('{"step": 1, "loss": 0.5}\n{"step": 2, "loss": 0.25}\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEXTUAL")}
    env["TERM"] = term
    argv = [sys.executable, "-m", "carl_tui", "--watch", str(stream)]
    with Session(argv, env, size=(160, 45)) as term_session:
        drawn = term_session.wait_until(lambda s: "step 2" in s.text(), 30.0)
        assert drawn is not None, term_session.screen.text()
        # The layout of the real 160x45 (entropy has its plot), not of 80x25 (stacked).
        assert term_session.wait_until(lambda s: "entropy (nats)" in s.text(), 5.0)
        cpu0, t0 = term_session.cpu_s(), time.monotonic()
        term_session.drain(2.0)
        busy = (term_session.cpu_s() - cpu0) / (time.monotonic() - t0)
        assert busy < 0.5, f"{busy:.0%} of a core while idle"
        os.write(term_session.fd, b"q")
        assert term_session.wait_exit(5.0) is not None, "q did not end it"
        assert term_session.returncode == 0
