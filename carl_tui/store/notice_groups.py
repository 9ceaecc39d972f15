"""Notices from runs other than the one in view, grouped: overlaying a 300-run project
must say "300 runs crystallised" once, not raise 300 toasts.

`NoticeGrouper` holds other runs' notices for a moment (`WINDOW`), so that a burst read by
several sources' threads over several pulls is told together. `group_other_runs` leaves
the notices of the run in view as they are; of the other runs' notices, one kind from one
run passes as it is, one kind from several runs becomes one notice naming how many runs
and the first few of them (each run's own notice is listed in the events view, `e`, and
stays in its card, `i`; its row of the fleet table, `r`, shows its gate). Pure: no
Textual.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace

from carl_tui.store.snapshot import Notice

# How a kind reads after "N runs ..."; another kind reads as "N runs: <kind>".
KIND_VERBS = {"phase_transition": "crystallised", "job": "changed job state",
              "cascade": "switched their reward cascade"}
NAMED = 3  # runs named in a grouped notice; the rest are counted


def group_other_runs(notices: list[Notice], current_run: str | None) -> list[Notice]:
    """`notices` with those of other runs than `current_run` (every run, while none is in
    view) grouped by kind, in order."""
    own: list[Notice] = []
    others: dict[str, list[Notice]] = {}
    for n in notices:
        if n.run.key == current_run:
            own.append(n)
        else:
            others.setdefault(n.kind, []).append(n)
    out = list(own)
    for kind, group in others.items():
        runs = list(dict.fromkeys(n.run.key for n in group))
        if len(runs) < 2:
            out.extend(group)
            continue
        out.append(grouped(kind, group, len(runs)))
    return sorted(out, key=lambda n: n.seq)


def grouped(kind: str, group: list[Notice], count: int) -> Notice:
    """One notice for `group` (notices of one kind from `count` runs)."""
    labels = sorted({n.run.label for n in group})
    named = ", ".join(labels[:NAMED]) + (f" and {len(labels) - NAMED} more"
                                         if len(labels) > NAMED else "")
    verb = KIND_VERBS.get(kind)
    what = f"{count} runs {verb}" if verb else f"{count} runs: {kind.replace('_', ' ')}"
    last = group[-1]
    worst = max(group, key=lambda n: _RANK.get(n.severity, 0)).severity
    # Titled with the project (a notice's title is its run's name), not one of the runs.
    run = replace(last.run, name=last.run.project or what)
    return replace(last, run=run, step=None, severity=worst,
                   text=f"{what}: {named} (e lists each; r: the fleet table)")


_RANK = {"information": 0, "warning": 1, "error": 2}


WINDOW = 1.0  # seconds other runs' notices wait for the rest of their burst
MAX_LISTED = 1000  # other runs' notices kept for the events view


class NoticeGrouper:
    """Other runs' notices, held from the first of a burst for `window` seconds, then told
    grouped (`due`); the notices of the run in view pass at once (`take`)."""

    def __init__(self, window: float = WINDOW, clock: Callable[[], float] = time.monotonic):
        self.window = window
        self.clock = clock
        self._held: list[Notice] = []
        self._since: float | None = None
        # Every notice told in a group, each run's own, for the events view (`e`).
        self.grouped: deque[Notice] = deque(maxlen=MAX_LISTED)

    def take(self, notices: list[Notice], current_run: str | None) -> list[Notice]:
        """The notices of `current_run`; the others are held."""
        own = [n for n in notices if n.run.key == current_run]
        others = [n for n in notices if n.run.key != current_run]
        if others and self._since is None:
            self._since = self.clock()
        self._held += others
        return own

    @property
    def holding(self) -> bool:
        return bool(self._held)

    def due(self) -> list[Notice]:
        """The held notices, grouped, once the burst's window has passed."""
        if self._since is None or self.clock() - self._since < self.window:
            return []
        held, self._held, self._since = self._held, [], None
        told = group_other_runs(held, None)
        self.grouped.extend(n for n in held if n not in told)  # those told as a count
        return told


# -- history: what happened before the dashboard opened ---------------------------------

#: A notice dated more than this before the dashboard opened is history (a little room
#: for a clock of the training machine a few seconds behind this one's).
HISTORY_SLACK_S = 30.0
#: Runs whose every notice is history: a recording played back (`carl-tui replay`).
HISTORY_SOURCES = ("replay",)
#: How a kind reads in the history line ("history: crystallised at 315, 6.5d ago").
HISTORY_WORDS = {"phase_transition": "crystallised", "cascade": "CARL on"}
HISTORY_NAMED = 2  # kinds named in the line; the rest counted (the events view has all)


def is_history(notice: Notice, opened_at: float,
               data_time: Callable[[str], float | None]) -> bool:
    """Whether `notice` tells of something that happened before the dashboard opened at
    `opened_at`: its data's own time (`Notice.at`, else the run's newest data time,
    `data_time(run_key)`: a file's time where its records carry none) is older, or its
    run is a recording played back. A notice of no step (a warning about the data, not
    an event of the run) and one of unknown time are news."""
    if notice.run.source in HISTORY_SOURCES:
        return True
    if notice.step is None:
        return False
    at = notice.at if notice.at is not None else data_time(notice.run.key)
    return at is not None and at < opened_at - HISTORY_SLACK_S


def history_line(notices: list[Notice], now: float,
                 age: Callable[[float | None, float], str],
                 phase: tuple[str, int | None] | None = None) -> str:
    """One quiet line of a run's history: each kind's latest notice by its step, the
    gate's and the cascade's first, at most HISTORY_NAMED, then the age of the newest
    ("history: crystallised at 315, CARL on at 340, 6.5d ago"); "" when none. `phase`:
    the run's phase as it reads now (the phase panel's word and its first step): said in
    place of the phase notices, which a later reading may have corrected."""
    latest: dict[str, Notice] = {}
    for n in notices:
        latest[n.kind] = n
    kinds = sorted(latest, key=lambda k: (k not in HISTORY_WORDS, latest[k].seq))
    parts = []
    for kind in kinds[:HISTORY_NAMED]:
        n = latest[kind]
        if kind == "phase" and phase is not None:
            word, since = phase
            parts.append(f"{word} since {since}" if since is not None else word)
            continue
        word = HISTORY_WORDS.get(kind) or _phase_word(n) or kind.replace("_", " ")
        parts.append(f"{word} at {n.step}" if n.step is not None else word)
    if not parts:
        return ""
    times = [n.at for n in latest.values() if n.at is not None]
    when = f", {age(max(times), now)}" if times else ""
    more = len(kinds) - HISTORY_NAMED
    return "history: " + ", ".join(parts) + when + (f" (+{more} more: e)" if more > 0 else "")


def _phase_word(n: Notice) -> str:
    """A phase notice's phase ("Phase: CONVERGED since step 35" -> "converged")."""
    if n.kind != "phase" or ": " not in n.text:
        return ""
    return n.text.split(": ", 1)[1].split(" since", 1)[0].strip().lower()
