"""The UI never waits on the network: keys work while a poll hangs on a slow server."""

from __future__ import annotations

import threading
import time

from carl_tui.sources.trackio.remote import TrackioRemoteSource
from carl_tui.ui.app import DashboardConfig, Settings, build_app
from carl_tui.ui.widgets.status_bar import StatusBar
from tests.conftest import plain_text
from tests.fakes.server import FakeServer, Response

SIZE = (160, 45)


async def test_keys_respond_while_a_poll_hangs_for_10_seconds():
    release = threading.Event()
    entered = threading.Event()

    def slow(_req):
        entered.set()
        release.wait(10.0)  # a server that takes 10 s to answer
        return Response.json({"error": "too slow"}, status=503)

    with FakeServer() as srv:
        srv.route("GET", "/version", slow)
        srv.route("POST", "/api/.*", slow)
        source = TrackioRemoteSource(srv.url, project="p", timeout=30.0)
        app = build_app(DashboardConfig(sources=[source], settings=Settings(refresh_interval=0.05)))
        try:
            async with app.run_test(size=SIZE) as pilot:
                deadline = time.monotonic() + 5
                while not entered.is_set() and time.monotonic() < deadline:
                    await pilot.pause(0.05)
                assert entered.is_set(), "the poll never reached the server"
                t0 = time.monotonic()
                await pilot.press("question_mark")
                assert type(app.screen).__name__ == "HelpScreen"
                await pilot.press("escape")
                first = app.theme
                await pilot.press("t")
                assert app.theme != first
                await pilot.press("v")
                assert not app.query_one("#log").has_class("-hidden")
                elapsed = time.monotonic() - t0
                assert not release.is_set() and elapsed < 3.0  # answered while the poll hangs
                status = plain_text(app.query_one(StatusBar), 300)
                assert "connecting" in status  # and the status bar says it is still waiting
        finally:
            release.set()
