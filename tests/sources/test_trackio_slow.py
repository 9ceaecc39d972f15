"""A Trackio server that never finishes its reply, or that redirects elsewhere (issue 23),
against a real Trackio server on 127.0.0.1 behind a small loopback proxy written here."""

from __future__ import annotations

import socket
import threading
import uuid

import httpx
import pytest

from carl_tui.events import ScalarBatch, SourceStatus
from carl_tui.sources.base import SourceError, SourceRunner
from carl_tui.sources.trackio.remote import TrackioRemoteSource
from tests.fakes.server import FakeServer, Request, Response
from tests.fakes.trackio_server import TrackioServer, start_writer, wait_writer

pytestmark = pytest.mark.timeout(120)

TRICKLE_S = 0.2  # between two bytes: each wait far below the read timeout


@pytest.fixture(scope="module")
def trackio(tmp_path_factory):
    with TrackioServer(tmp_path_factory.mktemp("trackio")) as srv:
        project = "p" + uuid.uuid4().hex[:8]
        wait_writer(start_writer(srv.data_dir, project, "r", [{"v": float(i)} for i in range(5)]))
        yield srv, project


class Proxy:
    """Forwards to `upstream`; `mode` "trickle" sends each reply a byte at a time, "redirect"
    answers 307 to the same path on `upstream`, "same" 307 to its own /fwd/ path, "pass"
    forwards as it is."""

    def __init__(self, upstream: str, mode: str):
        self.upstream, self.mode = upstream, mode
        self.stop = threading.Event()
        self.server = FakeServer()
        self.client = httpx.Client(timeout=30.0)
        for method in ("GET", "POST"):
            self.server.route(method, r"/.*", self._handle)

    def _forward(self, req: Request, path: str) -> httpx.Response:
        return self.client.request(req.method, self.upstream + path, content=req.body,
                                   headers={"Content-Type": "application/json"})

    def _handle(self, req: Request) -> Response:
        if self.mode == "redirect":
            return Response(307, b"", {"Location": self.upstream + req.path})
        if self.mode == "pass":
            r = self._forward(req, req.path)
            return Response(r.status_code, r.content, {"Content-Type": "application/json"})
        if self.mode == "same":
            if not req.path.startswith("/fwd/"):
                return Response(307, b"", {"Location": "/fwd" + req.path})
            r = self._forward(req, req.path[len("/fwd"):])
            return Response(r.status_code, r.content, {"Content-Type": "application/json"})
        r = self._forward(req, req.path)
        return Response(r.status_code, stream=self._trickle(r.content),
                        headers={"Content-Type": "application/json"})

    def _trickle(self, data: bytes):
        for i in range(len(data)):
            if self.stop.wait(TRICKLE_S):
                return
            yield data[i:i + 1]

    def __enter__(self):
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.server.stop()
        self.client.close()


def test_a_reply_that_trickles_is_given_up_on_and_said(trackio):
    srv, project = trackio
    with Proxy(srv.url, "trickle") as proxy:
        src = TrackioRemoteSource(proxy.server.url, project=project, timeout=1.0)
        statuses: list[SourceStatus] = []
        runner = SourceRunner(src, lambda events: statuses.extend(
            e for e in events if isinstance(e, SourceStatus)))
        runner.poll_once()
    waiting, status = statuses  # waiting once the timeout passed (never live), then:
    assert waiting.state == "connecting" and "still waiting" in waiting.message
    assert status.state == "retrying", status
    assert status.message == (f"{proxy.server.url} is answering too slowly: no whole reply "
                              "within 3 s (it still sends)")


def test_a_redirect_to_another_server_is_refused_and_named(trackio):
    srv, project = trackio
    with Proxy(srv.url, "redirect") as proxy:
        src = TrackioRemoteSource(proxy.server.url, project=project, timeout=5.0)
        with pytest.raises(SourceError) as info:
            src.poll()
    assert str(info.value) == (f"{proxy.server.url} redirects to another server, {srv.url}: "
                               f"not followed (use --trackio {srv.url} if that is the one)")
    assert info.value.retry is False


def test_a_redirect_on_the_same_server_is_followed(trackio):
    srv, project = trackio
    with Proxy(srv.url, "same") as proxy:
        src = TrackioRemoteSource(proxy.server.url, project=project, timeout=5.0)
        events = src.poll()
        assert any(r.path.startswith("/fwd/") for r in proxy.server.requests)
    steps = [int(s) for e in events if isinstance(e, ScalarBatch) for s in e.steps]
    assert steps == [0, 1, 2, 3, 4]


def test_headers_that_trickle_are_given_up_on_too(tmp_path):
    """Bytes of the status line and headers, one at a time: the deadline closes the
    connection under the read (no check between body chunks can see it)."""
    stop = threading.Event()
    srv = socket.create_server(("127.0.0.1", 0))

    def serve():
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                for byte in b"HTTP/1.1 200 OK\r\nContent-Type: application/json" * 100:
                    if stop.wait(TRICKLE_S):
                        break
                    try:
                        conn.sendall(bytes([byte]))
                    except OSError:
                        break

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{srv.getsockname()[1]}"
    try:
        src = TrackioRemoteSource(url, project="p", timeout=1.0)
        for _ in range(2):  # and again, on a new connection
            with pytest.raises(SourceError) as info:
                src.poll()
            assert str(info.value) == (f"{url} is answering too slowly: no whole reply "
                                       "within 3 s (it still sends)")
    finally:
        stop.set()
        srv.close()
        thread.join(5)


def test_a_server_that_starts_to_trickle_is_not_live_while_its_reply_trickles(trackio):
    """Live after a good poll; then the server trickles: before it is given up on (3x the
    timeout) the source is said to be waiting once the timeout has passed, never live."""
    srv, project = trackio
    with Proxy(srv.url, "pass") as proxy:
        src = TrackioRemoteSource(proxy.server.url, project=project, timeout=1.0)
        statuses: list[SourceStatus] = []
        runner = SourceRunner(src, lambda events: statuses.extend(
            e for e in events if isinstance(e, SourceStatus)))
        while src.behind or not statuses:
            runner.poll_once()
        assert statuses[-1].state == "live"
        said = len(statuses)
        proxy.mode = "trickle"
        runner.poll_once()
    trickled = [(s.state, s.message) for s in statuses[said:]]
    assert trickled == [
        ("connecting", "no whole reply within 1 s; still waiting"),
        ("retrying", (f"{proxy.server.url} is answering too slowly: no whole reply within "
                     "3 s (it still sends)"))]
