"""The completions view (`a`) on a real tiny GRPO run with log_completions=True (its
stdout, its Trackio store, its W&B run), and at the edges of the phases."""

from __future__ import annotations

import asyncio
import functools
import json

import pytest

from carl_tui.cli import open_request
from carl_tui.completions.readers import reader_factory
from carl_tui.sources.open import SourceRequest, request
from carl_tui.ui.app import DashboardConfig, Services, Settings, build_app
from tests.conftest import ScriptedSource, plain_text
from tests.conftest import wait_for as pilot_wait

SIZE = (160, 45)


wait_for = functools.partial(pilot_wait, timeout=20.0)


def app_for(req: SourceRequest):
    opened = open_request(req)
    return build_app(DashboardConfig(sources=lambda: opened.sources,
                                     settings=Settings(refresh_interval=0.05, run=opened.run),
                                     services=Services(
                                         completions=reader_factory(req, lambda: opened.sources))))


def cells(app) -> list[list[str]]:
    dt = app.screen.query_one("#compl-table")
    return [[str(c) for c in dt.get_row_at(i)] for i in range(dt.row_count)]


def head(app) -> str:
    return plain_text(app.screen.query_one("#compl-head"), 200)


def stream_app(spec_events, reader):
    """The dashboard on the reference run's events, its completions from `reader` alone."""
    src = ScriptedSource()
    src.push(spec_events)
    return build_app(DashboardConfig(sources=[src],
                                     settings=Settings(refresh_interval=0.05),
                                     services=Services(completions=lambda run, meta: [reader])))


def parquet_rows(run, step):
    pq = pytest.importorskip("pyarrow.parquet")
    path = run / "out" / "completions" / f"completions_{step:05d}.parquet"
    return pq.read_table(path).to_pylist()


async def view_on(app, origin, run):
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.press("a")
        assert type(app.screen).__name__ == "CompletionsScreen"
        await wait_for(pilot, lambda: app.screen.step == 4)
        assert "step 4 (4 of 4)" in head(app) and f"from {origin}" in head(app)
        want = parquet_rows(run, 4)
        got = cells(app)
        assert [(r[1], r[2]) for r in got] == [(w["prompt"], w["completion"]) for w in want]
        # coloured by reward, numbers at the source's precision
        assert [float(r[3]) for r in got] == pytest.approx(
            [w["reverse_reward"] for w in want], abs=0.005)
        await pilot.press("left_square_bracket")
        await wait_for(pilot, lambda: app.screen.step == 3)
        assert [(r[1], r[2]) for r in cells(app)] == [
            (w["prompt"], w["completion"]) for w in parquet_rows(run, 3)]
        assert "following" not in head(app)
        await pilot.press("home")
        await wait_for(pilot, lambda: app.screen.step == 1)
        await pilot.press("s")  # by total reward, highest first
        totals = [float(r[5]) for r in cells(app)]
        assert totals == sorted(totals, reverse=True) and "reward ↓" in head(app)
        first = want[0]["completion"]
        await pilot.press("slash")
        await pilot.press(*first, "enter")
        assert app.screen.query_one("#compl-table").row_count == 0  # not in step 1
        await pilot.press("n")
        await wait_for(pilot, lambda: app.screen.step > 1 and cells(app))
        assert all(first in r[2] for r in cells(app))
        await pilot.press("escape")
        assert type(app.screen).__name__ == "DashboardScreen"
    return got


def prompts_and_completions(rows) -> list[tuple[str, str]]:
    return [(r[1], r[2]) for r in rows]


def trl_saved(run, step: int) -> list[tuple[str, str]]:
    """What TRL saved in its parquet file for `step`: (prompt, completion) per row."""
    return [(w["prompt"], w["completion"]) for w in parquet_rows(run, step)]


@pytest.mark.slow
async def test_view_on_the_trainer_stdout(grpo_completions, tmp_path):
    log = tmp_path / "train.log"  # alone: its printed tables, not the parquet beside the run
    log.write_bytes((grpo_completions / "train.log").read_bytes())
    rows = await view_on(app_for(request(watch=str(log))), "stdout", grpo_completions)
    assert prompts_and_completions(rows) == trl_saved(grpo_completions, 4)


@pytest.mark.slow
async def test_view_on_trackio(grpo_completions):
    req = request(trackio_dir=str(grpo_completions / "trackio"), project="compl")
    app = app_for(req)
    await view_on(app, "trackio", grpo_completions)
    # the database the view read its tables from is closed with the app
    readers = [r for shared in app._completion_logs.values() for r in shared.log.readers]
    assert [r.origin for r in readers] == ["trackio"]
    assert readers[0]._conn is None


@pytest.mark.slow
async def test_view_on_wandb(grpo_completions, tmp_path):
    import shutil

    shutil.copytree(grpo_completions / "wandb", tmp_path / "wandb", symlinks=True)
    rows = await view_on(app_for(request(wandb=str(tmp_path / "wandb"))), "wandb",
                         grpo_completions)
    assert prompts_and_completions(rows) == trl_saved(grpo_completions, 4)


def completions_stream(path, steps):
    """The CARL callback's completions lines (its own line builder) for each step: two
    completions per step, the first saying which step it is."""
    from carl_tui.training.completion_sample import completions_line

    with open(path, "w") as f:
        for step in steps:
            logs = {"prompt": [f"p{step}", f"p{step}"],
                    "completion": [f"said at {step}", "other"],
                    "rewards": {"reverse_reward": [step / 100, 0.0]},
                    "advantages": [0.5, -0.5]}
            f.write(json.dumps(completions_line(logs, step, 2)) + "\n")


async def test_phase_edges_jump_to_what_the_model_said_then(spec_events, run_ref, tmp_path):
    from carl_tui.completions.files import StreamReader

    stream = tmp_path / "c.jsonl"
    completions_stream(stream, range(1, 47, 3))  # every third step logs completions
    app = stream_app(spec_events, StreamReader(stream))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None and len(
            app.snapshot.phase.history) >= 4)
        history = app.snapshot.phase.history
        await pilot.press("a")
        await wait_for(pilot, lambda: app.screen.step == 46)
        await pilot.press("home")
        await wait_for(pilot, lambda: app.screen.step == 1)
        seen, edges = [], []
        for phase, start, _ in history[1:]:
            await pilot.press("right_curly_bracket")
            edge = next(s for s in range(1, 47, 3) if s >= start)
            edges.append(edge)
            await wait_for(pilot, lambda e=edge: app.screen.step == e)
            assert cells(app)[0][2] == f"said at {edge}"
            assert f"phase: {phase}" in head(app)
            seen.append(phase)
        assert seen == [p for p, _, _ in history[1:]]
        await pilot.press("left_curly_bracket")
        await wait_for(pilot, lambda: app.screen.step == edges[-2])


@pytest.fixture
def demo_stream(tmp_path):
    """A short real demo run (warm start, SFT, three GRPO steps): its stream."""
    pytest.importorskip("trl")
    import subprocess
    import sys

    stream = tmp_path / "demo.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "carl_tui.training.demo", "--stream", str(stream), "--pace", "0",
         "--warm-start-steps", "4", "--sft-steps", "5", "--grpo-steps", "3", "--seed", "3"],
        check=False, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return stream


@pytest.mark.slow
async def test_view_on_the_demo(demo_stream):
    """The demo's GRPO stage streams each step's completions with their CARL score; the
    view shows them as `carl-tui demo` opens it."""
    from carl_tui.training.demo import DEMO_COMPLETIONS
    from carl_tui.training.tiny import SEP, reverse_score

    stream = demo_stream
    lines = [json.loads(x) for x in stream.read_text().splitlines()]
    assert [x["step"] for x in lines if x.get("event") == "completions"] == [10, 11, 12]
    req = request(watch=str(stream), file_format="jsonl")
    async with app_for(req).run_test(size=SIZE) as pilot:
        app = pilot.app
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.press("a")
        await wait_for(pilot, lambda: app.screen.step == 12)
        t = app.screen.table
        assert t.origin == "stream" and len(t.rows) == DEMO_COMPLETIONS
        for r in t.rows:  # the reward is the task's score of the text shown
            answer = r.prompt.removesuffix(SEP)[::-1]
            assert r.reward("reverse_reward") == pytest.approx(
                reverse_score(r.completion, answer))
            assert 0.0 < r.carl < 1.0
        header = [str(c.label) for c in app.screen.query_one("#compl-table").columns.values()]
        assert header[:4] == ["#", "prompt", "completion", "reverse_reward"]
        assert header[-1] == "CARL score"


async def test_the_key_is_in_the_footer_help_and_palette(spec_events):
    from textual.widgets import Footer

    src = ScriptedSource()
    src.push(spec_events)
    app = build_app(DashboardConfig(sources=[src], settings=Settings(refresh_interval=0.05)))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        assert ("a", "Completions", "app.completions") in {
            (r[0], r[1], r[3]) for r in app.key_help()}
        from textual.widgets._footer import FooterKey

        footer = app.screen.query_one(Footer)
        assert ("a", "Completions") in {(k.key, k.description) for k in footer.query(FooterKey)}
        commands = [c.title for c in app.get_system_commands(app.screen)]
        assert "Completions" in commands
        await pilot.press("a")  # this source names no completions: said, not raised
        await wait_for(pilot, lambda: any(
            "holds no completions" in str(n.message) for n in app._notifications))
        assert app.screen is app.dashboard


async def test_the_view_follows_new_steps_unless_stepped_back(spec_events, tmp_path):
    from carl_tui.completions.files import StreamReader
    from carl_tui.training.completion_sample import completions_line

    stream = tmp_path / "c.jsonl"
    completions_stream(stream, [1, 2, 3])

    def log_step(step):
        logs = {"prompt": ["p"], "completion": [f"said at {step}"],
                "rewards": {"r": [1.0]}, "advantages": [0.0]}
        with open(stream, "a") as f:
            f.write(json.dumps(completions_line(logs, step, 1)) + "\n")

    app = stream_app(spec_events, StreamReader(stream))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.press("a")
        await wait_for(pilot, lambda: app.screen.step == 3)
        assert "following" in head(app)
        log_step(4)
        await wait_for(pilot, lambda: app.screen.step == 4)
        assert cells(app)[0][2] == "said at 4" and "(4 of 4)" in head(app)
        await pilot.press("left_square_bracket")
        await wait_for(pilot, lambda: app.screen.step == 3)
        log_step(5)
        await wait_for(pilot, lambda: "(3 of 5)" in head(app))
        assert app.screen.step == 3 and "following" not in head(app)
        await pilot.press("end")
        await wait_for(pilot, lambda: app.screen.step == 5 and "following" in head(app))


@pytest.mark.slow
async def test_view_on_a_trackio_server(grpo_completions, tmp_path):
    import shutil

    from tests.fakes.trackio_server import TrackioServer

    shutil.copytree(grpo_completions / "trackio", tmp_path / "trackio")
    srv = TrackioServer(tmp_path / "trackio")
    await asyncio.to_thread(srv.start)
    try:
        req = request(trackio=srv.url, project="compl")
        rows = await view_on(app_for(req), "trackio", grpo_completions)
    finally:
        await asyncio.to_thread(srv.stop)
    assert prompts_and_completions(rows) == trl_saved(grpo_completions, 4)


async def test_no_secret_reaches_the_view(spec_events, tmp_path):
    from carl_tui.completions.files import StreamReader

    token = "hf_" + "QwErTyUiOpAsDfGhJkLzXcVbNm12"
    stream = tmp_path / "c.jsonl"
    row = {"prompt": f"key {token}", "completion": f"Authorization: Bearer {token}",
           "rewards": {"r": 1.0}, "advantage": 0.0}
    stream.write_text(json.dumps({"event": "completions", "step": 1, "rows": [row]}) + "\n")
    app = stream_app(spec_events, StreamReader(stream))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.press("a")
        await wait_for(pilot, lambda: app.screen.step == 1)
        shown = " ".join(" ".join(r) for r in cells(app))
        shown += plain_text(app.screen.query_one("#compl-detail"), 200) + head(app)
        assert "[REDACTED]" in shown and token not in shown and token[:10] not in shown


async def test_a_poll_that_ran_beside_a_step_back_does_not_undo_it(spec_events, tmp_path):
    """`[` reads its step in a worker; a poll waiting behind that read (the log's lock),
    which reads the screen before the step is shown, must not put back the step the
    view was on."""
    import threading

    from carl_tui.completions.files import StreamReader

    stream = tmp_path / "c.jsonl"
    completions_stream(stream, [1, 2, 3])
    reading, release, shown = threading.Event(), threading.Event(), threading.Event()

    class Held(StreamReader):
        """While held: step 2 is read back once the test says so, and a scan ends only
        once that step is on its way to the screen."""

        held = False

        def load(self, locator):
            if self.held:
                reading.set()
                release.wait(10)
            return super().load(locator)

        def scan(self):
            if self.held:
                shown.wait(10)
            return super().scan()

    reader = Held(stream)
    app = stream_app(spec_events, reader)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.press("a")
        view = app.screen
        await wait_for(pilot, lambda: view.step == 3)
        to_screen, handed = app.call_from_thread, []
        both_handed = threading.Event()

        def spy(callback, *args, **kwargs):
            handed.append(callback)
            shown.set()
            if len(handed) >= 2:
                both_handed.set()
            return to_screen(callback, *args, **kwargs)

        app.call_from_thread = spy
        with view.shared.lock:
            view.shared.log._cache.clear()  # step 2 is read back from its file
            reader.held = True
        await pilot.press("left_square_bracket")
        await wait_for(pilot, reading.is_set, what="step 2 being read")
        before = set(app.workers)
        view._poll()  # a poll begins while the step back holds the log
        poll = next(w for w in app.workers if w not in before)
        await wait_for(pilot, lambda: poll.is_running, what="the poll's thread started")
        release.set()
        # The screen's loop is held here until step 2 and the poll's result are both
        # handed to it: the poll, behind the lock, read the view while it showed step 3.
        assert both_handed.wait(10)
        await wait_for(pilot, lambda: not any(w.is_running for w in app.workers),
                       what="the workers done")
        await pilot.pause()
        assert view.step == 2 and cells(app)[0][2] == "said at 2"
        assert "(2 of 3)" in head(app) and "following" not in head(app)


async def test_a_carl_reward_beside_the_carl_score_says_why_they_differ(tmp_path):
    """A GRPO run rewarded by CARL: its completions' `carl` reward (0.833) and CARL score
    (0.897) differ; the view says in one line what each is (there was no word why)."""
    from tests.store.test_run_age import screen_lines

    stream = tmp_path / "grpo.jsonl"
    rows = [{"prompt": f"p{i}", "completion": f"c{i}",
             "rewards": {"reverse_reward": 0.5, "carl": 0.833}, "advantage": 0.1,
             "carl": 0.897} for i in range(3)]
    stream.write_text(
        json.dumps({"event": "meta", "name": "grpo", "vocab_size": 20}) + "\n"
        + "".join(json.dumps({"step": s, "loss": 1.0 / s, "reward": 0.5}) + "\n"
                  for s in range(1, 6))
        + json.dumps({"event": "completions", "step": 5, "rows": rows}) + "\n")
    req = request(watch=str(stream), file_format="jsonl")
    async with app_for(req).run_test(size=SIZE) as pilot:
        app = pilot.app
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.press("a")
        await wait_for(pilot, lambda: getattr(app.screen, "step", None) == 5)
        await pilot.pause(0.2)
        drawn = " ".join(" ".join(line.split()) for line in screen_lines(app))
        assert ("carl: the reward the trainer gave at generation · CARL score: the CARL "
                "composite scored again when the step was logged") in drawn, drawn[:800]
