"""The action keys driven with Pilot against loopback fakes of the Hub and of Claude:
launch (l), stop (s), push (p), diagnosis (d), jobs panel (j)."""

from __future__ import annotations

import functools
import json
import sys
import textwrap
import time

import pytest

pytest.importorskip("huggingface_hub")
from huggingface_hub import HfApi
from textual.widgets import DataTable, Input, Markdown, ProgressBar, Select

from carl_tui.actions.diagnosis import Diagnoser
from carl_tui.actions.launch_spec import LaunchSpec
from carl_tui.actions.local_job import LocalJob
from carl_tui.events import LogLines, RunMeta, RunRef, ScalarBatch
from carl_tui.identity import job_run
from carl_tui.sources.hf_jobs import HfJobSource
from carl_tui.ui.app import build_app
from carl_tui.ui.screens.confirm import ConfirmScreen
from carl_tui.ui.screens.diagnosis import DiagnosisScreen
from carl_tui.ui.screens.jobs import JobsScreen
from carl_tui.ui.screens.launch import LaunchScreen
from carl_tui.ui.screens.push import PushScreen
from carl_tui.ui.widgets.job_bar import JobBar
from tests.conftest import (
    ScriptedSource,
    dashboard_config,
    notices_said,
    plain_text,
    spec_trajectory,
)
from tests.conftest import wait_for as pilot_wait
from tests.fakes.anthropic_api import TEST_KEY, AnthropicState, Reply, install_messages_routes
from tests.fakes.hub_jobs import JobsState, install_jobs_routes
from tests.fakes.hub_repos import (
    TEST_TOKEN,
    HubState,
    install_job_launch_routes,
    install_repo_routes,
)

SIZE = (160, 45)
JOBS_POST = r"^/api/jobs/[^/]+$"
HF_SECRET = "hf_PlantedHubTokenShouldNeverLeave42"


@pytest.fixture
def hub(server, monkeypatch):
    import huggingface_hub.constants as hc

    server.routes.clear()
    server.requests.clear()
    repos, jobs = HubState(), JobsState(token=TEST_TOKEN)
    install_repo_routes(server, repos)
    install_jobs_routes(server, jobs, whoami=False)
    install_job_launch_routes(server, jobs)
    monkeypatch.setattr(hc, "ENDPOINT", server.url)
    monkeypatch.setenv("HF_TOKEN", TEST_TOKEN)
    return server, repos, jobs


def job_source(srv):
    def make(job_id: str, namespace: str) -> HfJobSource:
        api = HfApi(endpoint=srv.url, token=TEST_TOKEN)
        return HfJobSource(job_id, namespace=namespace, api=api, interval=0.05, status_interval=0.2)

    return make


def make_app(srv, sources=(), **kw):
    config = dashboard_config(
        list(sources) or [ScriptedSource()],
        refresh_interval=0.05,
        hub_endpoint=srv.url,
        job_source_factory=job_source(srv),
        **kw,
    )
    return build_app(config)


wait_for = functools.partial(pilot_wait, timeout=8.0)


def job_bar(app) -> str:
    return plain_text(app.query_one(JobBar), 160)


# -- l: launch --------------------------------------------------------------------


async def test_launch_checks_the_form_then_follows_the_new_job(hub):
    srv, _, jobs = hub
    app = make_app(srv)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        screen = app.screen
        assert isinstance(screen, LaunchScreen)
        await wait_for(pilot, lambda: screen._flavors, what="hardware loaded")
        # GPU flavors only, with their price per hour; the output repo is suggested
        assert "cpu-basic" not in screen._flavors
        assert screen._flavors["a10g-small"] == pytest.approx(16667 * 60 / 1e6)
        repo = screen.query_one("#output-repo", Input)
        assert repo.value == f"alice/{LaunchSpec().job_name()}"
        assert "$1.00 per hour; at most $2.00 within the 2h timeout" in plain_text(
            screen.query_one("#launch-note"))

        # A bad value is reported before anything is sent.
        await pilot.click("#steps")
        await pilot.press("end", *["backspace"] * 4, "0")
        await pilot.press("ctrl+l")
        assert "Max steps must be a whole number of at least 1" in plain_text(
            screen.query_one("#problems"))
        assert srv.requests_to("POST", JOBS_POST) == []

        await pilot.press("backspace", "4", "0")
        screen.query_one("#flavor", Select).value = "a10g-largex4"
        await pilot.pause()
        await pilot.press("ctrl+l")
        await wait_for(pilot, lambda: not isinstance(app.screen, LaunchScreen), what="launched")

        (req,) = srv.requests_to("POST", JOBS_POST)
        body = req.json()
        assert body["secrets"] == {"HF_TOKEN": TEST_TOKEN}
        assert TEST_TOKEN not in json.dumps({k: v for k, v in body.items() if k != "secrets"})
        assert TEST_TOKEN not in req.path and not req.query
        assert body["flavor"] == "a10g-largex4"
        command = body["command"]
        assert command[command.index("--max-steps") + 1] == "40"
        assert command[command.index("--num-processes") + 1] == "4"  # accelerate, one per GPU
        assert command[command.index("--push-to") + 1] == repo.value

        (job_id,) = jobs.jobs
        key = job_run("alice", job_id).key
        await wait_for(pilot, lambda: app.current_run == key, what="following the job")
        await wait_for(pilot, lambda: "SCHEDULING" in job_bar(app))
        assert job_id in job_bar(app) and "a10g-largex4" in job_bar(app)
        jobs.set_stage(job_id, "RUNNING")
        jobs.append_log(job_id, "{'loss': 0.5, 'reward': 0.25, 'epoch': 0.1}")
        await wait_for(pilot, lambda: "RUNNING" in job_bar(app), what="RUNNING shown")
        await wait_for(pilot, lambda: app.snapshot.series.get("reward") is not None)
        assert TEST_TOKEN not in job_bar(app)


async def test_launch_refusal_is_shown_in_the_form(hub):
    srv, _, jobs = hub
    jobs.fail_next("create", 402, body=b'{"error": "payment required"}')
    app = make_app(srv)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("l")
        screen = app.screen
        await wait_for(pilot, lambda: screen._flavors)
        await pilot.press("ctrl+l")
        await wait_for(pilot, lambda: "402" in plain_text(screen.query_one("#problems")))
        assert "payment required (402)" in plain_text(screen.query_one("#problems"))
        assert isinstance(app.screen, LaunchScreen) and not screen.busy
        assert jobs.jobs == {}
        await pilot.press("escape")
        assert not isinstance(app.screen, LaunchScreen)


# -- s: stop ------------------------------------------------------------------------


async def test_stop_asks_first_then_cancels_and_shows_canceled(hub):
    srv, _, jobs = hub
    jobs.add_job("job-stop", flavor="a10g-small", stage="RUNNING")
    source = job_source(srv)("job-stop", "alice")
    app = make_app(srv, sources=[source])
    said = notices_said(app)
    cancel = r"^/api/jobs/alice/job-stop/cancel$"
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "RUNNING" in job_bar(app), what="job shown")
        await pilot.press("s")
        assert isinstance(app.screen, ConfirmScreen)
        assert "job-stop" in plain_text(app.screen.query_one("Static"))
        await pilot.press("n")
        await pilot.pause(0.3)
        assert srv.requests_to("POST", cancel) == []
        assert jobs.jobs["job-stop"].stage == "RUNNING"

        await pilot.press("s", "y")
        await wait_for(pilot, lambda: "CANCELED" in job_bar(app), what="CANCELED shown")
        assert len(srv.requests_to("POST", cancel)) == 1
        assert jobs.jobs["job-stop"].stage == "CANCELED"
        assert any("job-stop: CANCELED" in t for t in said)
        assert "Hugging Face job job-stop has stopped: CANCELED" in said  # the stop, said
        # an ended job is not cancelled twice
        await pilot.press("s")
        assert not isinstance(app.screen, ConfirmScreen)
        assert len(srv.requests_to("POST", cancel)) == 1


TRAINER = textwrap.dedent("""
    import json, signal, sys, time
    path = sys.argv[1]
    with open(path, "a") as f:
        f.write(json.dumps({"event": "meta", "model": "tiny", "vocab_size": 20}) + "\\n")
        for step in range(5):
            f.write(json.dumps({"step": step, "loss": 1.0 / (step + 1)}) + "\\n")
        f.flush()
        try:
            while True:
                time.sleep(0.05)
        except KeyboardInterrupt:
            f.write(json.dumps({"event": "log", "text": "interrupted: saved"}) + "\\n")
            sys.exit(130)
""")


async def test_local_launch_is_followed_and_stopped(hub, tmp_path):
    srv, _, jobs = hub
    started: list[LocalJob] = []

    def start(spec, stream_path):
        assert spec.target == "local"
        job = LocalJob.start([sys.executable, "-c", TRAINER, str(stream_path)], stream_path)
        started.append(job)
        return job

    app = make_app(srv, local_starter=start)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("l")
            screen = app.screen
            screen.query_one("#target", Select).value = "local"
            await pilot.pause()
            assert screen.query_one("#flavor").has_class("-hidden")
            screen.query_one("#output-dir", Input).value = str(tmp_path / "out")
            await pilot.press("ctrl+l")
            watched = app.controller.engines.watched  # the process its engine answers for
            await wait_for(pilot, lambda: started and app.current_run in watched,
                           what="local run followed")
            await wait_for(pilot, lambda: app.snapshot.series.get("loss") is not None
                           and app.snapshot.series["loss"].count == 5)
            assert "RUNNING" in job_bar(app) and "local" in job_bar(app)
            assert app.snapshot.meta["output_dir"] == str((tmp_path / "out").resolve())
            await pilot.press("s")
            assert isinstance(app.screen, ConfirmScreen)
            await pilot.press("y")
            await wait_for(pilot, lambda: "CANCELED" in job_bar(app), what="local CANCELED")
            assert started[0].returncode == 130
            await wait_for(pilot, lambda: "interrupted: saved" in app.snapshot.log_tail)
            assert jobs.jobs == {} and srv.requests_to("POST", JOBS_POST) == []
    finally:
        for job in started:
            job.stop(grace=1, term_grace=1)


# -- p: push ------------------------------------------------------------------------


def slow_down(srv, path_part: str, seconds: float) -> None:
    """Make every request whose route pattern contains `path_part` wait `seconds` first."""
    for i, (method, rx, handler) in enumerate(srv.routes):
        if path_part in rx.pattern:
            def slow(req, handler=handler):
                time.sleep(seconds)
                return handler(req)

            srv.routes[i] = (method, rx, slow)


def make_output(root):
    for step in (10, 20):
        d = root / f"checkpoint-{step}"
        d.mkdir(parents=True)
        (d / "config.json").write_text('{"model_type": "llama"}')
        (d / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return root


async def test_push_shows_progress_and_the_commit_url(hub, tmp_path):
    srv, repos, _ = hub
    out = make_output(tmp_path / "out")
    app = make_app(srv, output_dir=str(out), push_repo="alice/carl-ckpt")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("p")
        screen = app.screen
        assert isinstance(screen, PushScreen)
        assert screen.folder == out / "checkpoint-20"  # newest first
        assert screen.query_one("#repo", Input).value == "alice/carl-ckpt"
        # cancelling the confirmation sends nothing
        await pilot.press("ctrl+u")
        assert isinstance(app.screen, ConfirmScreen)
        assert "checkpoint-20" in plain_text(app.screen.query_one("Static"))
        await pilot.press("n")
        assert srv.requests_to("POST", r"^/api/repos/create$") == []

        slow_down(srv, r"preupload", 0.4)  # each file's upload step takes a while
        seen: list[tuple[str, float]] = []
        bar = screen.query_one("#bar", ProgressBar)
        await pilot.press("ctrl+u", "y")
        for _ in range(160):
            await pilot.pause(0.05)
            seen.append((plain_text(screen.query_one("#push-status")).strip(), bar.progress))
            if screen.result is not None or not screen.busy:
                break
        assert screen.result is not None, plain_text(screen.query_one("#push-error"))
        midway = [(text, p) for text, p in seen if text.startswith("uploading 1/2 files")]
        assert midway and all(0 < p < 100 for _, p in midway), seen
        assert not bar.has_class("-hidden") and bar.progress == 100
        repo = repos.repos["alice/carl-ckpt"]
        assert repo.private and set(repo.files) == {"config.json", "trainer_state.json"}
        assert json.loads(repo.files["trainer_state.json"]) == {"global_step": 20}
        url = plain_text(screen.query_one("#push-result"), 200)
        assert f"alice/carl-ckpt/commit/{repo.commits[-1]}" in url
        await pilot.press("escape")
        assert not isinstance(app.screen, PushScreen)
        assert any(repo.commits[-1] in str(n.message) for n in app._notifications)


async def test_push_forbidden_is_plain_and_shows_no_url(hub, tmp_path):
    srv, repos, _ = hub
    out = make_output(tmp_path / "out")
    app = make_app(srv, output_dir=str(out))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("p")
        screen = app.screen
        assert screen.query_one("#repo", Input).value == ""
        await pilot.click("#repo")
        await pilot.press(*"bob/theirs", "enter")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await wait_for(pilot, lambda: not screen.busy
                       and plain_text(screen.query_one("#push-error")))
        error = plain_text(screen.query_one("#push-error"), 200)
        assert "permission denied on bob/theirs (403)" in error
        assert "Traceback" not in error and TEST_TOKEN not in error
        assert plain_text(screen.query_one("#push-result")).strip() == ""
        assert "did not complete" in plain_text(screen.query_one("#push-status"))
        assert screen.result is None and repos.repos == {}


async def test_push_without_an_output_dir_says_so(hub):
    srv, _, _ = hub
    app = make_app(srv)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("p")
        assert not isinstance(app.screen, PushScreen)
        assert any("No output directory is known" in str(n.message) for n in app._notifications)


# -- d: diagnosis -------------------------------------------------------------------


def diagnosis_source():
    run = RunRef("test", "proj", "run-1", "spec-run")
    src = ScriptedSource()
    src.push([
        RunMeta(run, {"model": "tiny-llama", "method": "grpo", "vocab_size": 20}),
        ScalarBatch.from_rows(run, spec_trajectory(), wall_time=1_700_000_000.0),
        LogLines(run, (f"login with {HF_SECRET}", f"ANTHROPIC_API_KEY={TEST_KEY}", "step 45 ok")),
    ])
    return src


ANSWER = ("**Verdict:** converged and healthy.\n\n- accuracy holds at 0.99\n"
          "- entropy fell from 9.3 to 0.12\n\nNext: stop here or lower the learning rate.")


async def test_diagnosis_streams_follows_up_saves_and_sends_no_secret(hub, monkeypatch, tmp_path):
    srv, _, _ = hub
    claude = AnthropicState(replies=[Reply(ANSWER, chunk=7), "Because the gate fired at step 27."])
    install_messages_routes(srv, claude)
    monkeypatch.setenv("ANTHROPIC_API_KEY", TEST_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", srv.url)
    monkeypatch.setenv("HF_TOKEN", HF_SECRET)
    monkeypatch.chdir(tmp_path)
    app = make_app(srv, sources=[diagnosis_source()],
                   diagnoser_factory=lambda: Diagnoser(max_retries=0))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None and app.snapshot.log_total == 3)
        await pilot.press("d")
        screen = app.screen
        assert isinstance(screen, DiagnosisScreen)
        await wait_for(pilot, lambda: screen.history, what="first answer")
        md = screen.query_one("#answer", Markdown)
        assert ANSWER in md.source and ANSWER in screen.transcript
        assert "converged and healthy" in md.source

        await pilot.click("#question")
        await pilot.press(*"Why?", "enter")
        await wait_for(pilot, lambda: len(screen.history) == 2, what="follow-up answer")
        assert "**You:** Why?" in md.source and "gate fired at step 27" in md.source
        first, second = claude.bodies
        assert len(first["messages"]) == 1 and first["stream"] is True
        assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
        assert second["messages"][1]["content"] == ANSWER
        assert second["messages"][2]["content"] == "Why?"
        for raw in claude.raw_bodies:
            text = raw.decode()
            for secret in (HF_SECRET, TEST_KEY, "hf_Planted", "sk-ant-api03"):
                assert secret not in text
            assert "[REDACTED]" in text and "step 45 ok" in text

        await pilot.press("ctrl+s")
        saved = screen.saved_to
        assert saved is not None and saved.parent == tmp_path and saved.suffix == ".md"
        content = saved.read_text()
        assert ANSWER in content and "gate fired at step 27" in content
        assert str(saved) in plain_text(screen.query_one("#diag-status"), 300)
        await pilot.press("escape")
        assert not isinstance(app.screen, DiagnosisScreen)


async def test_diagnosis_without_a_key_or_with_an_api_error(hub, monkeypatch):
    srv, _, _ = hub
    claude = AnthropicState(replies=[Reply(status=529)])
    install_messages_routes(srv, claude)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", srv.url)
    app = make_app(srv, sources=[diagnosis_source()],
                   diagnoser_factory=lambda: Diagnoser(max_retries=0))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.press("d")
        screen = app.screen
        await wait_for(pilot, lambda: not screen.busy, what="no-key answer")
        status = plain_text(screen.query_one("#diag-status"), 300)
        assert "Export ANTHROPIC_API_KEY, set to your key" in status
        assert "[REDACTED]" not in status  # the hint's own placeholder was redacted
        assert "ANTHROPIC_API_KEY" in screen.query_one("#answer", Markdown).source
        assert claude.bodies == []
        await pilot.press("escape")

        monkeypatch.setenv("ANTHROPIC_API_KEY", TEST_KEY)
        await pilot.press("d")
        screen = app.screen
        await wait_for(pilot, lambda: not screen.busy and len(claude.bodies) == 1)
        await wait_for(pilot, lambda: "overloaded" in plain_text(screen.query_one("#diag-status")))
        status = plain_text(screen.query_one("#diag-status"))
        assert "Claude is overloaded right now (529)" in status
        assert screen.history == []


# -- j: jobs panel ------------------------------------------------------------------


def add_two_jobs(jobs) -> None:
    """A running job of this app, 2 minutes old, and a completed one, 3 hours old."""
    now = time.time()
    jobs.add_job("job-new", flavor="a10g-small", stage="RUNNING", labels={"app": "carl-tui"},
                 created_at=now - 125)
    jobs.add_job("job-old", flavor="t4-small", stage="COMPLETED", created_at=now - 3 * 3600,
                 command=["python", "train.py", "--fast"])


async def test_jobs_panel_lists_jobs_and_enter_follows_one(hub):
    srv, _, jobs = hub
    add_two_jobs(jobs)
    app = make_app(srv)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("j")
        screen = app.screen
        assert isinstance(screen, JobsScreen)
        await wait_for(pilot, lambda: len(screen.rows) == 2, what="jobs listed")
        table = screen.query_one(DataTable)
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert rows == [
            ["RUNNING", "a10g-small", "2m", "job-new", "app=carl-tui"],
            ["COMPLETED", "t4-small", "3h", "job-old", "python train.py --fast"],
        ]
        assert "2 jobs in alice" in plain_text(screen.query_one("#jobs-status"))
        await pilot.press("down", "enter")
        assert not isinstance(app.screen, JobsScreen)
        key = job_run("alice", "job-old").key
        await wait_for(pilot, lambda: app.current_run == key, what="following job-old")
        await wait_for(pilot, lambda: "COMPLETED" in job_bar(app) and "t4-small" in job_bar(app))


async def test_jobs_panel_shows_a_rejected_token_plainly(hub, monkeypatch):
    srv, _, _ = hub
    monkeypatch.setenv("HF_TOKEN", "hf_WrongTokenForTheFake0000")
    app = make_app(srv)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("j")
        screen = app.screen
        await wait_for(pilot, lambda: "-error" in screen.query_one("#jobs-status").classes)
        text = plain_text(screen.query_one("#jobs-status"), 200)
        assert "Listing your jobs failed: the Hugging Face Hub rejected the token (401)" in text
        assert "hf_Wrong" not in text and screen.rows == {}


@pytest.fixture
def sleeper():
    """A live process standing for a training run started earlier on this machine."""
    import subprocess

    proc = subprocess.Popen(["sleep", "30"])
    yield proc
    proc.kill()
    proc.wait()


async def test_j_lists_this_machines_runs_after_a_restart_and_follows_one(hub, monkeypatch,
                                                                          tmp_path, sleeper):
    """A run started with `l` on this machine outlives the dashboard; a new dashboard finds
    it again in `j` (even when the Hub cannot be listed) and follows its stream."""
    import os

    from carl_tui.actions.local_job import record_local_run
    from carl_tui.identity import local_run

    srv, _, _ = hub
    monkeypatch.setenv("HF_TOKEN", "hf_WrongTokenForTheFake0000")
    stream = tmp_path / "stream.jsonl"
    stream.write_text("".join(f'{{"step": {s}, "loss": {1.5 - s / 40:.4f}}}\n'
                              for s in range(1, 21)))
    rec = record_local_run(pid=sleeper.pid, stream_path=stream, log_path=tmp_path / "l.log",
                           argv=["python", "-m", "carl_tui", "train"], name="grpo-local")
    record_local_run(pid=os.getpid() + 10**6, stream_path=tmp_path / "old.jsonl",
                            log_path=tmp_path / "o.log", argv=["x"], name="old-run")
    app = make_app(srv)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("j")
        screen = app.screen
        await wait_for(pilot, lambda: len(screen.rows) == 2, what="local runs listed")
        rows = {r.label.split(" · ")[0]: r for r in screen.rows.values()}
        assert rows["grpo-local"].stage == "RUNNING" and rows["old-run"].stage == "ENDED"
        assert "rejected the token" in plain_text(screen.query_one("#jobs-status"), 200)
        key = local_run(rec.name, rec.started_at, rec.pid).key
        table = screen.query_one(DataTable)
        table.move_cursor(row=table.get_row_index(key))
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.snapshot is not None
                       and app.snapshot.run.key == key and app.snapshot.last_step == 20,
                       what="the local run followed")
        assert app.snapshot.series["loss"].last == 1.0

        # A run whose stream has no line yet, chosen twice: its file is read once.
        runners = len(app.follower.runners)
        for _ in range(2):
            await pilot.press("j")
            screen = app.screen
            await wait_for(pilot, lambda s=screen: len(s.rows) == 2, what="listed again")
            table = screen.query_one(DataTable)
            old = next(k for k, r in screen.rows.items() if r.label.startswith("old-run"))
            table.move_cursor(row=table.get_row_index(old))
            await pilot.press("enter")
            await wait_for(pilot, lambda s=screen: app.screen is not s, what="the list closed")
        assert len(app.follower.runners) == runners + 1


# -- every action is a key, in the help and in the command palette ------------------------


async def test_action_keys_are_in_help_and_palette(hub):
    srv, _, _ = hub
    app = make_app(srv)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        ids = {row[3]: row for row in app.key_help()}
        for bid, key in (("actions.launch", "l"), ("actions.stop", "s"), ("actions.push", "p"),
                         ("actions.diagnose", "d"), ("actions.jobs", "j")):
            assert ids[bid][0] == key and ids[bid][2]
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert {"Launch", "Stop", "Push", "Diagnose", "Jobs"} <= titles


# -- read-only (--read-only, carl-tui serve): no key that acts --------------------------

ACTS = ("actions.launch", "actions.stop", "actions.push", "actions.diagnose", "actions.jobs",
        "view.save")


@pytest.mark.parametrize("read_only", [False, True])
async def test_read_only_hides_and_refuses_the_keys_that_act(hub, read_only):
    srv, _, jobs = hub
    jobs.add_job("job-ro", flavor="a10g-small", stage="RUNNING")
    app = make_app(srv, sources=[job_source(srv)("job-ro", "alice")], read_only=read_only)
    cancel = r"^/api/jobs/alice/job-ro/cancel$"
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "RUNNING" in job_bar(app), what="job shown")
        footer = [w.description for w in app.screen.query_one("KeyFooter").children
                  if getattr(w, "description", "")]
        ids = {row[3] for row in app.key_help()}
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert ("Stop" in footer and "Launch" in footer) is not read_only
        assert (set(ACTS) <= ids) is not read_only and bool(set(ACTS) & ids) is not read_only
        assert bool({"Launch", "Stop", "Push", "Diagnose", "Jobs", "Save"} & titles) \
            is not read_only
        assert {"Theme", "Runs", "Metrics"} <= titles  # the keys that only look stay
        await pilot.press("s")
        assert isinstance(app.screen, ConfirmScreen) is not read_only
        await pilot.press("y")
        if read_only:
            assert not await app.run_action("stop_job")  # nor from the palette's path
            await pilot.press("l", "d", "p", "j")
            await pilot.pause(0.3)
            assert app.screen is app.dashboard
            assert srv.requests_to("POST", cancel) == []
            assert jobs.jobs["job-ro"].stage == "RUNNING"
        else:
            await wait_for(pilot, lambda: "CANCELED" in job_bar(app), what="CANCELED shown")


# -- snapshots of the dialogs (pytest-textual-snapshot; see tests/ui/test_snapshots.py) ---


def opened(app, key: str, screen_type, ready):
    """`run_before`: press `key`, wait until its dialog is up and `ready(screen)` holds,
    with no notice over it (the run's notices are not what these pictures are of), then
    until the app is idle."""
    def no_toasts() -> bool:
        app.clear_notifications()
        return not app.screen.query("Toast")

    async def run_before(pilot):
        await wait_for(pilot, no_toasts, what="the notices gone")
        await pilot.press(key)
        await wait_for(pilot, lambda: isinstance(app.screen, screen_type), what="the dialog")
        await wait_for(pilot, lambda: ready(app.screen), what="the dialog's content")
        await wait_for(pilot, no_toasts, what="the notices gone")
        for field in app.screen.query(Input):
            field.cursor_blink = False  # the cursor drawn whatever the moment
        await pilot.wait_for_scheduled_animations()
        await pilot.pause()

    return run_before


def test_launch_dialog_snapshot(hub, snap_compare):
    srv, _, _ = hub
    app = make_app(srv)
    assert snap_compare(app, terminal_size=SIZE, run_before=opened(
        app, "l", LaunchScreen, lambda s: s._flavors))


def test_push_dialog_snapshot(hub, snap_compare, tmp_path, monkeypatch):
    srv, _, _ = hub
    monkeypatch.chdir(tmp_path)  # the folder is shown as given: the same in every run
    make_output(tmp_path / "out")
    app = make_app(srv, output_dir="out", push_repo="alice/carl-ckpt")
    assert snap_compare(app, terminal_size=SIZE, run_before=opened(
        app, "p", PushScreen, lambda s: s.folder is not None))


def test_diagnosis_dialog_snapshot(hub, snap_compare, monkeypatch, tmp_path):
    srv, _, _ = hub
    install_messages_routes(srv, AnthropicState(replies=[Reply(ANSWER, chunk=7)]))
    monkeypatch.setenv("ANTHROPIC_API_KEY", TEST_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", srv.url)
    monkeypatch.chdir(tmp_path)
    app = make_app(srv, sources=[diagnosis_source()], clock=lambda: 1_700_000_000.0,
                   diagnoser_factory=lambda: Diagnoser(max_retries=0))

    async def run_before(pilot):
        await wait_for(pilot, lambda: app.snapshot is not None and app.snapshot.log_total == 3)
        await opened(app, "d", DiagnosisScreen, lambda s: s.history and not s.busy
                     and app.focused is s.query_one("#question"))(pilot)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_jobs_dialog_snapshot(hub, snap_compare):
    srv, _, jobs = hub
    add_two_jobs(jobs)
    app = make_app(srv)
    def listed(s) -> bool:
        """Both rows, and the table's column widths taken from them (the table sizes its
        columns when it is next idle: a picture before that has header-wide columns), its
        header drawn at those widths (a header drawn before is kept until drawn again)."""
        table = s.query_one(DataTable)
        label = list(table.columns.values())[-1]
        wide = len("python train.py --fast")
        return (len(s.rows) == 2 and label.content_width >= wide
                and "label" + " " * (wide - len("label")) in table.render_line(0).text
                and "2 jobs in alice" in plain_text(s.query_one("#jobs-status")))

    assert snap_compare(app, terminal_size=SIZE, run_before=opened(app, "j", JobsScreen, listed))


async def test_a_repo_name_with_brackets_is_shown_as_typed_not_read_as_markup(hub, tmp_path):
    srv, _repos, _ = hub
    app = make_app(srv, output_dir=str(make_output(tmp_path / "out")),
                   push_repo="alice/carl-ckpt")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("p")
        screen = app.screen
        screen.query_one("#repo", Input).value = "x/[/oops]/[bold red]y[/]"
        await pilot.press("ctrl+u")
        await pilot.pause()
        assert app.screen is screen and app.return_code is None
        assert ("The target repo 'x/[/oops]/[bold red]y[/]' is not of the form user/name."
                in plain_text(screen.query_one("#push-error"), 200))


async def test_j_without_a_token_lists_the_demos_own_job(hub, monkeypatch, tmp_path, sleeper):
    """The demo's training (a process this dashboard watches, not in the registry) is
    listed by `j` when the Hub cannot be (no token): the list was empty; enter shows it."""
    from carl_tui.identity import demo_run

    srv, _, _ = hub
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
    stream = tmp_path / "demo.jsonl"
    stream.write_text("")
    job = LocalJob(sleeper, ["python", "-m", "carl_tui", "demo"], stream, tmp_path / "d.log")
    run = demo_run(0)
    app = make_app(srv, local_jobs=[(run, job)])
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("j")
        screen = app.screen
        await wait_for(pilot, lambda: len(screen.rows) == 1, what="the demo's job listed")
        (row,) = screen.rows.values()
        assert row.run.key == run.key and row.stage == "RUNNING" and row.flavor == "local"
        await pilot.pause(0.1)
        from tests.store.test_run_age import screen_lines

        assert any("RUNNING" in line and "local" in line for line in screen_lines(app))
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.screen is not screen, what="the list closed")
        assert app.current_run == run.key
