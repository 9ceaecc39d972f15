"""`carl-tui serve` over real HTTP and websockets: the door (a token), the limit on
sessions, dashboards that end with their tab and with the server, clear errors."""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys

import pytest

from carl_tui.cli import main
from tests.conftest import wait_until
from tests.serving import HF_SECRET, RECORDING, enter, open_tab, start_serving

pytest.importorskip("textual_serve")
aiohttp = pytest.importorskip("aiohttp")
httpx = pytest.importorskip("httpx")
pytest.importorskip("psutil")


@pytest.fixture
def served():
    srv = start_serving("--watch", str(RECORDING), "--max-sessions", "2")
    yield srv
    srv.stop()


def test_the_door_wants_the_token_and_moves_it_into_a_cookie(served):
    assert served.url.startswith("http://127.0.0.1:") and len(served.token) >= 32
    with httpx.Client() as client:
        for path in ("/", "/?token=wrong", "/static/js/textual.js", "/ws", "/download/x"):
            r = client.get(served.base + path)
            assert r.status_code == 403, path
            assert "?token=" in r.text and f"ssh -N -L {served.port}:127.0.0.1" in r.text
        r = client.get(served.url)  # the printed URL: the token becomes a cookie
        assert r.status_code == 302 and r.headers["location"] == "/"
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        r = client.get(served.base + "/")
        assert r.status_code == 200
        assert f'data-session-websocket-url="ws://127.0.0.1:{served.port}/ws"' in r.text
        assert served.token not in r.text and HF_SECRET not in r.text
        assert "<title>carl-tui</title>" in r.text and "googleapis" not in r.text
        assert client.get(served.base + "/static/js/textual.js").status_code == 200
    said = "".join(served.stderr)
    assert "read-only" in said and "at most 2" in said and HF_SECRET not in said


async def test_sessions_are_bounded_end_with_their_tab_and_with_the_server(served):
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(cookie_jar=jar) as client:
        await enter(client, served)
        one, _ = await open_tab(client, served)
        two, _ = await open_tab(client, served)
        tabs = served.sessions()
        assert len(tabs) == 2
        for p in tabs:
            assert p.cmdline()[1:3] == ["-m", "carl_tui"] and p.cmdline()[-1] == "--read-only"
        with pytest.raises(aiohttp.WSServerHandshakeError) as full:
            await client.ws_connect(served.base.replace("http", "ws") + "/ws",
                                    origin=served.base)
        assert full.value.status == 503
        async with client.get(served.base + "/") as r:
            assert r.status == 503 and "All 2 sessions" in await r.text()

        first = {p.pid for p in tabs}
        await one.close()  # the tab closes: its dashboard ends, a place is free
        await asyncio.to_thread(wait_until, lambda: len(served.sessions()) == 1,
                                what="the closed tab's dashboard ended")
        assert {p.pid for p in served.sessions()} < first
        # the server frees the place once it has seen its session end (it says so)
        await asyncio.to_thread(wait_until, lambda: any(
            "ended (1 left)" in line for line in served.stderr), what="the place freed")
        async with client.get(served.base + "/") as r:
            assert r.status == 200
        left = served.sessions()[0]
        assert await asyncio.to_thread(served.stop) == 0  # ctrl+c: every dashboard ends
        assert not left.is_running() or left.status() == "zombie"
        await two.close()


@pytest.mark.parametrize("argv", [["--read-only", "--watch", "r.jsonl"],
                                  ["--watch", "r.jsonl", "--read-only"],
                                  ["replay", "r.jsonl", "--read-only"],
                                  ["demo", "--read-only"]])
def test_read_only_reaches_the_dashboard_wherever_the_flag_stands(argv):
    """serve appends --read-only to the tab's options: it must count after a subcommand."""
    from carl_tui.cli import _config, build_parser
    from carl_tui.sources.open import Opened

    args = build_parser().parse_args(argv)
    assert _config(args, Opened(list, "t")).settings.read_only is True
    without = [a for a in argv if a != "--read-only"]
    config = _config(build_parser().parse_args(without), Opened(list, "t"))
    assert config.settings.read_only is False


def test_serve_demo_refuses_to_replace_an_existing_stream(tmp_path, capsys):
    """As `carl-tui demo`: an existing --stream is one line and exit 2, the file as it was,
    before anything is served or trained."""
    stream = tmp_path / "run.jsonl"
    stream.write_text('{"step": 1}\n')
    assert main(["serve", "--port", "0", "demo", "--stream", str(stream)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "exists" in err and "--overwrite" in err, err
    assert stream.read_text() == '{"step": 1}\n'


@pytest.mark.parametrize("argv, says", [
    (["--port", "99999"], "--port: '99999': give a port number"),
    (["--max-sessions", "0"], "--max-sessions: '0': give a whole number >= 1"),
    (["summary", "x.jsonl"], "serve shows the dashboard, not `summary`"),
    (["--theme", "nope"], "--theme: unknown theme 'nope'"),
    (["--watch", "a.jsonl", "--tensorboard", "runs"], "choose one source"),
    (["replay", "no-such-file.jsonl"], "no such file"),
])
def test_bad_options_are_one_line_before_anything_is_served(argv, says, capsys, tmp_path,
                                                            monkeypatch):
    monkeypatch.chdir(tmp_path)
    try:
        code = main(["serve", *argv])
    except SystemExit as exc:  # argparse's own checks
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_port_in_use_is_one_line(capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["serve", "--port", str(port), "--watch", str(RECORDING)]) == 1
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in err and "Traceback" not in err


def test_listening_beyond_loopback_is_said_loudly(capsys):
    from carl_tui.serve.command import announce, is_loopback

    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.7")
    argv = [sys.executable, "-m", "carl_tui", "--watch", "r.jsonl", "--read-only"]
    for host, loud in (("127.0.0.1", False), ("0.0.0.0", True)):
        opts = argparse.Namespace(host=host, allow_actions=False, max_sessions=8)
        announce(argv, opts, "tok", 8123)
        out, err = capsys.readouterr()
        assert out.count("http://") == 1 and out.strip().endswith(":8123/?token=tok")
        assert ("WARNING: listening on 0.0.0.0" in err) is loud
        assert "ssh -N -L 8123:127.0.0.1:8123" in err or not loud


@pytest.mark.parametrize("argv", [["serve", "--help"], ["--help"]])
def test_help_loads_no_server(argv):
    code = ("import sys, contextlib, io\nfrom carl_tui.cli import main\nbuf = io.StringIO()\n"
            f"with contextlib.redirect_stdout(buf):\n    try:\n        main({argv!r})\n"
            "    except SystemExit:\n        pass\n"
            "heavy = ['aiohttp', 'textual_serve', 'textual', 'numpy']\n"
            "print([m for m in heavy if m in sys.modules]); print(buf.getvalue())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.startswith("[]")
    assert ("--allow-actions" in out) if argv[0] == "serve" else ("carl-tui serve" in out)


async def test_a_garbled_message_ends_its_tab_in_one_line_and_the_server_goes_on(served):
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as client:
        await enter(client, served)
        ws, drawn = await open_tab(client, served)
        assert HF_SECRET not in drawn
        await ws.send_str("this is not JSON")
        msg = await asyncio.wait_for(ws.receive(), 30)
        while msg.type == aiohttp.WSMsgType.BINARY:  # what was on its way, then the end
            msg = await asyncio.wait_for(ws.receive(), 30)
        assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
        await asyncio.to_thread(wait_until, lambda: not served.sessions(), what="its end")
        said = "".join(served.stderr)
        assert "a session ended: JSONDecodeError" in said and "Traceback" not in said
        again, _ = await open_tab(client, served)  # the server serves on
        await again.close()


STUBBORN = """
import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
sys.stdout.write("__GANGLION__\\n")
sys.stdout.flush()
while True:  # never reads the quit it is sent
    time.sleep(1)
"""


async def test_a_dashboard_that_does_not_quit_when_its_tab_closes_is_killed(monkeypatch):
    import psutil

    from carl_tui.serve import server as server_module

    monkeypatch.setattr(server_module, "STOP_GRACE", 0.5)
    srv = server_module.CarlServer([sys.executable, "-c", STUBBORN], port=0, max_sessions=1)
    ready = asyncio.get_running_loop().create_future()
    serving = asyncio.create_task(srv.run(ready.set_result))
    port = await asyncio.wait_for(ready, 30)
    try:
        async with aiohttp.ClientSession() as client:
            ws = await client.ws_connect(f"ws://127.0.0.1:{port}/ws?token={srv.token}",
                                         origin=f"http://127.0.0.1:{port}")
            for _ in range(600):
                pids = [s.pid for s in srv.sessions if s.pid]
                if pids:
                    break
                await asyncio.sleep(0.05)
            stubborn = psutil.Process(pids[0])
            assert stubborn.is_running()
            await ws.close()
            for _ in range(600):
                if not srv.sessions:
                    break
                await asyncio.sleep(0.05)
            assert not srv.sessions
            assert not stubborn.is_running() or stubborn.status() == psutil.STATUS_ZOMBIE
    finally:
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)


def test_the_demo_tabs_get_every_view_option_given():
    """`serve demo` rebuilds the tabs' options from the parsed ones (the demo's own, --seed
    and --stream, stay with the training): each view option must reach the tabs."""
    from carl_tui.cli import _add_view_options, build_parser
    from carl_tui.serve.command import _view_options

    view = argparse.ArgumentParser()
    _add_view_options(view)
    dests = {a.dest for a in view._actions if a.dest != "help"}
    given = ["demo", "--seed", "3", "--theme", "carl-light", "--gate-metric", "reward",
             "--vocab-size", "64", "--keymap", "app.quit=ctrl+q", "--output-dir", "out",
             "--push-repo", "me/tiny", "--read-only", "--guard", "nan_loss=stop"]
    demo = build_parser().parse_args(given)
    default = build_parser().parse_args(["demo"])
    assert [d for d in dests if getattr(demo, d) == getattr(default, d)] == []  # all given
    tab = build_parser().parse_args(["--watch", "s.jsonl", *_view_options(demo)])
    assert {d: getattr(tab, d) for d in dests} == {d: getattr(demo, d) for d in dests}
    assert tab.read_only is True and tab.theme == "carl-light"
