"""A tiny threaded HTTP server on 127.0.0.1 with pluggable routes, for fakes.

Routes are `(method, regex) -> handler(request) -> Response`. Every request is
recorded (method, path, headers, body) so tests can assert on what reached the
server. Faults can be injected per route.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    match: re.Match | None = None

    def json(self) -> Any:
        return json.loads(self.body or b"null")


@dataclass
class Response:
    status: int = 200
    body: bytes | str | Any = b""
    headers: dict[str, str] = field(default_factory=dict)
    # A streamed body: an iterable of byte chunks written and flushed one by one.
    stream: Iterable[bytes] | None = None

    @classmethod
    def json(cls, obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
        return cls(
            status=status,
            body=json.dumps(obj).encode(),
            headers={"Content-Type": "application/json", **(headers or {})},
        )


Handler = Callable[[Request], Response]


class FakeServer:
    """Start with `with FakeServer() as srv:`; `srv.url` is `http://127.0.0.1:PORT`."""

    def __init__(self) -> None:
        self.routes: list[tuple[str, re.Pattern, Handler]] = []
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def route(self, method: str, pattern: str, handler: Handler) -> None:
        self.routes.append((method.upper(), re.compile(f"^{pattern}$"), handler))

    def requests_to(self, method: str, path_regex: str) -> list[Request]:
        rx = re.compile(path_regex)
        with self._lock:
            return [r for r in self.requests if r.method == method and rx.search(r.path)]

    @property
    def url(self) -> str:
        assert self._httpd is not None
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeServer:
        server = self

        class _H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _handle(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                req = Request(
                    method=self.command,
                    path=parts.path,
                    query=parse_qs(parts.query),
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=body,
                )
                with server._lock:
                    server.requests.append(req)
                resp = Response(404, {"error": f"no route for {self.command} {parts.path}"})
                for method, rx, handler in server.routes:
                    m = rx.match(parts.path)
                    if m and method == self.command:
                        req.match = m
                        try:
                            resp = handler(req)
                        except Exception as exc:  # noqa: BLE001  (a bug in a fake shows as a 500)
                            resp = Response(500, {"error": repr(exc)})
                        break
                self._send(resp)

            def _send(self, resp: Response) -> None:
                if resp.stream is not None:
                    self.send_response(resp.status)
                    for k, v in resp.headers.items():
                        self.send_header(k, v)
                    self.send_header("Transfer-Encoding", "chunked")
                    # The connection ends with the stream: say so, or a client
                    # may reuse it for its next request and see a disconnect.
                    self.send_header("Connection", "close")
                    self.end_headers()
                    try:
                        for chunk in resp.stream:
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                            self.wfile.flush()
                        self.wfile.write(b"0\r\n\r\n")
                        self.wfile.flush()
                    except (BrokenPipeError, ConnectionResetError):
                        pass
                    self.close_connection = True
                    return
                body = resp.body
                if not isinstance(body, (bytes, str)):
                    body = json.dumps(body)
                    resp.headers.setdefault("Content-Type", "application/json")
                if isinstance(body, str):
                    body = body.encode()
                self.send_response(resp.status)
                for k, v in resp.headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _handle

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _H)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    def __enter__(self) -> FakeServer:  # noqa: PYI034
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
