"""Talking to a Trackio server over HTTP, and every way that can fail said in words.

Trackio 0.43 answers `POST /api/<name>` with a JSON body of keyword arguments
and replies `{"data": ...}` or `{"error": ...}`. Every failure becomes a
`SourceError` with a plain message (connection refused, no answer in time, not
authorised, no such project or Space, a server error, a reply that is not JSON
or not Trackio's); an API the server does not offer is `UnknownApi` (older
Trackio, for the caller to fall back). Error text from the server is cut short
and has the token masked. The HF token travels only as `Authorization: Bearer`.

Slow and elsewhere: `timeout` bounds each wait for bytes, and a whole request
(connection, reply and every byte of it) must end within `TOTAL_FACTOR` times
it: a server that trickles its reply is given up on and said to be too slow,
never taken for a live one. Redirects are followed only on the same server (host
and port, or http to https on the same host); one to another server is refused,
naming where it pointed, so the data shown always comes from the server named.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from carl_tui.hub import HubToken
from carl_tui.redact import redact
from carl_tui.sources.base import SourceError

NOT_AUTHORISED = "not authorised: set HF_TOKEN or run `hf auth login`"
PAGE_ROWS = 10_000  # the most rows `query_project` returns in one reply
TOTAL_FACTOR = 3.0  # a whole request may take this many times the timeout
MAX_REDIRECTS = 5
REDIRECTS = (301, 302, 303, 307, 308)


@dataclass(frozen=True, slots=True)
class Reply:
    status_code: int
    content: bytes
    location: str | None = None


def same_server(a: httpx.URL, b: httpx.URL) -> bool:
    """Whether a redirect from `a` to `b` stays on the server named (http -> https too)."""
    if a.host != b.host:
        return False
    if a.scheme == b.scheme:
        return a.port == b.port
    return a.scheme == "http" and b.scheme == "https" and a.port is None and b.port is None


class UnknownApi(Exception):
    """The server does not offer this API name (older Trackio)."""


class TrackioHttp:
    """Requests to one Trackio server (`url`), with `token` when there is one.
    `requests` and `bytes_received` count what was asked and what came back."""

    def __init__(self, url: str, token: HubToken | None, timeout: float,
                 client: httpx.Client | None = None) -> None:
        self.url = url
        self.token = token
        self.timeout = float(timeout)
        self._own_client = client is None
        self.client = client or self._new_client()
        self.requests = 0
        self.bytes_received = 0

    def _new_client(self) -> httpx.Client:
        return httpx.Client(
            timeout=httpx.Timeout(self.timeout, connect=min(self.timeout, 5.0)),
            follow_redirects=False,
        )

    def _abort(self, fired: threading.Event) -> None:
        """At the deadline: close the connection under a request still reading (even its
        headers, which no check between chunks can bound); a new client serves the next."""
        fired.set()
        self.client.close()

    def headers(self) -> dict[str, str]:
        return self.token.auth_header() if self.token else {}

    def close(self) -> None:
        if self._own_client:
            self.client.close()

    def call(self, name: str, **kwargs: Any) -> Any:
        """`POST /api/<name>` with the keyword arguments; the reply's data."""
        return self.request("POST", f"/api/{name}", kwargs)

    def request(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        """The reply's data (`/version`: the whole reply); a SourceError in words, or
        UnknownApi, when there is none."""
        resp = self._send(method, path, body)
        status = resp.status_code
        if status in (401, 403):
            raise SourceError(NOT_AUTHORISED, retry=False)
        try:
            payload = orjson.loads(resp.content)
        except orjson.JSONDecodeError:
            raise self._not_json(status) from None
        error = payload.get("error") if isinstance(payload, dict) else None
        if error is not None or status >= 400:
            self._refuse(path, status, error)
        if path == "/version":
            return payload
        if not isinstance(payload, dict) or "data" not in payload:
            raise SourceError(f"malformed reply from {self.url} (no data)")
        return payload["data"]

    def _send(self, method: str, path: str, body: dict[str, Any] | None) -> Reply:
        deadline = time.monotonic() + self.timeout * TOTAL_FACTOR
        url = httpx.URL(self.url + path)
        content = orjson.dumps(body) if body is not None else None
        for _ in range(MAX_REDIRECTS + 1):
            reply = self._send_once(method, url, content, deadline)
            if reply.status_code not in REDIRECTS or not reply.location:
                return reply
            target = url.join(reply.location)
            if not same_server(httpx.URL(self.url), target):
                where = f"{target.scheme}://{target.netloc.decode()}"
                raise SourceError(f"{self.url} redirects to another server, {where}: not "
                                  f"followed (use --trackio {where} if that is the one)",
                                  retry=False, kind="invalid")
            url = target
            if reply.status_code == 303:
                method, content = "GET", None
        raise SourceError(f"{self.url} redirected more than {MAX_REDIRECTS} times")

    def _send_once(self, method: str, url: httpx.URL, content: bytes | None,
                   deadline: float) -> Reply:
        total = self.timeout * TOTAL_FACTOR
        too_slow = SourceError(f"{self.url} is answering too slowly: no whole reply within "
                               f"{total:g} s (it still sends)")
        if self._own_client and self.client.is_closed:
            self.client = self._new_client()
        fired = threading.Event()
        timer = threading.Timer(max(0.0, deadline - time.monotonic()), self._abort, (fired,))
        timer.daemon = True
        if self._own_client:
            timer.start()
        try:
            with self.client.stream(
                method, url, content=content, follow_redirects=False,
                headers={"Content-Type": "application/json", **self.headers()},
                timeout=httpx.Timeout(self.timeout, connect=min(self.timeout, 5.0)),
            ) as resp:
                chunks = []
                for chunk in resp.iter_bytes():
                    chunks.append(chunk)
                    if time.monotonic() > deadline:
                        raise too_slow
                data = b"".join(chunks)
        except (httpx.HTTPError, RuntimeError) as exc:
            if fired.is_set():
                raise too_slow from exc
            raise self._failure(exc) from exc
        finally:
            timer.cancel()
        self.requests += 1
        self.bytes_received += len(data)
        return Reply(resp.status_code, data, resp.headers.get("location"))

    def _failure(self, exc: Exception) -> Exception:
        """What a failed request means, in words."""
        if isinstance(exc, httpx.ConnectError):
            return SourceError(f"cannot connect to {self.url}: connection refused or unreachable")
        if isinstance(exc, httpx.TimeoutException):
            return SourceError(f"{self.url} did not answer within {self.timeout:g} s")
        if isinstance(exc, httpx.HTTPError):
            return SourceError(f"connection to {self.url} failed ({type(exc).__name__})")
        return exc

    def _not_json(self, status: int) -> SourceError:
        if status >= 500:
            return SourceError(f"server error {status} from {self.url}")
        if status == 404:
            return SourceError(f"no such project/space: {self.url} answered 404", retry=False)
        return SourceError(f"malformed reply from {self.url} (HTTP {status}, not JSON)")

    def _refuse(self, path: str, status: int, error: Any) -> None:
        """Raise what a JSON reply with an error, or an error status, means."""
        error_text = redact(str(error), [self.token])[:300] if error is not None else ""
        if status == 404:
            if error_text.startswith("Unknown API"):
                raise UnknownApi(path)
            raise SourceError(f"no such project/space: {self.url} answered 404", retry=False)
        if error is not None and "not found" in error_text and "roject" in error_text:
            # Retried at the normal pace: the project appears when its run starts.
            raise SourceError(f"no such project/space: {error_text}")
        said = f": {error_text}" if error_text else ""
        if status >= 500:
            raise SourceError(f"server error {status} from {self.url}{said}")
        if status >= 400:
            raise SourceError(f"request refused (HTTP {status}){said}")
        raise SourceError(f"server error: {error_text}")


def query_rows(data: Any, url: str) -> list[dict[str, Any]]:
    """The rows of a `query_project` reply (each an object), or a SourceError in words."""
    rows = data.get("rows") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise SourceError(f"malformed reply from {url} (query without rows)")
    odd = [r for r in rows if not isinstance(r, dict)]
    if odd:
        raise SourceError(f"malformed reply from {url}: its rows are "
                          f"{type(odd[0]).__name__}s, not objects (is it a Trackio "
                          "server?)")
    return rows
