"""`ActionError`: a failed action, with a message fit to show the user as is.

`hub_error()` and `network_error()` turn exceptions of huggingface_hub and the
HTTP stack into plain sentences (no tracebacks, no tokens, no URLs with
credentials).
"""

from __future__ import annotations

from carl_tui.errors import CarlError


class ActionError(CarlError):
    """An action failed. `str(err)` is the user-facing message.

    `kind` is a short machine-readable tag ("auth", "forbidden", "not_found",
    "network", "rate_limit", "server", "overloaded", "no_key", "invalid",
    "missing", "conflict", "unknown"); `status` the HTTP status when there was one.
    """


_NETWORK_CLASS_NAMES = (
    "ConnectError",
    "ConnectTimeout",
    "ReadTimeout",
    "WriteTimeout",
    "PoolTimeout",
    "TimeoutException",
    "NetworkError",
    "ReadError",
    "WriteError",
    "RemoteProtocolError",
    "ProtocolError",
    "TransportError",
    "ConnectionError",
    "ConnectionResetError",
    "ConnectionRefusedError",
    "IncompleteRead",
)


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


def network_error(what: str, service: str = "the Hugging Face Hub") -> ActionError:
    return ActionError(
        f"{what} failed: the connection to {service} was lost or refused. "
        "Check your network and try again.",
        kind="network",
    )


def _status(exc: BaseException) -> int | None:
    resp = getattr(exc, "response", None)
    code = getattr(resp, "status_code", None)
    return code if isinstance(code, int) else None


def hub_error(exc: BaseException, what: str, *, repo_id: str = "", namespace: str = "") -> ActionError:
    """A plain message for an exception raised by huggingface_hub during `what`."""
    if isinstance(exc, ActionError):
        return exc
    status = _status(exc)
    target = repo_id or namespace
    on = f" on {target}" if target else ""
    if status == 401:
        return ActionError(
            f"{what} failed: the Hugging Face Hub rejected the token (401). "
            "Log in again with `hf auth login` or set HF_TOKEN to a valid token.",
            kind="auth",
            status=401,
        )
    if status == 403:
        return ActionError(
            f"{what} failed: permission denied{on} (403). "
            "The token needs write access to that namespace (a fine-grained token may lack it).",
            kind="forbidden",
            status=403,
        )
    if status == 404:
        return ActionError(f"{what} failed: not found{on} (404).", kind="not_found", status=404)
    if status == 409:
        return ActionError(f"{what} failed: conflict{on} (409).", kind="conflict", status=409)
    if status == 429:
        return ActionError(
            f"{what} failed: rate limited by the Hugging Face Hub (429). Wait a minute and retry.",
            kind="rate_limit",
            status=429,
        )
    if status == 402:
        return ActionError(
            f"{what} failed: payment required (402). Jobs need a billing method or credits on the namespace.",
            kind="forbidden",
            status=402,
        )
    if status is not None and status >= 500:
        return ActionError(
            f"{what} failed: the Hugging Face Hub had a server error ({status}). Try again shortly.",
            kind="server",
            status=status,
        )
    if status is not None:
        return ActionError(f"{what} failed: the Hub answered {status}.", kind="unknown", status=status)
    if is_network_error(exc):
        return network_error(what)
    if isinstance(exc, FileNotFoundError):
        return ActionError(f"{what} failed: {exc.filename or exc} does not exist.", kind="missing")
    return ActionError(f"{what} failed: {type(exc).__name__}.", kind="unknown")
