"""`ActionError`: an action that cannot be done, with a message fit to show the user as is.

Failures of the Hub are `carl_tui.hub.HubError`s (see `hub.hub_error`); both are
`carl_tui.errors.CarlError`s.
"""

from __future__ import annotations

from carl_tui.errors import CarlError


class ActionError(CarlError):
    """An action failed. `str(err)` is the user-facing message.

    `kind` is a short machine-readable tag ("auth", "forbidden", "not_found",
    "network", "rate_limit", "server", "overloaded", "no_key", "invalid",
    "missing", "conflict", "unknown"); `status` the HTTP status when there was one.
    """
