"""Messages that worker threads post to the app and to the screens of the actions.

Each is a small dataclass. Errors travel as the plain, user-facing text of an
`ActionError` (never a traceback, never a token).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from textual.message import Message


@dataclass
class StoreChanged(Message):
    """A source thread added events to the store; at most one is queued at a time."""


@dataclass
class HardwareLoaded(Message):
    """The Jobs hardware flavors (GPU only) for the launch form, or why they are missing."""

    options: list[Any] = field(default_factory=list)  # actions.jobs.HardwareOption
    namespace: str = ""  # the token's user, to suggest an output repo
    error: str = ""


@dataclass
class LaunchFinished(Message):
    """A launch ended: `outcome` on success (a `LaunchOutcome`), else `error`."""

    outcome: Any = None
    error: str = ""


@dataclass
class PushProgressed(Message):
    progress: Any  # actions.push.PushProgress


@dataclass
class PushFinished(Message):
    """An upload ended: `result` (a `PushResult`) only when the commit was made."""

    result: Any = None
    error: str = ""


@dataclass
class DiagnosisDelta(Message):
    """Text of Claude's answer that arrived since the last delta."""

    text: str


@dataclass
class DiagnosisFinished(Message):
    """An answer ended. `answer` is what arrived (possibly partial when `error` is set)."""

    question: str
    answer: str
    error: str = ""


@dataclass
class JobsListed(Message):
    rows: list[Any] = field(default_factory=list)  # hub.JobRow
    error: str = ""
