"""Which run is on screen: one explicit intent, and a pure function that chooses.

The follower keeps a `Want` (what the user or the app asked for) and, at each look at
the store, asks `choose_run` which run to show given the runs held now. Nothing here
reads a store, a clock or a flag: the same inputs always give the same `Choice`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

from carl_tui.events import RunRef


class Intent(Enum):
    #: No run named: the most recently active one, chosen again while the sources read
    #: their history, until the choice is said on screen (then it stays: `PICKED`).
    NEWEST = "newest"
    #: `--run NAME`: the run that answers to NAME once it is read; the newest meanwhile.
    NAMED = "named"
    #: A run key to show as soon as it has data (a launched job's run, the fleet table's
    #: choice): the run on screen stays meanwhile.
    RUN = "run"
    #: A project just opened (the project picker): its first run once it has one; the
    #: newest meanwhile, when no run is on screen.
    PROJECT = "project"
    #: The run on screen stays (the user picked it, or an intent above was met); the
    #: newest only while no run is on screen.
    PICKED = "picked"


@dataclass(frozen=True)
class Want:
    intent: Intent
    target: str | None = None  # NAMED: the name; RUN: the run key; PROJECT: the project


NEWEST = Want(Intent.NEWEST)
PICKED = Want(Intent.PICKED)


@dataclass(frozen=True)
class Choice:
    run: str | None  # the run key on screen
    want: Want  # the intent from now on (`PICKED` once a pending one is met)
    moved: bool  # the run on screen changed, or the intent was met: take a new snapshot


def choose_run(want: Want, current: str | None, runs: Sequence[RunRef],
               newest: Callable[[], RunRef | None]) -> Choice:
    """The run to show, given the intent, the run on screen, the runs held (most recently
    updated first) and the most recently active run (`newest`: asked only when needed,
    it looks at every run)."""
    target = want.target
    if want.intent is Intent.RUN:
        if any(r.key == target for r in runs):
            return Choice(target, PICKED, True)
        return Choice(current, want, False)
    if want.intent is Intent.PROJECT:
        first = next((r for r in runs if r.project == target), None)
        if first is not None:
            return Choice(first.key, PICKED, True)
    if want.intent is Intent.NAMED and target:
        match = next((r for r in runs if r.answers_to(target)), None)
        if match is not None:
            return Choice(match.key, PICKED, match.key != current)
    if current is None or want.intent is Intent.NEWEST:
        run = newest()
        if run is not None and run.key != current:
            return Choice(run.key, want, True)
    return Choice(current, want, False)
