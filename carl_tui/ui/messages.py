"""Messages that worker threads post to the app and to the screens of the actions.

Each is a small dataclass. Errors travel as the plain, user-facing text of a
`CarlError` (never a traceback, never a token). Messages that supersede one
another (new data in the store, upload progress) say so with `can_replace`:
a queued older one is dropped, so a backlog collapses to the newest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from textual.message import Message

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

    from carl_tui.actions.jobs import HardwareOption, LaunchedJob
    from carl_tui.actions.launch_spec import LaunchSpec
    from carl_tui.actions.local_job import LocalJob
    from carl_tui.actions.push import PushProgress, PushResult
    from carl_tui.events import RunRef
    from carl_tui.hub import JobRow


@dataclass
class StoreChanged(Message):
    """Source threads added events to the store; one queued message stands for all."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, StoreChanged)


@dataclass
class HardwareLoaded(Message):
    """The Jobs hardware flavors (GPU only) for the launch form, or why they are missing."""

    options: list[HardwareOption] = field(default_factory=list)
    namespace: str = ""  # the token's user, to suggest an output repo
    error: str = ""


@dataclass(frozen=True)
class LaunchOutcome:
    """What was started: a Hugging Face Job (`job`) or a process here (`local`)."""

    spec: LaunchSpec
    run: RunRef  # the run the dashboard follows
    job: LaunchedJob | None = None
    local: LocalJob | None = None
    stream_path: Path | None = None


@dataclass
class LaunchFinished(Message):
    """A launch ended: `outcome` on success, else `error`."""

    outcome: LaunchOutcome | None = None
    error: str = ""


@dataclass
class PushProgressed(Message):
    """How far an upload is; only the newest one matters."""

    progress: PushProgress

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, PushProgressed)


@dataclass
class PushFinished(Message):
    """An upload ended: `result` only when the commit was made."""

    result: PushResult | None = None
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
    rows: list[JobRow] = field(default_factory=list)
    error: str = ""
