"""Find the user's Hugging Face token, and keep it out of every text we show.

Lookup order: an explicit token, then the `HF_TOKEN` environment variable,
then the token saved by `hf auth login` (`huggingface_hub.get_token()`).
`HubToken` never prints its value (repr/str show `[REDACTED]`); `redact()` masks
tokens in any text before it reaches a status bar, log or exception.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from carl_tui.redact import MASK, redact  # noqa: F401  (re-exported for the Hub callers)


@dataclass(frozen=True, slots=True)
class HubToken:
    """A token and where it came from ("argument", "HF_TOKEN", "saved login")."""

    value: str = field(repr=False)
    origin: str = "argument"

    def __repr__(self) -> str:
        return f"HubToken(origin={self.origin!r}, value={MASK!r})"

    __str__ = __repr__

    def auth_header(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.value}"}


HUB_MISSING = "this needs huggingface_hub: pip install 'carl-tui[hub]'"


def hub_module():
    """`huggingface_hub`, imported on first use; a clear ImportError when it is missing."""
    try:
        import huggingface_hub
    except ImportError:
        raise ImportError(HUB_MISSING) from None
    return huggingface_hub


def find_token(explicit: str | HubToken | None = None) -> HubToken | None:
    """The token to use, or None when the user has none."""
    if isinstance(explicit, HubToken):
        return explicit
    if explicit:
        return HubToken(explicit, "argument")
    env = os.environ.get("HF_TOKEN", "").strip()
    if env:
        return HubToken(env, "HF_TOKEN")
    try:
        from huggingface_hub import get_token  # lazy: keeps start-up light
    except ImportError:
        return None
    try:
        saved = get_token()
    except (OSError, ValueError):  # a broken token file must not stop the dashboard
        return None
    return HubToken(saved, "saved login") if saved else None

