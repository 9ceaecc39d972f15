"""One error base for everything a user may be told about.

`CarlError` carries a message fit to show as is (one line or a few, no
traceback, no secret). Sources raise `SourceError`, actions raise
`ActionError`; both are `CarlError`s, so a worker's failure handler needs
one `except CarlError`.
"""

from __future__ import annotations

from carl_tui.redact import redact


class CarlError(Exception):
    """A failure with a user-facing message.

    `retry`: whether trying again can help (a refused connection can, a 404
    for a wrong name cannot). `kind`: a short machine-readable tag ("auth",
    "network", "not_found", "invalid", ...). `status`: the HTTP status, when
    there was one.
    """

    def __init__(
        self,
        message: str,
        *,
        retry: bool = True,
        kind: str = "unknown",
        status: int | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.retry = retry
        self.kind = kind
        self.status = status

    def __str__(self) -> str:
        return self.message


class SourceError(CarlError):
    """A failure of a source a user should read in the status bar. `retry` says
    whether trying again can help (401/403/404 with a wrong name usually cannot).
    (Here rather than in `sources/base.py`, which re-exports it, so that what the CLI
    checks before the first frame imports no reader.)"""


_NETWORK_CLASS_NAMES = frozenset({
    "ConnectError", "ConnectTimeout", "ReadTimeout", "WriteTimeout", "PoolTimeout",
    "TimeoutException", "NetworkError", "ReadError", "WriteError", "RemoteProtocolError",
    "ProtocolError", "TransportError", "ConnectionError", "ConnectionResetError",
    "ConnectionRefusedError", "IncompleteRead",
})


def is_network_error(exc: BaseException) -> bool:
    """True for connection failures and dropped connections of any HTTP stack."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:  # walk the cause chain
        seen.add(id(e))
        if any(cls.__name__ in _NETWORK_CLASS_NAMES for cls in type(e).__mro__):
            return True
        e = e.__cause__ or e.__context__
    return False


def describe(exc: BaseException) -> str:
    """One secret-free line for any failure: a CarlError's own message, else
    `TypeName: first line`."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if isinstance(exc, CarlError):
        return redact(text or type(exc).__name__)
    name = type(exc).__name__
    return redact(f"{name}: {text}" if text else name)
