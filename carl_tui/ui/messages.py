"""Messages: what the follower posts to the app and the app hands down to the dashboard,
what the dashboard asks of the app, and what worker threads post to the screens of the
actions.

Each is a small dataclass. Errors travel as one line of plain, user-facing text made
by `failure` (never a traceback, never a token). Messages that supersede one
another (new data in the store, upload progress) say so with `can_replace`:
a queued older one is dropped, so a backlog collapses to the newest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from textual.message import Message

from carl_tui.errors import CarlError, describe
from carl_tui.redact import redact

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

    from carl_tui.actions.jobs import HardwareOption
    from carl_tui.actions.launch_spec import LaunchSpec
    from carl_tui.actions.local_job import LocalJob
    from carl_tui.actions.push import PushProgress, PushResult
    from carl_tui.events import Job, RunRef
    from carl_tui.store import Notice, RunSnapshot


def failure(what: str, exc: BaseException) -> str:
    """The one wording of a background job's failure, as the dialog that ran it shows it:
    a `CarlError`'s own sentence (it says what failed and why), else `<what> failed:
    <type>: <first line>`, secret-free."""
    if isinstance(exc, CarlError):
        return redact(str(exc))
    return f"{what} failed: {describe(exc)}"


@dataclass
class StoreChanged(Message):
    """Source threads added events to the store; one queued message stands for all."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, StoreChanged)


@dataclass
class SnapshotUpdated(Message, bubble=False):
    """The follower's news, one per update of the store: a new snapshot of the run on
    screen (None: it did not change) with the runs compared with it (None where a run
    has no data), every run the store knows, and the notices to raise. The app raises
    the notices and hands the message down to the dashboard (it never bubbles back up).
    `grouped`: the other runs' notices told only as a count so far, for the events view."""

    snapshot: RunSnapshot | None
    compared: tuple[RunSnapshot | None, ...] = ()
    runs: tuple[RunRef, ...] = ()
    notices: tuple[Notice, ...] = ()
    grouped: tuple[Notice, ...] = ()


@dataclass
class CompareSelected(Message):
    """The fleet table's selection changed: these runs are overlaid on the dashboard's
    plots."""

    keys: tuple[str, ...] = ()


@dataclass
class CardWanted(Message):
    """The dashboard's `i`: the card of the run `key` (None: no run yet), with the runs
    compared with it."""

    key: str | None
    compared: tuple[str, ...] = ()


@dataclass
class StatusTick(Message, bubble=False):
    """Every second, and after an update: the store's unused_input and the time, for the status
    bar, the job line and the system panel (ages tick)."""

    summary: dict
    snapshot: RunSnapshot | None
    now: float
    history: str = ""  # the run's history in one quiet line (`Follower.history_line`)


@dataclass
class DashboardReady(Message):
    """The dashboard's first frame is on screen: data may flow in."""


@dataclass
class CompareChanged(Message):
    """The dashboard wants these runs (or every run of the project) overlaid."""

    keys: tuple[str, ...] = ()
    overlay: bool = False


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
    job: Job | None = None
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
    rows: list[Job] = field(default_factory=list)
    error: str = ""
