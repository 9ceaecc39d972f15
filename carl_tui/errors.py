"""One error base for everything a user may be told about.

`CarlError` carries a message fit to show as is (one line or a few, no
traceback, no secret). Sources raise `SourceError`, actions raise
`ActionError`; both are `CarlError`s, so a worker's failure handler needs
one `except CarlError`.
"""

from __future__ import annotations


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
