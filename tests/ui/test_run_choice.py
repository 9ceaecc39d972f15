"""The run on screen, chosen by one intent (`ui/run_choice.py`): every intent, as a
function over plain inputs; and the pacing of its snapshots (`ui/pacing.py`)."""

from __future__ import annotations

import pytest

from carl_tui.events import RunRef, ScalarBatch
from carl_tui.store import RunStore
from carl_tui.ui.follower import Follower
from carl_tui.ui.pacing import HIDDEN_PULL_S, MIN_GAP_S, SHARE, Pacer
from carl_tui.ui.run_choice import NEWEST, PICKED, Choice, Intent, Want, choose_run

A = RunRef("trackio", "proj-a", "id-a", "alpha")
B = RunRef("trackio", "proj-b", "id-b", "exp/Nov26_host")
C = RunRef("trackio", "proj-b", "id-c", "gamma")
RUNS = [C, B, A]  # most recently updated first


def newest(run):
    return lambda: run


CASES = [
    # (what is wanted, the run on screen, the runs held, the newest) -> the choice
    ("newest: none on screen", NEWEST, None, RUNS, A, Choice(A.key, NEWEST, True)),
    ("newest: moves to a newer run", NEWEST, B.key, RUNS, A, Choice(A.key, NEWEST, True)),
    ("newest: already on screen", NEWEST, A.key, RUNS, A, Choice(A.key, NEWEST, False)),
    ("newest: no run yet", NEWEST, None, [], None, Choice(None, NEWEST, False)),
    ("named: by name, met", Want(Intent.NAMED, "gamma"), A.key, RUNS, A,
     Choice(C.key, PICKED, True)),
    ("named: by run id", Want(Intent.NAMED, "id-b"), None, RUNS, A,
     Choice(B.key, PICKED, True)),
    ("named: by the end of a path-like name", Want(Intent.NAMED, "Nov26_host"), None, RUNS,
     A, Choice(B.key, PICKED, True)),
    ("named: met, already on screen", Want(Intent.NAMED, "alpha"), A.key, RUNS, A,
     Choice(A.key, PICKED, False)),
    ("named: not read yet, the newest meanwhile", Want(Intent.NAMED, "later"), None, RUNS,
     A, Choice(A.key, Want(Intent.NAMED, "later"), True)),
    ("named: not read yet, the run on screen stays", Want(Intent.NAMED, "later"), B.key,
     RUNS, A, Choice(B.key, Want(Intent.NAMED, "later"), False)),
    ("run: has data", Want(Intent.RUN, B.key), A.key, RUNS, A, Choice(B.key, PICKED, True)),
    ("run: has data, already on screen", Want(Intent.RUN, B.key), B.key, RUNS, A,
     Choice(B.key, PICKED, True)),
    ("run: no data yet, none on screen: still none", Want(Intent.RUN, "hf-job:x:y"), None,
     RUNS, A, Choice(None, Want(Intent.RUN, "hf-job:x:y"), False)),
    ("run: no data yet, the run on screen stays", Want(Intent.RUN, "hf-job:x:y"), A.key,
     RUNS, C, Choice(A.key, Want(Intent.RUN, "hf-job:x:y"), False)),
    ("project: its first run (most recently updated)", Want(Intent.PROJECT, "proj-b"),
     A.key, RUNS, A, Choice(C.key, PICKED, True)),
    ("project: no run yet, none on screen: the newest", Want(Intent.PROJECT, "proj-z"),
     None, RUNS, B, Choice(B.key, Want(Intent.PROJECT, "proj-z"), True)),
    ("project: no run yet, the run on screen stays", Want(Intent.PROJECT, "proj-z"), A.key,
     RUNS, B, Choice(A.key, Want(Intent.PROJECT, "proj-z"), False)),
    ("picked: stays though another is newer", PICKED, B.key, RUNS, A,
     Choice(B.key, PICKED, False)),
    ("picked: none on screen: the newest", PICKED, None, RUNS, C, Choice(C.key, PICKED, True)),
]


@pytest.mark.parametrize(("want", "current", "runs", "newest_run", "expected"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_intent_chooses_its_run(want, current, runs, newest_run, expected):
    assert choose_run(want, current, runs, newest(newest_run)) == expected


def test_the_newest_is_looked_for_only_when_it_can_be_shown():
    asked = []

    def newest_run():
        asked.append(1)
        return A

    choose_run(PICKED, B.key, RUNS, newest_run)
    choose_run(Want(Intent.RUN, "x"), None, RUNS, newest_run)
    choose_run(Want(Intent.PROJECT, "proj-b"), None, RUNS, newest_run)
    assert asked == []
    choose_run(NEWEST, B.key, RUNS, newest_run)
    assert asked == [1]


def test_the_pacer_holds_only_while_a_backlog_is_read():
    now = [100.0]
    pacer = Pacer(clock=lambda: now[0])
    assert not pacer.holding(catching_up=True)  # the first snapshot: at once
    pacer.drawn(0.5)  # ten times what it cost: 5 s
    now[0] += SHARE * 0.5 - 0.1
    assert pacer.holding(catching_up=True)
    assert not pacer.holding(catching_up=False)  # the backlog read: paint at once
    now[0] += 0.2
    assert not pacer.holding(catching_up=True)
    pacer.drawn(0.01)  # cheap: a second between snapshots all the same
    now[0] += MIN_GAP_S - 0.1
    assert pacer.holding(catching_up=True)
    pacer.looked_hidden()
    now[0] += HIDDEN_PULL_S - 0.1
    assert pacer.holding(catching_up=True)
    now[0] += 0.2
    assert not pacer.holding(catching_up=True)


def test_the_follower_keeps_one_intent_the_last_asked():
    """A launched job's run is followed once it has data, unless the user picked another
    run meanwhile: the last intent stands (two flags once let the older one win)."""
    posted: list = []
    follower = Follower(posted.append, RunStore(), [], preferred=None)
    follower.emit([ScalarBatch.from_rows(A, [(0, {"loss": 1.0})])])
    follower.pull(max_points=100)
    assert follower.current_run == A.key and follower.want == PICKED  # chosen: it stays
    follower.follow(B.key)  # not read yet: the run on screen stays
    follower.pull(max_points=100)
    assert follower.current_run == A.key and follower.want == Want(Intent.RUN, B.key)
    follower.emit([ScalarBatch.from_rows(B, [(0, {"loss": 1.0})])])
    follower.pull(max_points=100)
    assert follower.current_run == B.key and follower.want == PICKED
    follower.follow(C.key)
    follower.switch_run(A.key)  # the user's pick replaces the run awaited
    follower.emit([ScalarBatch.from_rows(C, [(0, {"loss": 1.0})])])
    follower.pull(max_points=100)
    assert follower.current_run == A.key and posted[-1].snapshot.run == A
