"""A fake of the Anthropic Messages API (`POST /v1/messages`) on a `FakeServer`.

Streams Server-Sent Events the way the API does: message_start,
content_block_start, ping, content_block_delta (text_delta) ..., content_block_stop,
message_delta, message_stop. Errors use the API's JSON shape
`{"type": "error", "error": {"type": ..., "message": ...}, "request_id": ...}`,
either as an HTTP status (401, 429, 500, 529 ...) or as an `error` event in
the middle of a stream.

Usage:
    state = AnthropicState(replies=["The run is healthy."])
    install_messages_routes(srv, state)
    client = anthropic.Anthropic(base_url=srv.url, api_key=TEST_KEY, max_retries=0)
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from tests.fakes.server import FakeServer, Request, Response

TEST_KEY = "sk-ant-api03-FakeLoopbackKey0000000000000000"

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
ERROR_MESSAGES = {
    401: "invalid x-api-key",
    429: "Number of request tokens has exceeded your per-minute rate limit",
    500: "Internal server error",
    529: "Overloaded",
}


@dataclass
class Reply:
    """One scripted answer: `text` streamed in `chunks` pieces; or an HTTP `status` error;
    or text followed by an `error` event after `error_after` deltas."""

    text: str = ""
    status: int = 200
    error_after: int | None = None
    error_type: str = "overloaded_error"
    chunk: int = 12  # characters per text_delta


@dataclass
class AnthropicState:
    keys: set[str] = field(default_factory=lambda: {TEST_KEY})
    replies: list[Reply | str] = field(default_factory=list)  # consumed in order
    default_text: str = "Nothing scripted."
    bodies: list[dict] = field(default_factory=list)  # every request body received, parsed
    raw_bodies: list[bytes] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next_reply(self) -> Reply:
        with self.lock:
            r = self.replies.pop(0) if self.replies else Reply(self.default_text)
        return Reply(r) if isinstance(r, str) else r


def _sse(event: str, data: dict) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def error_body(status: int, etype: str | None = None, message: str | None = None) -> dict:
    etype = etype or ERROR_TYPES.get(status, "api_error")
    return {
        "type": "error",
        "error": {"type": etype, "message": message or ERROR_MESSAGES.get(status, etype)},
        "request_id": "req_" + secrets.token_hex(12),
    }


def _events(model: str, reply: Reply, input_tokens: int) -> Iterator[bytes]:
    msg_id = "msg_" + secrets.token_hex(12)
    yield _sse("message_start", {
        "type": "message_start",
        "message": {"id": msg_id, "type": "message", "role": "assistant", "content": [],
                    "model": model, "stop_reason": None, "stop_sequence": None,
                    "usage": {"input_tokens": input_tokens, "output_tokens": 1}},
    })
    yield _sse("content_block_start", {"type": "content_block_start", "index": 0,
                                       "content_block": {"type": "text", "text": ""}})
    yield _sse("ping", {"type": "ping"})
    pieces = [reply.text[i:i + reply.chunk] for i in range(0, len(reply.text), reply.chunk)]
    for n, piece in enumerate(pieces):
        if reply.error_after is not None and n >= reply.error_after:
            yield _sse("error", error_body(529 if reply.error_type == "overloaded_error" else 500,
                                           reply.error_type))
            return
        yield _sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                           "delta": {"type": "text_delta", "text": piece}})
    yield _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
    yield _sse("message_delta", {"type": "message_delta",
                                 "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                 "usage": {"output_tokens": max(1, len(pieces))}})
    yield _sse("message_stop", {"type": "message_stop"})


def install_messages_routes(server: FakeServer, state: AnthropicState) -> None:
    def messages(req: Request) -> Response:
        with state.lock:
            state.raw_bodies.append(req.body)
            state.headers.append(dict(req.headers))
        body = req.json()
        with state.lock:
            state.bodies.append(body)
        auth = req.headers.get("authorization", "")
        bearer = auth[7:] if auth.lower().startswith("bearer ") else ""
        key = req.headers.get("x-api-key") or bearer
        rid = {"request-id": "req_" + secrets.token_hex(8)}
        if key not in state.keys:
            return Response.json(error_body(401), status=401, headers=rid)
        if not isinstance(body, dict) or not body.get("messages") or not body.get("model"):
            return Response.json(error_body(400, message="messages: field required"), status=400,
                                 headers=rid)
        reply = state.next_reply()
        if reply.status != 200:
            return Response.json(error_body(reply.status), status=reply.status, headers=rid)
        if not body.get("stream"):
            return Response.json({
                "id": "msg_" + secrets.token_hex(12), "type": "message", "role": "assistant",
                "model": body["model"], "content": [{"type": "text", "text": reply.text}],
                "stop_reason": "end_turn", "stop_sequence": None,
                "usage": {"input_tokens": len(req.body) // 4,
                          "output_tokens": len(reply.text) // 4},
            }, headers=rid)
        return Response(
            200,
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", **rid},
            stream=_events(body["model"], reply, len(req.body) // 4),
        )

    server.route("POST", r"/v1/messages", messages)
