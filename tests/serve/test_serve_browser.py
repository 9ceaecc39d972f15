"""`carl-tui serve` in a real browser: Playwright driving the system's Chromium.

What the page shows is drawn by xterm.js on a canvas, so the tests read it twice: as
pixels (screenshots) and as the terminal output the page received over its websocket.
Without Chromium these tests skip, saying why; under CI (env CI set) they fail instead.
"""

from __future__ import annotations

import io
import os
import shutil

import pytest

from tests.conftest import wait_until
from tests.machine import skip_or_fail
from tests.serving import HF_SECRET, RECORDING, start_serving

pytest.importorskip("textual_serve")
pytest.importorskip("psutil")
sync_api = pytest.importorskip("playwright.sync_api")
Image = pytest.importorskip("PIL.Image")

VIEWPORT = {"width": 1400, "height": 850}
LIGHT_TEXT = "38;2;28;33;40;48;2;255;255;255m"  # carl-light: its text on its panels


def chromium() -> str | None:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    return found or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)


@pytest.fixture(scope="module")
def browser():
    path = chromium()
    if path is None:
        why = ("no Chromium on this machine (`make test` installs it with apt-get as root or "
               "with password-less sudo; or: apt-get install chromium)")
        skip_or_fail("browser", why)
    with sync_api.sync_playwright() as pw:
        # As root, Chromium runs only without its sandbox.
        b = pw.chromium.launch(executable_path=path, args=["--no-sandbox"])
        yield b
        b.close()


class Tab:
    """A browser tab on the server, and the terminal output its page received."""

    def __init__(self, browser, url: str):
        self.page = browser.new_page(viewport=VIEWPORT)
        self.frames: list[str] = []
        self.requests: list[str] = []  # every URL the page asked for
        self.page.on("request", lambda request: self.requests.append(request.url))
        self.page.on("websocket", lambda ws: ws.on("framereceived", self._received))
        self.response = self.page.goto(url)

    def _received(self, payload) -> None:
        if isinstance(payload, bytes):
            payload = payload.decode("utf-8", "replace")
        self.frames.append(payload)

    def text(self, since: int = 0) -> str:
        return "".join(self.frames[since:])

    def wait_for(self, what: str, since: int = 0, timeout_s: float = 60.0) -> None:
        """Until the page has received `what` (events are delivered while Playwright waits)."""
        for _ in range(int(timeout_s * 10)):
            if what in self.text(since):
                return
            self.page.wait_for_timeout(100)
        raise AssertionError(f"the page never received {what!r}")

    def drawn(self) -> None:
        """The dashboard's panels are on the page, and the page gave it the keyboard
        without a click (the footer is drawn once the app has the focus)."""
        for title in ("phi (order parameter)", "phase", "metrics", "entropy (nats)"):
            self.wait_for(title)
        self.wait_for("Quit")

    def screenshot(self):
        return Image.open(io.BytesIO(self.page.screenshot())).convert("RGB")

    def close(self) -> None:
        self.page.close()


@pytest.fixture
def serve():
    started = []

    def start(*args: str):
        srv = start_serving(*args)
        started.append(srv)
        return srv

    yield start
    for srv in started:
        assert srv.stop() == 0


def changed_fraction(a, b) -> float:
    from PIL import ImageChops

    diff = ImageChops.difference(a, b).convert("L").point(lambda v: 255 if v > 24 else 0)
    return diff.histogram()[255] / (a.width * a.height)


def test_the_page_is_refused_without_the_token_and_draws_the_dashboard_with_it(browser, serve):
    srv = serve("--watch", str(RECORDING))
    refused = Tab(browser, srv.base + "/")
    assert refused.response.status == 403
    assert "open the URL that carl-tui serve printed" in refused.page.inner_text("body")
    assert not refused.frames  # no dashboard, no websocket
    refused.close()

    tab = Tab(browser, srv.url)
    assert tab.response.status == 200
    assert tab.page.url == srv.base + "/"  # the token left the address bar
    tab.drawn()
    # the run's data comes after the first frame: waited for, not taken as drawn with it
    tab.wait_for("tiny-reverse-seed0")
    tab.wait_for("CRYSTALLISED at step 287")
    assert "tiny-reverse-seed0" in tab.text() and "CRYSTALLISED at step 287" in tab.text()
    shot = tab.screenshot()
    colours = shot.getcolors(maxcolors=1 << 20)
    assert len(colours) > 50  # drawn, not blank
    assert max(n for n, _ in colours) < 0.8 * shot.width * shot.height
    assert HF_SECRET not in tab.page.content() and srv.token not in tab.page.content()
    assert HF_SECRET not in tab.text()
    assert tab.page.title() == "carl-tui"
    assert tab.requests and all(u.startswith((srv.base, srv.base.replace("http", "ws")))
                                for u in tab.requests), tab.requests  # nothing third-party
    assert len(srv.sessions()) == 1
    tab.close()


def test_keys_typed_in_the_page_act_t_switches_the_theme(browser, serve):
    srv = serve("--watch", str(RECORDING))
    tab = Tab(browser, srv.url)
    tab.drawn()
    assert LIGHT_TEXT not in tab.text()
    before, since = tab.screenshot(), len(tab.frames)
    tab.page.keyboard.press("t")
    tab.wait_for("theme: carl-light", since)
    tab.wait_for(LIGHT_TEXT, since)
    tab.page.wait_for_timeout(500)  # the canvas paints what arrived
    assert changed_fraction(before, tab.screenshot()) > 0.02
    tab.close()


@pytest.mark.parametrize("allow_actions", [False, True])
def test_read_only_the_stop_key_does_nothing_and_neither_footer_nor_help_offers_it(
        browser, serve, allow_actions):
    srv = serve("--watch", str(RECORDING), *(["--allow-actions"] if allow_actions else []))
    tab = Tab(browser, srv.url)
    tab.drawn()
    tab.wait_for("Help")
    assert ("Stop" in tab.text() and "Launch" in tab.text()) is allow_actions
    since = len(tab.frames)
    tab.page.keyboard.press("s")
    tab.page.keyboard.press("t")  # handled after s: once its notice is here, s was handled
    tab.wait_for("theme: carl-light", since)
    if allow_actions:
        tab.wait_for("The current run has no job to stop.", since)
    else:
        assert "no job to stop" not in tab.text(since)
    since = len(tab.frames)
    tab.page.keyboard.press("?")  # the help: every key with its binding id
    tab.wait_for("app.theme", since)
    assert ("actions.stop" in tab.text(since)) is allow_actions
    tab.close()


NEIGHBOUR_PAGE = """<!DOCTYPE html><html><body><script>
const out = {opened: false, bytes: 0, closed: false};
const report = () => fetch("/report", {method: "POST", body: JSON.stringify(out)});
const ws = new WebSocket("ws://127.0.0.1:%d/ws?width=80&height=24");
ws.binaryType = "arraybuffer";
ws.onopen = () => { out.opened = true; ws.send(JSON.stringify(["stdin", "t"])); };
ws.onmessage = (e) => { out.bytes += e.data.byteLength || e.data.length || 0; report(); };
ws.onclose = () => { out.closed = true; report(); };
</script></body></html>"""


class Neighbour:
    """A web server on another port of 127.0.0.1: what it receives, what its page saw."""

    def __init__(self, port: int):
        import http.server
        import json
        import threading

        self.cookies: list[str] = []
        self.reports: list[dict] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.cookies.append(self.headers.get("Cookie") or "")
                body = (NEIGHBOUR_PAGE % port).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                outer.reports.append(json.loads(self.rfile.read(n)))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_page_on_another_port_gets_neither_the_token_nor_the_dashboard(browser, serve):
    """The printed link opened, then a page on another port of 127.0.0.1 in the same
    browser: SameSite ignores ports, so that server receives the cookie; it is not the
    token, and the page's websocket to the dashboard is refused (no session starts)."""
    srv = serve("--watch", str(RECORDING), "--allow-actions")
    neighbour = Neighbour(srv.port)
    context = browser.new_context(viewport=VIEWPORT)
    try:
        own = context.new_page()
        assert own.goto(srv.url).status == 200
        wait_until(lambda: srv.sessions(), what="the printed link's dashboard")
        own.close()  # its dashboard ends with it
        wait_until(lambda: not srv.sessions(), what="its end")
        attacker = context.new_page()
        attacker.goto(neighbour.url)
        for _ in range(600):
            if neighbour.reports:
                break
            attacker.wait_for_timeout(100)
        assert neighbour.reports, "the neighbour's page never reported"
        report = neighbour.reports[-1]
        assert report == {"opened": False, "bytes": 0, "closed": True}
        assert srv.sessions() == []
        assert neighbour.cookies and all(srv.token not in c for c in neighbour.cookies)
    finally:
        context.close()
        neighbour.close()
