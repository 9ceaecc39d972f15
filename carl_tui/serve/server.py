"""textual-serve's server, made safe to leave running: a door, a limit, no orphans.

- The door: every request needs the random token the server printed, in the URL once (it
  is then moved into an HttpOnly, same-site cookie and out of the address bar) or in that
  cookie. Without it: 403 and a page saying how to get in.
- At most `max_sessions` dashboards at once; the next visitor gets a page saying so (503).
- Each tab's dashboard is a process started from an argument list (no shell); it ends with
  its tab (asked to quit, killed if it does not within `STOP_GRACE` seconds), and stopping
  the server ends every one.
- Other pages keep out: every request's `Host` must name this server (an address, or
  this machine's name: never a name an attacker's DNS points here), and an `Origin`,
  where a browser sends one, must be this server's own; the websocket wants one. A page
  on another port of 127.0.0.1 cannot read a dashboard or send it keys (403).
- The cookie is not the token: a value made from a secret of this server and the origin
  it was given on, useless on another origin and worthless once the server ends.
  Browsers send a cookie to every port of a host; the token never goes with it.
- A visitor cannot exhaust the host: the terminal is at most MAX_WIDTH x MAX_HEIGHT, on
  connect and on resize; a connection that sends nothing (or no whole request) for
  `idle_timeout` seconds is closed; `/static/` lists no directory.
- No access log: the URLs hold the token.
"""

from __future__ import annotations

import asyncio
import hmac
import html
import ipaddress
import logging
import secrets
import shlex
import signal
import socket
from collections.abc import Callable, Sequence
from pathlib import Path

import aiohttp_jinja2
import jinja2
from aiohttp import web
from textual_serve.app_service import AppService
from textual_serve.server import Server, to_int
from yarl import URL

from carl_tui.errors import describe

log = logging.getLogger("carl_tui.serve")

STOP_GRACE = 5.0  # seconds a dashboard has to quit when its tab closes, before it is killed
MAX_WIDTH, MAX_HEIGHT = 500, 200  # a tab's terminal, at most (a browser's asks are cut)
IDLE_TIMEOUT = 15.0  # seconds a connection may send nothing, or no whole request


def terminal_size(width: object, height: object) -> tuple[int, int]:
    """A size a visitor asked for, within 1..MAX_WIDTH x 1..MAX_HEIGHT (ValueError when
    it is not a number: the session ends, in one line)."""
    return (min(max(int(width), 1), MAX_WIDTH),  # type: ignore[call-overload]
            min(max(int(height), 1), MAX_HEIGHT))  # type: ignore[call-overload]

PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>carl-tui</title>
<style>body {{ background: #0c181f; color: #e6edf3; font: 16px/1.5 monospace;
margin: 3em auto; max-width: 46em; padding: 0 1em; }} code {{ color: #ffd36b; }}</style>
</head><body><h1>{title}</h1>{body}</body></html>
"""

REFUSED = """<p>This dashboard is only for people holding its link: open the URL that
<code>carl-tui serve</code> printed when it started (it ends with <code>?token=...</code>).</p>
<p>From another machine, reach the server through SSH, then open that URL:</p>
<p><code>ssh -N -L {port}:127.0.0.1:{port} user@training-host</code></p>"""

FOREIGN = """<p>This page was asked for from another site or under another name. Open the
URL that <code>carl-tui serve</code> printed, in its own tab.</p>"""

FULL = """<p>All {n} sessions of this server are in use: each browser tab runs its own
dashboard. Close a tab that shows it, or try again later.</p>
<p>The server's owner can allow more with <code>carl-tui serve --max-sessions N</code>.</p>"""


def page(title: str, body: str, status: int) -> web.Response:
    return web.Response(status=status, content_type="text/html",
                        text=PAGE.format(title=html.escape(title), body=body))


def own_origin(request: web.Request) -> str:
    """The origin a page of this server has, reached as `request` was."""
    return f"{request.scheme}://{request.host}"


class Session(AppService):
    """One tab's dashboard: a process started from `argv` (no shell), killed when it does not
    quit in time."""

    def __init__(self, argv: Sequence[str], **kw) -> None:
        super().__init__(shlex.join(argv), **kw)
        self.argv = list(argv)

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    async def _open_app_process(self, width: int = 80, height: int = 24):
        env = self._build_environment(width=width, height=height)
        pipe = asyncio.subprocess.PIPE
        self._process = process = await asyncio.create_subprocess_exec(
            *self.argv, stdin=pipe, stdout=pipe, stderr=pipe, env=env)
        self._stdin = process.stdin
        return process

    async def set_terminal_size(self, width: int, height: int) -> None:
        await super().set_terminal_size(*terminal_size(width, height))

    async def stop(self) -> None:
        """Ask the dashboard to quit; kill it if it has not within STOP_GRACE seconds."""
        try:
            await asyncio.wait_for(super().stop(), STOP_GRACE)
        except (asyncio.TimeoutError, OSError, RuntimeError):
            pass
        process = self._process
        if process is not None and process.returncode is None:
            process.kill()
            await process.wait()


class CarlServer(Server):
    """Serves `argv` (a dashboard command) to browsers; see the module's docstring."""

    def __init__(self, argv: Sequence[str], *, host: str = "127.0.0.1", port: int = 8000,
                 max_sessions: int = 8, token: str | None = None,
                 title: str = "carl-tui", idle_timeout: float = IDLE_TIMEOUT) -> None:
        super().__init__(shlex.join(argv), host=host, port=port, title=title)
        self.argv = list(argv)
        self.max_sessions = max_sessions
        self.token = token or secrets.token_urlsafe(32)
        self._cookie_key = secrets.token_bytes(32)  # the cookie's values are made with it
        self.idle_timeout = idle_timeout
        self.sessions: set[Session] = set()
        self.port_bound: int | None = None
        self.templates_path = Path(__file__).resolve().parent  # page.html, beside this file

    @property
    def cookie(self) -> str:
        return f"carl_tui_serve_{self.port_bound or self.port}"

    def _token_ok(self, given: str | None) -> bool:
        return bool(given) and hmac.compare_digest(given.encode(), self.token.encode())

    def cookie_value(self, origin: str) -> str:
        """The cookie of a visitor who came in on `origin`: not the token, and of no use
        on another origin or after this server ends."""
        return hmac.new(self._cookie_key, origin.encode(), "sha256").hexdigest()

    def _cookie_ok(self, request: web.Request) -> bool:
        given = request.cookies.get(self.cookie)
        return bool(given) and hmac.compare_digest(
            given.encode(), self.cookie_value(own_origin(request)).encode())

    def host_ok(self, host: str | None) -> bool:
        """Whether a `Host` header names this server: an IP address, `localhost` or the
        name it listens on (this machine's, on every address). Any port: an SSH tunnel
        may forward another one (other ports' pages are kept out by `Origin`)."""
        try:
            url = URL(f"http://{host}") if host else None
        except ValueError:
            return False
        if url is None or not url.host:
            return False
        name = url.host.strip("[]").lower()
        if name in {"localhost", self.host.lower(), socket.gethostname().lower()}:
            return True
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False  # a name this server does not go by (DNS rebinding)
        return True

    def _foreign(self, request: web.Request) -> bool:
        """A request from another site, or under a name not this server's. The websocket
        must say its origin (every browser does)."""
        if not self.host_ok(request.host):
            return True
        origin = request.headers.get("Origin")
        if origin is None:
            return request.path == "/ws"
        return origin != own_origin(request)

    async def _make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._door()])
        aiohttp_jinja2.setup(app, loader=jinja2.FileSystemLoader(self.templates_path))
        app.add_routes([
            web.get("/", self.handle_index, name="index"),
            web.get("/ws", self.handle_websocket, name="websocket"),
            web.get("/download/{key}", self.handle_download, name="download"),
            web.static("/static", self.statics_path, show_index=False, name="static"),
        ])
        app.on_startup.append(self.on_startup)
        app.on_shutdown.append(self.on_shutdown)
        return app

    def _door(self):
        @web.middleware
        async def door(request: web.Request, handler):
            token = self._token_ok(request.query.get("token"))
            if not token and not self._cookie_ok(request):
                return page("carl-tui: no entry without the link",
                            REFUSED.format(port=self.port_bound or self.port), 403)
            if self._foreign(request):
                return page("carl-tui: not from another site", FOREIGN, 403)
            if token and request.method == "GET" and request.path == "/":
                # The token leaves the address bar; the cookie is not the token.
                rest = {k: v for k, v in request.query.items() if k != "token"}
                resp = web.Response(status=302, headers={
                    "Location": str(request.rel_url.with_query(rest))})
                resp.set_cookie(self.cookie, self.cookie_value(own_origin(request)),
                                httponly=True, samesite="Strict", path="/")
                return resp
            return await handler(request)
        return door

    async def on_startup(self, app: web.Application) -> None:
        """textual-serve prints its banner here; `carl-tui serve` prints its own."""

    async def on_shutdown(self, app: web.Application) -> None:
        await self.stop_sessions()

    async def stop_sessions(self) -> None:
        await asyncio.gather(*(s.stop() for s in list(self.sessions)), return_exceptions=True)

    def _full(self) -> web.Response:
        return page("carl-tui: every session is in use", FULL.format(n=self.max_sessions), 503)

    async def handle_index(self, request: web.Request) -> web.Response:  # type: ignore[override]
        """The page (textual-serve's, less its third-party font: page.html), with the
        websocket at the address the browser used."""
        if len(self.sessions) >= self.max_sessions:
            return self._full()
        ws_scheme = "wss" if request.scheme == "https" else "ws"
        context = {
            "font_size": to_int(request.query.get("fontsize", "16"), 16),
            "app_websocket_url": f"{ws_scheme}://{request.host}/ws",
            "config": {"static": {"url": "/static/"}},
            "application": {"name": self.title},
        }
        return aiohttp_jinja2.render_template("page.html", request, context)

    async def handle_websocket(self, request: web.Request):  # type: ignore[override]
        """One tab: its dashboard runs while the tab is open, and ends with it."""
        if len(self.sessions) >= self.max_sessions:
            return self._full()
        websocket = web.WebSocketResponse(heartbeat=15)
        width, height = terminal_size(to_int(request.query.get("width", "80"), 80),
                                      to_int(request.query.get("height", "24"), 24))
        session = Session(self.argv, write_bytes=websocket.send_bytes,
                          write_str=websocket.send_str, close=websocket.close,
                          download_manager=self.download_manager, debug=self.debug)
        self.sessions.add(session)
        try:
            await websocket.prepare(request)
            await session.start(width, height)
            log.info("session %s started (%d of %d)", session.pid, len(self.sessions),
                     self.max_sessions)
            await self._process_messages(websocket, session)
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # noqa: BLE001  (a bad message ends its session, one line)
            log.warning("a session ended: %s", describe(exc))
        finally:
            await session.stop()
            self.sessions.discard(session)
            log.info("session %s ended (%d left)", session.pid, len(self.sessions))
        return websocket

    async def run(self, on_ready: Callable[[int], None]) -> None:
        """Serve until SIGINT or SIGTERM, then end every session. `on_ready(port)` once
        listening. Raises OSError when the address cannot be bound."""
        runner = web.AppRunner(await self._make_app(), handle_signals=False, access_log=None,
                               keepalive_timeout=self.idle_timeout)
        await runner.setup()
        loop, signals = asyncio.get_running_loop(), []
        try:
            await web.TCPSite(runner, self.host, self.port).start()
            self.port_bound = runner.addresses[0][1]
            stop = asyncio.Event()
            for sig in (signal.SIGINT, signal.SIGTERM):
                try:
                    loop.add_signal_handler(sig, stop.set)
                    signals.append(sig)
                except (NotImplementedError, RuntimeError):  # Windows; not the main thread
                    pass
            on_ready(self.port_bound)
            await stop.wait()
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)
            await runner.cleanup()
