"""`carl-tui serve` keeps other pages out and bounds what a visitor can ask, over real HTTP
and websockets: Origin and Host on every page and the websocket, a cookie that is not
the token, the terminal's size on connect and on resize, idle connections, no listing of
/static/."""

from __future__ import annotations

import asyncio
import json
import socket
from contextlib import contextmanager

import pytest

from tests.conftest import wait_until
from tests.serving import RECORDING, enter, start_serving

pytest.importorskip("textual_serve")
# the server's module loads textual-serve's own (aiohttp_jinja2): the [serve] extra
server = pytest.importorskip("carl_tui.serve.server")
MAX_WIDTH, MAX_HEIGHT = server.MAX_WIDTH, server.MAX_HEIGHT
aiohttp = pytest.importorskip("aiohttp")
httpx = pytest.importorskip("httpx")
psutil = pytest.importorskip("psutil")

pytestmark = pytest.mark.timeout(180)

PAGES = ("/", "/static/js/textual.js", "/ws")


@pytest.fixture
def served():
    srv = start_serving("--watch", str(RECORDING), "--max-sessions", "2",
                        "--idle-timeout", "2")
    yield srv
    srv.stop()


@contextmanager
def entered(served, host: str | None = None):
    """A visitor who opened the printed URL (reaching the server as `host`)."""
    with httpx.Client(headers={"Host": host} if host else None) as client:
        r = client.get(served.url)
        assert r.status_code == 302
        yield client


def test_another_origin_or_host_is_refused_on_every_page(served):
    other = f"http://127.0.0.1:{served.port + 1}"  # a page on another port of this host
    with entered(served) as client:
        assert client.get(served.base + "/").status_code == 200
        for path in PAGES:
            for headers in ({"Origin": other}, {"Origin": "null"},
                            {"Origin": "http://evil.example"},
                            {"Host": f"evil.example:{served.port}"},  # DNS rebinding
                            {"Host": f"evil.example:{served.port}", "Origin":
                             f"http://evil.example:{served.port}"}):
                r = client.get(served.base + path, headers=headers)
                assert r.status_code == 403, (path, headers)
        r = client.get(served.base + "/", headers={"Origin": served.base})  # its own
        assert r.status_code == 200
    # The server's other names are its own: a visitor entering as localhost gets in.
    host = f"localhost:{served.port}"
    with entered(served, host) as client:
        r = client.get(served.base + "/", headers={"Origin": f"http://{host}"})
        assert r.status_code == 200


async def test_the_websocket_wants_this_servers_origin(served):
    other = f"http://127.0.0.1:{served.port + 1}"
    ws_url = served.base.replace("http", "ws") + "/ws?width=100&height=30"
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as client:
        await enter(client, served)
        for origin in (other, "http://evil.example", "null", None):
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await client.ws_connect(ws_url, origin=origin)
            assert refused.value.status == 403, origin
        assert served.sessions() == []  # no dashboard was started for any of them
        ws = await client.ws_connect(ws_url, origin=served.base)
        msg = await asyncio.wait_for(ws.receive(), 60)
        assert msg.type == aiohttp.WSMsgType.BINARY  # its dashboard draws
        await ws.close()


def test_the_cookie_is_not_the_token_and_is_bound_to_its_origin(served):
    with entered(served) as client:
        (cookie,) = client.cookies.jar
        assert cookie.value != served.token and served.token not in cookie.value
        assert len(cookie.value) >= 32
        # What a listener on another port of 127.0.0.1 receives, the same cookie, does
        # not open the page under another name of this server.
        r = httpx.get(served.base + "/", headers={
            "Cookie": f"{cookie.name}={cookie.value}", "Host": f"localhost:{served.port}"})
        assert r.status_code == 403
        r = httpx.get(served.base + "/", headers={"Cookie": f"{cookie.name}={served.token}"})
        assert r.status_code == 403  # the token is not a cookie either


async def test_the_terminal_size_is_bounded_on_connect_and_on_resize(served):
    """A visitor asks for 100000x100000, then resizes to 30000x30000: the dashboard gets
    at most MAX_WIDTH x MAX_HEIGHT, and stays small."""
    ws_url = served.base.replace("http", "ws") + "/ws?width=100000&height=100000"
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as client:
        await enter(client, served)
        ws = await client.ws_connect(ws_url, origin=served.base)
        await asyncio.to_thread(wait_until, lambda: served.sessions(), what="its dashboard")
        (tab,) = served.sessions()
        # its process's environment, once it is there to read (a busy machine starts it late)
        await asyncio.to_thread(wait_until, lambda: "COLUMNS" in tab.environ(),
                                what="the tab's environment")
        env = tab.environ()
        assert (int(env["COLUMNS"]), int(env["ROWS"])) == (MAX_WIDTH, MAX_HEIGHT)
        drawn = ""
        while "metrics" not in drawn:
            msg = await asyncio.wait_for(ws.receive(), 60)
            assert msg.type == aiohttp.WSMsgType.BINARY
            drawn += msg.data.decode("utf-8", "replace")
        await ws.send_str(json.dumps(["resize", {"width": 30000, "height": 30000}]))
        await ws.send_str(json.dumps(["resize", {"width": -5, "height": 0}]))
        await ws.send_str(json.dumps(["resize", {"width": 30000, "height": 30000}]))
        await ws.send_str(json.dumps(["ping", "after"]))
        while True:  # the resizes were taken (the ping answered after them), still drawing
            msg = await asyncio.wait_for(ws.receive(), 60)
            if msg.type == aiohttp.WSMsgType.TEXT and "after" in msg.data:
                break
        for _ in range(20):  # what the resize drew
            try:
                msg = await asyncio.wait_for(ws.receive(), 5)
            except TimeoutError:  # all drawn: the run's age is its data's, no tick redraws
                break
            if msg.type != aiohttp.WSMsgType.BINARY:
                break
            for line in msg.data.decode("utf-8", "replace").split("\x1b["):
                assert len(line) <= MAX_WIDTH * 40  # never a 30000-cell row
        assert tab.is_running() and tab.memory_info().rss < 1 << 30
        await ws.close()


def test_a_connection_that_sends_nothing_or_no_whole_request_is_closed(served):
    """Before any token check: a silent connection, and one whose headers never end, are
    closed by the server (--idle-timeout 2 here), not held open up to the file limit."""
    silent = socket.create_connection(("127.0.0.1", served.port))
    partial = socket.create_connection(("127.0.0.1", served.port))
    partial.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    for conn in (silent, partial):
        conn.settimeout(60)
        got = b""
        while chunk := conn.recv(4096):  # the server ends it: recv returns b""
            got += chunk
        conn.close()
        assert b"200 OK" not in got


def test_static_lists_no_directory(served):
    with entered(served) as client:
        assert client.get(served.base + "/static/js/textual.js").status_code == 200
        for path in ("/static/", "/static/js/", "/static/css/"):
            r = client.get(served.base + path)
            assert r.status_code in (403, 404), path
            assert "textual.js" not in r.text and "Index of" not in r.text


def test_an_idle_timeout_that_is_no_number_is_one_line(capsys):
    from carl_tui.cli import main

    with pytest.raises(SystemExit) as end:
        main(["serve", "--idle-timeout", "soon", "--watch", str(RECORDING)])
    assert end.value.code == 2
    assert "'soon': give a number of seconds > 0" in capsys.readouterr().err



async def test_escapes_in_model_output_do_not_reach_the_browsers_terminal(tmp_path):
    """The completions view (`a`) served: what the page's xterm.js receives holds the
    completion's text, none of its escape sequences."""
    from tests.serving import open_tab
    from tests.sources.test_untrusted_text import ATTACKS, hostile_stream

    srv = start_serving("--watch", str(hostile_stream(tmp_path / "s.jsonl")))
    try:
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as client:
            await enter(client, srv)
            ws, drawn = await open_tab(client, srv, "step 5")
            await ws.send_str(json.dumps(["stdin", "a"]))
            while "MARKCOMP" not in drawn or "[/INST]" not in drawn:
                msg = await asyncio.wait_for(ws.receive(), 60)
                assert msg.type == aiohttp.WSMsgType.BINARY
                drawn += msg.data.decode("utf-8", "replace")
            await ws.close()
    finally:
        assert srv.stop() == 0
    raw = drawn.encode("utf-8", "replace")
    assert [name for name, (_, seq) in ATTACKS.items() if seq in raw] == []
