"""Messages down, one way up: the follower posts what it has (never calls into the app),
every write to the store goes through it, screens and widgets never reach into the app,
and the UI's modules import each other in one direction only."""

from __future__ import annotations

import ast
import pathlib

from carl_tui.events import RunRef, ScalarBatch
from carl_tui.store import RunStore
from carl_tui.ui.follower import Follower
from carl_tui.ui.messages import SnapshotUpdated, StoreChanged, failure

UI = pathlib.Path(__file__).resolve().parents[2] / "carl_tui" / "ui"
RUN = RunRef("test", "proj", "run-1", "first")
OTHER = RunRef("test", "proj", "run-2", "second")


def rows(n: int, acc: float = 0.5) -> list[tuple[int, dict[str, float]]]:
    return [(s, {"mean_token_accuracy": acc, "entropy": 1.0}) for s in range(n)]


def test_the_follower_posts_one_update_with_the_snapshot_and_its_notices():
    posted: list = []
    follower = Follower(posted.append, RunStore(), [], preferred="run-1")
    follower.emit([ScalarBatch.from_rows(RUN, rows(30, acc=1.0))])  # crystallises: a notice
    assert [type(m) for m in posted] == [StoreChanged]
    assert follower.pull(max_points=500)
    update = posted[-1]
    assert isinstance(update, SnapshotUpdated)
    assert update.snapshot is follower.snapshot and update.snapshot.run == RUN
    assert update.snapshot.last_step == 29 and update.runs == (RUN,)
    assert any(n.kind == "phase_transition" and n.run == RUN for n in update.notices)
    assert update.compared == ()
    # Nothing new: no message, and the pull says so.
    assert not follower.pull(max_points=500) and posted[-1] is update


def test_the_run_named_is_shown_once_it_appears_though_another_run_was_read_first():
    """`--run second`: a source reads another run first, which shows meanwhile; the run
    named takes the screen when its first rows arrive (before, the screen stayed on the
    first run read), and a run the user picks afterwards is not taken back."""
    posted: list = []
    follower = Follower(posted.append, RunStore(), [], preferred="second")
    follower.emit([ScalarBatch.from_rows(RUN, rows(10))])
    follower.pull(max_points=500)
    assert posted[-1].snapshot.run == RUN  # nothing else to show yet
    follower.emit([ScalarBatch.from_rows(OTHER, rows(5))])
    follower.pull(max_points=500)
    assert follower.current_run == OTHER.key and posted[-1].snapshot.run == OTHER
    follower.switch_run(RUN.key)
    follower.emit([ScalarBatch.from_rows(OTHER, [(5, {"entropy": 0.5})])])
    follower.pull(max_points=500)
    assert follower.current_run == RUN.key


def test_compared_runs_come_with_the_update_and_follow_their_own_changes():
    posted: list = []
    follower = Follower(posted.append, RunStore(), [], preferred="run-1")
    follower.emit([ScalarBatch.from_rows(RUN, rows(10)), ScalarBatch.from_rows(OTHER, rows(5))])
    follower.pull(max_points=500)
    follower.compare_with([OTHER.key], overlay=False)
    follower.pull(max_points=500)
    (other,) = posted[-1].compared
    assert other.run == OTHER and other.last_step == 4
    # New rows of the compared run alone bring a new update with them.
    follower.emit([ScalarBatch.from_rows(OTHER, [(5, {"entropy": 0.5})])])
    follower.pull(max_points=500)
    assert posted[-1].snapshot is not None and posted[-1].compared[0].last_step == 5
    # Overlay: every other run of the project, with no keys named.
    follower.compare_with([], overlay=True)
    follower.pull(max_points=500)
    assert [s.run for s in posted[-1].compared] == [OTHER]


def test_one_wording_for_a_failed_background_job():
    from carl_tui.errors import CarlError

    said = failure("Push", RuntimeError("disk full\nmore"))
    assert said == "Push failed: RuntimeError: disk full"
    assert failure("Push", CarlError("Push failed: not found (404)")) == \
        "Push failed: not found (404)"
    token = "hf_" + "A" * 34
    assert token not in failure("Launch", OSError(f"bad {token}"))
    assert token not in failure("Launch", CarlError(f"Launch failed: bad {token}"))


# -- the structure ---------------------------------------------------------------------


def ui_modules() -> dict[str, pathlib.Path]:
    root = UI.parent.parent
    return {".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
            for p in UI.rglob("*.py")}


def imported(path: pathlib.Path, known: set[str]) -> set[str]:
    """The carl_tui.ui modules `path` imports, anywhere in it (functions and
    TYPE_CHECKING blocks included)."""
    out = set()
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.Import):
            out.update(a.name for a in n.names)
        elif isinstance(n, ast.ImportFrom) and n.module:
            out.add(n.module)
            out.update(f"{n.module}.{a.name}" for a in n.names)
    return out & known


def test_no_import_circle_inside_the_ui():
    mods = ui_modules()
    graph = {m: imported(p, set(mods)) - {m} for m, p in mods.items()}
    done: set[str] = set()
    circles: list[str] = []

    def visit(m: str, path: list[str]) -> None:
        if m in path:
            circles.append(" -> ".join([*path[path.index(m):], m]))
            return
        if m in done:
            return
        for n in sorted(graph[m]):
            visit(n, [*path, m])
        done.add(m)

    for m in sorted(graph):
        visit(m, [])
    assert len(graph) > 20 and circles == []


def test_only_the_follower_writes_the_store():
    writers = [str(p.relative_to(UI)) for p in UI.rglob("*.py")
               if any(isinstance(n, ast.Attribute) and n.attr == "apply"
                      and "store" in ast.unparse(n.value)
                      for n in ast.walk(ast.parse(p.read_text())))]
    assert writers == ["follower.py"]


def test_screens_and_widgets_never_reach_into_the_app():
    """They get what they show in messages and their constructor, never from the app's
    store, follower, config or controller."""
    reach = {"store", "follower", "config", "controller", "settings", "services"}
    offenders = []
    for p in [*(UI / "screens").glob("*.py"), *(UI / "widgets").glob("*.py")]:
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.Attribute) and n.attr in reach \
                    and ast.unparse(n.value).split(".")[-1] in ("app", "carl"):
                offenders.append(f"{p.name}: {ast.unparse(n)}")
    assert offenders == []


def test_dashboard_keys_are_the_screens_own():
    from carl_tui.ui.keys import VIEW_KEYS

    assert [k.id for k in VIEW_KEYS if not k.id.startswith(("view.", "chart."))] == []
