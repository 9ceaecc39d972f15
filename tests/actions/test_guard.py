"""Guards: the policy's decision (a pure function), the audit log, the flag and the
config table, and a guard stopping a followed Hugging Face job (the loopback fake of
the Jobs API) whose loss turns NaN, with no key pressed; never under --read-only, never
twice."""

from __future__ import annotations

import functools
import json
import math
import time

import pytest

from carl_tui.actions.guard import (
    GuardMode,
    acted_before,
    decide,
    guard_log_path,
    parse_guard,
    policy_of,
    write_audit,
)
from carl_tui.cli_parser import build_parser
from carl_tui.events import ScalarBatch
from carl_tui.store.health import Evidence, HealthFlag

TRUNC = HealthFlag("truncation", 40, 44, "warning",
                   Evidence("completions/clipped_ratio", 0.9, 0.1, 0.5, 5,
                            "90% of completions clipped at the length cap (>= 50%)"))
NAN = HealthFlag("nan_loss", 7, 7, "error",
                 Evidence("loss", math.nan, math.nan, math.nan, 0, "loss is NaN at step 7"))


# -- the decision -------------------------------------------------------------------


def test_the_policy_decides_per_flag_and_leaves_unnamed_flags_alone():
    acts = decide("hf-job:alice:j1", [TRUNC, NAN], {"nan_loss": "stop"}, GuardMode())
    assert [(a.flag.flag, a.action, a.why_not) for a in acts] == [("nan_loss", "stop", "")]
    acts = decide("r", [TRUNC, NAN], {"truncation": "ask", "nan_loss": "stop+push"},
                  GuardMode())
    assert [(a.flag.flag, a.action) for a in acts] == [("truncation", "ask"),
                                                       ("nan_loss", "stop+push")]


@pytest.mark.parametrize("mode,why", [(GuardMode(read_only=True), "read-only"),
                                      (GuardMode(replay=True), "a replay")])
def test_read_only_and_replays_turn_every_act_into_a_notice_saying_why(mode, why):
    policy = {"truncation": "ask", "nan_loss": "stop", "kl_drift": "stop+push"}
    acts = decide("r", [TRUNC, NAN], policy, mode)
    assert [(a.action, a.why_not) for a in acts] == [("notify", why), ("notify", why)]
    assert not mode.may_act and GuardMode().may_act


def test_a_flag_acted_on_before_is_not_acted_on_again():
    policy = {"nan_loss": "stop"}
    assert decide("r", [NAN], policy, GuardMode(), done={("r", "nan_loss")}) == []
    assert len(decide("other", [NAN], policy, GuardMode(), done={("r", "nan_loss")})) == 1
    # said twice in one batch: one act
    assert len(decide("r", [NAN, NAN], policy, GuardMode())) == 1


def test_guard_flags_and_the_config_table_are_checked():
    assert parse_guard("nan_loss=stop") == ("nan_loss", "stop")
    assert parse_guard(" truncation = STOP+push ") == ("truncation", "stop+push")
    for bad, words in [("nan_loss", "FLAG=ACTION"), ("nope=stop", "unknown guard flag"),
                       ("truncation=kill", r"one of notify, ask, stop, stop\+push")]:
        with pytest.raises(ValueError, match=words):
            parse_guard(bad)
    assert policy_of({"diverging": "ask", "stalled": "notify"}) == (
        {"diverging": "ask", "stalled": "notify"}, "")
    policy, problem = policy_of({"diverging": "ask", "truncation": 3})
    assert policy == {} and "truncation" in problem  # half a policy is none
    assert policy_of(["x"])[0] == {}
    args = build_parser().parse_args(["--guard", "nan_loss=stop", "--guard",
                                      "truncation=ask"])
    assert dict(args.guard) == {"nan_loss": "stop", "truncation": "ask"}
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--guard", "loss=stop"])


def test_the_audit_log_is_json_lines_under_xdg_state_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert guard_log_path() == tmp_path / "carl-tui" / "guard.log"
    act = decide("hf-job:alice:j1", [TRUNC], {"truncation": "stop"}, GuardMode())[0]
    write_audit(act, "j1", "job j1 cancelled: CANCELED", now=0.0)
    lines = [json.loads(t) for t in guard_log_path().read_text().splitlines()]
    assert lines == [{
        "time": "1970-01-01T00:00:00Z", "run": "hf-job:alice:j1", "run_name": "j1",
        "flag": "truncation", "from_step": 40, "seen_at": 44, "action": "stop",
        "result": "job j1 cancelled: CANCELED",
        "evidence": {"metric": "completions/clipped_ratio", "level": 0.9, "trend": 0.1,
                     "threshold": 0.5, "window": 5,
                     "text": "90% of completions clipped at the length cap (>= 50%)"}}]
    assert acted_before() == {("hf-job:alice:j1", "truncation")}
    monkeypatch.delenv("XDG_STATE_HOME")
    assert str(guard_log_path()).endswith(".local/state/carl-tui/guard.log")


# -- a guard on the dashboard, against the loopback fake of the Jobs API -------------

pytest.importorskip("huggingface_hub")

from tests.conftest import notices_said
from tests.conftest import wait_for as pilot_wait
from tests.ui import test_ui_actions as ui  # the Hub's loopback fakes, as the keys' tests

hub = ui.hub
SIZE, job_bar, make_app, job_source_of = ui.SIZE, ui.job_bar, ui.make_app, ui.job_source

# A Trainer's dicts are held back until the log has been idle 2 s (a progress bar may
# still finish the step): each wait allows for that.
wait_for = functools.partial(pilot_wait, timeout=15.0)

CANCEL = r"^/api/jobs/alice/job-nan/cancel$"
HEALTHY = [f"{{'loss': {2.0 - 0.01 * i:.3f}, 'grad_norm': 0.5, 'learning_rate': 1e-05, "
           f"'epoch': {i / 100:.2f}}}" for i in range(1, 13)]
NAN_LINE = "{'loss': nan, 'grad_norm': nan, 'learning_rate': 1e-05, 'epoch': 0.13}"


def guard_lines() -> list[dict]:
    path = guard_log_path()
    return [json.loads(t) for t in path.read_text().splitlines()] if path.exists() else []


def last_step(app) -> int | None:
    snap = app.store.snapshot(app.current_run or "", 2, ())
    return snap.last_step if snap is not None else None


def events_of(app, kind: str) -> list:
    snap = app.store.snapshot(app.current_run or "", 2, ())
    return [e for e in (snap.events if snap is not None else ()) if e.kind == kind]


async def follow_nan_job(hub, **kw):
    """A RUNNING job whose loss turns NaN, followed by a dashboard with `kw`; yields the
    app (inside run_test), the server and the jobs' state."""
    srv, _, jobs = hub
    jobs.add_job("job-nan", flavor="a10g-small", stage="RUNNING")
    jobs.append_log("job-nan", *HEALTHY)
    return srv, jobs, make_app(srv, sources=[job_source_of(srv)("job-nan", "alice")], **kw)


async def test_a_stop_guard_cancels_a_job_whose_loss_turns_nan_with_no_key_pressed(hub):
    srv, jobs, app = await follow_nan_job(hub, guard={"nan_loss": "stop"})
    said = notices_said(app)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: "RUNNING" in job_bar(app), what="job shown")
        await wait_for(pilot, lambda: last_step(app) == 12, what="the healthy steps")
        assert srv.requests_to("POST", CANCEL) == []  # healthy so far: nothing done
        jobs.append_log("job-nan", NAN_LINE)
        await wait_for(pilot, lambda: "CANCELED" in job_bar(app), what="guard's cancel")
        assert len(srv.requests_to("POST", CANCEL)) == 1
        assert jobs.jobs["job-nan"].stage == "CANCELED"
        await wait_for(pilot, lambda: events_of(app, "guard"), what="guard event")
        [event] = events_of(app, "guard")
        assert event.step == 13 and "nan_loss" in event.text and "CANCELED" in event.text
        assert "loss is NaN or infinite at step 13" in event.text  # why
        assert any(t.startswith("Guard (stop) on nan_loss") for t in said)  # on screen
        [line] = guard_lines()
        assert (line["run"], line["flag"], line["action"], line["seen_at"]) == (
            app.current_run, "nan_loss", "stop", 13)
        assert line["result"] == "job job-nan stopped: CANCELED"
        assert line["evidence"]["text"] == "loss is NaN or infinite at step 13"
        # never twice: the run's loss is said NaN again after finite values (the job has
        # ended, so its source reads no more: its rows are given to the store as a source)
        run = app.store.snapshot(app.current_run, 2, ()).run
        app.follower.emit([ScalarBatch.from_rows(run, [(14, {"loss": 1.5})]),
                           ScalarBatch.from_rows(run, [(15, {"epoch": 0.15})],
                                                 nonfinite=[("loss", 15)])])
        await wait_for(pilot, lambda: len(events_of(app, "nan_loss")) == 2,
                       what="the second NaN said")
        await pilot.pause(0.5)
        assert len(srv.requests_to("POST", CANCEL)) == 1 and len(guard_lines()) == 1


async def test_under_read_only_a_guard_never_acts(hub):
    srv, jobs, app = await follow_nan_job(hub, guard={"nan_loss": "stop"}, read_only=True)
    said = notices_said(app)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: last_step(app) == 12, what="the healthy steps")
        jobs.append_log("job-nan", NAN_LINE)
        await wait_for(pilot, lambda: events_of(app, "nan_loss"), what="the NaN said")
        await pilot.pause(0.8)
        assert srv.requests_to("POST", CANCEL) == []
        assert jobs.jobs["job-nan"].stage == "RUNNING"
        assert guard_lines() == [] and events_of(app, "guard") == []
        assert any("(not acted on: read-only)" in t for t in said)


@pytest.mark.parametrize("when", ["before", "while"])
async def test_a_guard_does_not_act_again_on_what_the_audit_log_says_was_done(hub, when):
    """Another dashboard (a restart, another tab of serve) already stopped this run for this
    flag: before this one started, or while it runs."""
    srv, jobs, app = await follow_nan_job(hub, guard={"nan_loss": "stop"})
    run_key = "hf-job:alice:job-nan"
    act = decide(run_key, [NAN], {"nan_loss": "stop"}, GuardMode())[0]
    if when == "before":
        write_audit(act, "job-nan", "job job-nan cancelled: CANCELED")
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: last_step(app) == 12, what="the healthy steps")
        assert app.current_run == run_key
        if when == "while":
            write_audit(act, "job-nan", "job job-nan cancelled: CANCELED")
        jobs.append_log("job-nan", NAN_LINE)
        await wait_for(pilot, lambda: events_of(app, "nan_loss"), what="the NaN said")
        await pilot.pause(0.8)
        assert srv.requests_to("POST", CANCEL) == [] and len(guard_lines()) == 1


async def test_an_ask_guard_opens_the_confirmation_naming_the_flag_and_its_evidence(hub):
    from carl_tui.ui.screens.confirm import ConfirmScreen
    from tests.conftest import plain_text

    srv, jobs, app = await follow_nan_job(hub, guard={"nan_loss": "ask"})
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: last_step(app) == 12, what="the healthy steps")
        jobs.append_log("job-nan", NAN_LINE)
        def body() -> str:  # the dialog's words, once it is mounted and drawn
            return " ".join(plain_text(s, 120) for s in app.screen.query("Static"))

        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen) and body(),
                       what="asked")
        body = body()
        assert "nan_loss" in body and "loss is NaN or infinite at step 13" in body
        assert srv.requests_to("POST", CANCEL) == []
        await pilot.press("n")
        await wait_for(pilot, lambda: guard_lines(), what="the answer logged")
        assert guard_lines()[0]["result"] == "asked: the user kept it running"
        assert srv.requests_to("POST", CANCEL) == []


def test_the_config_file_s_guard_table_is_read_and_checked(tmp_path):
    from carl_tui.ui.guard import load_guard_policy

    path = tmp_path / "config.toml"
    assert load_guard_policy(path) == ({}, "")  # no file: no guard
    path.write_text('[alerts]\nbell = false\n\n[guard]\nnan_loss = "stop"\n'
                    'truncation = "Stop+Push"\n')
    assert load_guard_policy(path) == ({"nan_loss": "stop", "truncation": "stop+push"}, "")
    path.write_text('[guard]\nnan_loss = "stop"\ntruncation = "explode"\n')
    policy, problem = load_guard_policy(path)
    assert policy == {} and problem.startswith(f"{path}: [guard] guard action 'explode'")
    assert problem.endswith("; no guard")
    path.write_text("[guard\n")
    assert load_guard_policy(path)[0] == {} and "no guard" in load_guard_policy(path)[1]


async def test_a_guard_from_the_config_file_acts_and_the_flag_adds_to_it(hub, monkeypatch,
                                                                        tmp_path):
    """[guard] in the config file (here nan_loss = "ask"); --guard (settings.guard) over it."""
    from carl_tui.ui.screens.confirm import ConfirmScreen

    config = tmp_path / "config.toml"
    config.write_text('[guard]\nnan_loss = "ask"\n')
    monkeypatch.setenv("CARL_TUI_CONFIG", str(config))
    srv, jobs, app = await follow_nan_job(hub, guard={"truncation": "stop"})
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: last_step(app) == 12, what="the healthy steps")
        assert app._guard.policy == {"nan_loss": "ask", "truncation": "stop"}
        jobs.append_log("job-nan", NAN_LINE)
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="asked")
        await pilot.press("y")
        await wait_for(pilot, lambda: "CANCELED" in job_bar(app), what="cancelled")
        assert len(srv.requests_to("POST", CANCEL)) == 1
        [line] = guard_lines()
        assert (line["action"], line["result"]) == ("ask", "job job-nan stopped: CANCELED")


async def test_a_stop_and_push_guard_pushes_the_newest_checkpoint_before_the_cancel(hub,
                                                                                  tmp_path):
    _, repos, _ = hub
    out = ui.make_output(tmp_path / "out")
    srv, jobs, app = await follow_nan_job(hub, guard={"nan_loss": "stop+push"},
                                          output_dir=str(out), push_repo="alice/carl-ckpt")
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: last_step(app) == 12, what="the healthy steps")
        jobs.append_log("job-nan", NAN_LINE)
        await wait_for(pilot, lambda: "CANCELED" in job_bar(app), what="guard's cancel")
        await wait_for(pilot, lambda: guard_lines(), what="the act logged")
    repo = repos.repos["alice/carl-ckpt"]
    assert json.loads(repo.files["trainer_state.json"]) == {"global_step": 20}  # the newest
    paths = [r.path for r in srv.requests if r.method == "POST"]
    commit = next(i for i, p in enumerate(paths) if "/commit/" in p)
    assert commit < paths.index("/api/jobs/alice/job-nan/cancel")  # pushed, then stopped
    [line] = guard_lines()
    assert line["action"] == "stop+push"
    assert line["result"] == ("pushed checkpoint-20 to alice/carl-ckpt; "
                              "job job-nan stopped: CANCELED")


# the keys' tests' trainer, with a NaN loss after its five steps
NAN_TRAINER = ui.TRAINER.replace(
    "    f.flush()", "    f.write('{\"step\": 5, \"loss\": NaN}' + chr(10))\n    f.flush()", 1)


async def test_a_stop_guard_interrupts_a_local_run_whose_loss_turns_nan(hub, tmp_path):
    import sys

    from carl_tui.actions.local_job import LocalJob
    from carl_tui.identity import local_run
    from carl_tui.sources.open import open_file

    assert '"loss": NaN' in NAN_TRAINER
    stream = tmp_path / "run.jsonl"
    local = LocalJob.start([sys.executable, "-c", NAN_TRAINER, str(stream)], stream)
    run = local_run("nan-run", time.time(), local.pid)
    srv = hub[0]
    app = make_app(srv, sources=[open_file(stream, "jsonl", run=run)],
                   local_jobs=[(run, local)], guard={"nan_loss": "stop"})
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: guard_lines(), what="the guard's act")
            assert local.returncode == 130  # interrupted: the trainer saved and exited
            [line] = guard_lines()
            assert (line["run"], line["flag"], line["action"]) == (run.key, "nan_loss",
                                                                   "stop")
            assert line["result"] == f"job local-{local.pid} stopped: exit status 130"
            await wait_for(pilot, lambda: events_of(app, "guard"), what="guard event")
            assert srv.requests_to("POST", CANCEL) == []  # not a Hub job
    finally:
        local.stop(grace=1, term_grace=1)
