"""textual-serve's server, made safe to leave running: a door, a limit, no orphans.

- The door: every request needs the random token the server printed, in the URL once (it
  is then moved into an HttpOnly, same-site cookie and out of the address bar) or in that
  cookie. Without it: 403 and a page saying how to get in.
- At most `max_sessions` dashboards at once; the next visitor gets a page saying so (503).
- Each tab's dashboard is a process started from an argument list (no shell); it ends with
  its tab (asked to quit, killed if it does not within `STOP_GRACE` seconds), and stopping
  the server ends every one.
- No access log: the URLs hold the token.
"""

from __future__ import annotations

import asyncio
import hmac
import html
import logging
import secrets
import shlex
import signal
from collections.abc import Callable, Sequence
from pathlib import Path

import aiohttp_jinja2
from aiohttp import web
from textual_serve.app_service import AppService
from textual_serve.server import Server, to_int

from carl_tui.errors import describe

log = logging.getLogger("carl_tui.serve")

STOP_GRACE = 5.0  # seconds a dashboard has to quit when its tab closes, before it is killed

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

FULL = """<p>All {n} sessions of this server are in use: each browser tab runs its own
dashboard. Close a tab that shows it, or try again later.</p>
<p>The server's owner can allow more with <code>carl-tui serve --max-sessions N</code>.</p>"""


def page(title: str, body: str, status: int) -> web.Response:
    return web.Response(status=status, content_type="text/html",
                        text=PAGE.format(title=html.escape(title), body=body))


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
                 title: str = "carl-tui") -> None:
        super().__init__(shlex.join(argv), host=host, port=port, title=title)
        self.argv = list(argv)
        self.max_sessions = max_sessions
        self.token = token or secrets.token_urlsafe(32)
        self.sessions: set[Session] = set()
        self.port_bound: int | None = None
        self.templates_path = Path(__file__).resolve().parent  # page.html, beside this file

    @property
    def cookie(self) -> str:
        return f"carl_tui_serve_{self.port_bound or self.port}"

    def _token_ok(self, given: str | None) -> bool:
        return bool(given) and hmac.compare_digest(given.encode(), self.token.encode())

    async def _make_app(self) -> web.Application:
        app = await super()._make_app()
        app.middlewares.append(self._door())
        return app

    def _door(self):
        @web.middleware
        async def door(request: web.Request, handler):
            if self._token_ok(request.query.get("token")):
                if request.method == "GET" and request.path == "/":
                    # The token leaves the address bar: the cookie holds it from now on.
                    rest = {k: v for k, v in request.query.items() if k != "token"}
                    resp = web.Response(status=302, headers={
                        "Location": str(request.rel_url.with_query(rest))})
                    resp.set_cookie(self.cookie, self.token, httponly=True, samesite="Strict",
                                    path="/")
                    return resp
                return await handler(request)
            if self._token_ok(request.cookies.get(self.cookie)):
                return await handler(request)
            return page("carl-tui: no entry without the link",
                        REFUSED.format(port=self.port_bound or self.port), 403)
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
        width = to_int(request.query.get("width", "80"), 80)
        height = to_int(request.query.get("height", "24"), 24)
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
        runner = web.AppRunner(await self._make_app(), handle_signals=False, access_log=None)
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
