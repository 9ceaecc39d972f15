"""Launch / cancel / inspect on HF Jobs through the real huggingface_hub client against a
loopback fake; the launch spec; the job entry point; local training processes."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

from carl_tui.actions.jobs import JobsClient
from carl_tui.actions.launch_spec import (
    JOB_IMAGE,
    JOB_OUTPUT_DIR,
    LaunchSpec,
    gpus_in_flavor,
    timeout_seconds,
)
from carl_tui.actions.local_job import LocalJob
from carl_tui.errors import CarlError
from carl_tui.events import Job
from tests.conftest import wait_until
from tests.fakes.hub_jobs import JobsState, install_jobs_routes
from tests.fakes.hub_repos import (
    TEST_TOKEN,
    HubState,
    install_job_launch_routes,
    install_repo_routes,
)

JOBS_POST = r"^/api/jobs/[^/]+$"


@pytest.fixture
def hub(server):
    pytest.importorskip("huggingface_hub")
    server.routes.clear()
    server.requests.clear()
    repos, jobs = HubState(), JobsState(token=TEST_TOKEN)
    install_repo_routes(server, repos)
    install_jobs_routes(server, jobs, whoami=False)
    install_job_launch_routes(server, jobs)
    return server, jobs


def client(srv, token=TEST_TOKEN, namespace="alice") -> JobsClient:
    return JobsClient(token=token, endpoint=srv.url, namespace=namespace)


def spec(**kw) -> LaunchSpec:
    base = {"output_repo": "alice/carl-out", "flavor": "a10g-small", "timeout": "90m"}
    base.update(kw)
    return LaunchSpec(**base)


# -- hardware -------------------------------------------------------------------


def test_hardware_lists_flavors_with_price_per_hour(hub):
    srv, _ = hub
    opts = client(srv).hardware()
    by_name = {o.name: o for o in opts}
    assert by_name["a10g-small"].price_per_hour_usd == pytest.approx(16667 * 60 / 1e6)
    assert by_name["a10g-largex4"].gpus == 4
    assert by_name["cpu-basic"].gpus == 0 and by_name["cpu-basic"].accelerator == ""
    assert by_name["a10g-small"].label() == (
        "a10g-small · Nvidia A10G - small · 1x A10G (24 GB) · $1.00/h"
    )
    prices = [o.price_per_hour_usd for o in opts]
    assert prices == sorted(prices)
    gpu = client(srv).hardware(gpu_only=True)
    assert "cpu-basic" not in {o.name for o in gpu} and len(gpu) == len(opts) - 2
    req = srv.requests_to("GET", r"^/api/jobs/hardware$")[-1]
    assert req.headers["authorization"] == f"Bearer {TEST_TOKEN}"


def test_hardware_with_rejected_token_is_a_plain_error(hub):
    srv, _ = hub
    with pytest.raises(CarlError) as ei:
        client(srv, token="hf_WrongWrongWrongWrong").hardware()
    assert ei.value.kind == "auth" and ei.value.status == 401
    assert "hf auth login" in str(ei.value) and "hf_Wrong" not in str(ei.value)


# -- launch ---------------------------------------------------------------------


def test_launch_sends_token_only_as_a_secret(hub):
    srv, jobs = hub
    s = spec(flavor="a10g-largex4", trackio_space="alice/trackio", max_steps=300,
             learning_rate=2e-6, num_generations=4)
    launched = client(srv).launch(s)

    (req,) = srv.requests_to("POST", JOBS_POST)
    assert req.path == "/api/jobs/alice"
    body = req.json()
    assert body["dockerImage"] == JOB_IMAGE
    assert body["flavor"] == "a10g-largex4"
    assert body["timeoutSeconds"] == 90 * 60
    assert body["secrets"] == {"HF_TOKEN": TEST_TOKEN}
    assert body["environment"] == {"PYTHONUNBUFFERED": "1", "TRACKIO_SPACE_ID": "alice/trackio",
                                   "TRACKIO_PROJECT": "carl-tui"}
    assert body["labels"] == {"app": "carl-tui", "method": "grpo", "carl": "on",
                              "name": "carl-grpo-qwen2-5-0-5b-instruct"}
    cmd = body["command"]
    sep = cmd.index("--")
    assert cmd[:sep] == ["uv", "run", "--python", "3.12", "--with", "carl-tui[train,hub,trackio]",
                         "--with", "accelerate", "python", "-m", "carl_tui.training.job_entry",
                         "--output-dir", JOB_OUTPUT_DIR, "--num-processes", "4",
                         "--push-to", "alice/carl-out"]
    assert cmd[sep + 1:] == s.train_options(output_dir=JOB_OUTPUT_DIR,
                                            stream_path=JOB_OUTPUT_DIR + "/stream.jsonl")
    assert ["--max-steps", "300"] == cmd[cmd.index("--max-steps"):cmd.index("--max-steps") + 2]
    assert "--report-to" in cmd and "--carl" in cmd and ["--num-generations", "4"] == \
        cmd[cmd.index("--num-generations"):cmd.index("--num-generations") + 2]
    # The token travels once, under secrets: not in env, command, labels, URL or headers but auth.
    raw = req.body.decode()
    assert raw.count(TEST_TOKEN) == 1
    assert TEST_TOKEN not in json.dumps([body["command"], body["environment"], body["labels"]])
    assert all(TEST_TOKEN not in r.path for r in srv.requests)
    assert all(TEST_TOKEN not in json.dumps(r.query) for r in srv.requests)

    assert launched.namespace == "alice" and launched.stage == "SCHEDULING"
    assert launched.flavor == "a10g-largex4"
    assert launched.url == f"{srv.url}/jobs/alice/{launched.job_id}"
    assert launched.run.key == f"hf-job:alice:{launched.job_id}"
    from carl_tui.sources.hf_jobs import HfJobSource

    follower = HfJobSource(launched.job_id, namespace="alice", api=object())  # what the UI follows
    assert follower.run == launched.run
    follower.close()
    # The launcher's result is the job's first state, as the store keeps it and the jobs
    # list shows it: its name, its command (free of the token), a creation time.
    assert isinstance(launched, Job) and launched.name == "carl-grpo-qwen2-5-0-5b-instruct"
    assert launched.command == tuple(cmd) and launched.created_at is not None
    assert launched.life == "queued" and launched.started_at is None
    # The jobs fake (inspect, logs, cancel) sees the new job.
    assert jobs.jobs[launched.job_id].flavor == "a10g-largex4"
    assert client(srv).inspect(launched.job_id).stage == "SCHEDULING"


def test_single_gpu_flavor_runs_without_accelerate(hub):
    srv, _ = hub
    client(srv).launch(spec(flavor="a10g-small", carl=False, method="sft"))
    body = srv.requests_to("POST", JOBS_POST)[-1].json()
    cmd = body["command"]
    assert "accelerate" not in cmd
    assert cmd[cmd.index("--num-processes") + 1] == "1"
    assert "--no-carl" in cmd and "--num-generations" not in cmd and "--report-to" not in cmd
    assert body["environment"] == {"PYTHONUNBUFFERED": "1"}
    assert body["labels"]["carl"] == "off" and body["labels"]["method"] == "sft"


def test_invalid_spec_sends_nothing(hub):
    srv, _ = hub
    bad = spec(output_repo="", flavor="cpu-basic", timeout="soon", learning_rate=0.0,
               num_generations=1)
    with pytest.raises(CarlError) as ei:
        client(srv).launch(bad)
    msg = str(ei.value)
    assert ei.value.kind == "invalid"
    for part in ("Output repo is empty", "has no GPU", "Timeout 'soon'", "Learning rate",
                 "at least 2 generations"):
        assert part in msg
    assert srv.requests_to("POST", JOBS_POST) == []


def test_flavor_not_offered_by_the_hub_is_refused(hub):
    srv, _ = hub
    c = client(srv)
    names = [o.name for o in c.hardware()]
    with pytest.raises(CarlError, match="not offered"):
        c.launch(spec(flavor="b200x9"), flavors=names)
    assert srv.requests_to("POST", JOBS_POST) == []


def test_launch_in_a_foreign_namespace_is_forbidden(hub):
    srv, _ = hub
    with pytest.raises(CarlError) as ei:
        client(srv).launch(spec(namespace="someone-else"))
    assert ei.value.kind == "forbidden" and ei.value.status == 403
    assert "someone-else" in str(ei.value)


def test_launch_without_any_token(hub, monkeypatch):
    srv, _ = hub
    import huggingface_hub

    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    with pytest.raises(CarlError) as ei:
        JobsClient(endpoint=srv.url, namespace="alice").launch(spec())
    assert ei.value.kind == "auth" and "HF_TOKEN" in str(ei.value)
    assert srv.requests_to("POST", JOBS_POST) == []


def test_namespace_comes_from_whoami_when_not_given(hub):
    srv, _ = hub
    launched = JobsClient(token=TEST_TOKEN, endpoint=srv.url).launch(spec())
    assert launched.namespace == "alice"
    assert len(srv.requests_to("GET", r"^/api/whoami-v2$")) == 1


def test_server_error_on_create_is_plain(hub):
    srv, jobs = hub
    jobs.fail_next("create", 503)
    with pytest.raises(CarlError) as ei:
        client(srv).launch(spec())
    assert ei.value.kind == "server" and "503" in str(ei.value)


# -- cancel / inspect -------------------------------------------------------------


def test_cancel_then_status_reads_canceled(hub):
    srv, jobs = hub
    c = client(srv)
    launched = c.launch(spec())
    jobs.set_stage(launched.job_id, "RUNNING")
    seen = []
    c.cancel(launched.job_id)
    assert len(srv.requests_to("POST", rf"^/api/jobs/alice/{launched.job_id}/cancel$")) == 1
    state = c.wait_for(launched.job_id, {"CANCELED"}, timeout=5, interval=0.05,
                       on_state=seen.append)
    assert state.stage == "CANCELED" and state.ended and state.life == "stopped"
    assert state.job_id == launched.job_id and state.run == launched.run
    assert [s.stage for s in seen][-1] == "CANCELED" and all(isinstance(s, Job) for s in seen)


def test_wait_for_gives_up_with_a_clear_message(hub):
    srv, jobs = hub
    c = client(srv)
    launched = c.launch(spec())
    jobs.set_stage(launched.job_id, "RUNNING")
    with pytest.raises(CarlError) as ei:
        c.wait_for(launched.job_id, {"CANCELED"}, timeout=0.2, interval=0.05)
    assert ei.value.kind == "timeout" and "still RUNNING" in str(ei.value)


def test_cancel_unknown_job(hub):
    srv, _ = hub
    with pytest.raises(CarlError) as ei:
        client(srv).cancel("does-not-exist")
    assert ei.value.kind == "not_found"


# -- the spec ---------------------------------------------------------------------


def test_train_args_are_the_training_command_line():
    s = LaunchSpec(model="m/x", dataset="d/y", method="grpo", max_steps=20, learning_rate=5e-6,
                   num_generations=6, carl=True, target="local", output_dir="runs/a")
    assert s.to_train_args(stream_path="runs/a/s.jsonl") == [
        "carl-tui", "train", "--model", "m/x", "--dataset", "d/y", "--method", "grpo",
        "--output", "runs/a", "--max-steps", "20", "--learning-rate", "5e-06",
        "--num-generations", "6", "--carl", "--stream", "runs/a/s.jsonl",
    ]
    assert s.validate() == []
    sft = s.with_(method="sft", carl=False, trackio_space="u/sp")
    args = sft.to_train_args()
    assert "--num-generations" not in args and "--no-carl" in args
    assert args[-2:] == ["--report-to", "trackio"]
    assert s.local_argv("s.jsonl", python="py")[:5] == ["py", "-m", "carl_tui", "train", "--model"]
    multi = s.with_(num_processes=2).local_argv("s.jsonl", python="py")
    assert multi[:8] == ["py", "-m", "accelerate.commands.launch", "--num_processes", "2",
                         "-m", "carl_tui", "train"]


def test_defaults_are_valid_once_an_output_repo_is_given():
    assert LaunchSpec(output_repo="alice/out").validate() == []
    assert LaunchSpec(target="local").validate() == []
    problems = LaunchSpec().validate()
    assert len(problems) == 1 and "Output repo is empty" in problems[0]
    local = LaunchSpec(output_repo="a/b", package_spec="./x")
    assert any("local path" in p for p in local.validate())
    assert any("user/name" in p for p in LaunchSpec(output_repo="no-slash").validate())
    assert any("method" in p.lower() for p in LaunchSpec(target="local", method="ppo").validate())


@pytest.mark.parametrize("flavor,gpus", [("a10g-small", 1), ("a10g-largex4", 4), ("l4x1", 1),
                                         ("h200x8", 8), ("cpu-basic", 0), ("cpu-xl", 0),
                                         ("l40sx4", 4), ("rtx-pro-6000x2", 2)])
def test_gpus_in_flavor(flavor, gpus):
    assert gpus_in_flavor(flavor) == gpus


@pytest.mark.parametrize("text,secs", [("90m", 5400), ("2h", 7200), ("300", 300), (300, 300),
                                       ("1.5h", 5400), ("1d", 86400), ("soon", None), ("", None),
                                       (-5, None)])
def test_timeout_seconds(text, secs):
    assert timeout_seconds(text) == secs


# -- the job entry point ------------------------------------------------------------


FAKE_TRAINER = """\
#!{python}
# Stands in for `python -m carl_tui train ...`: writes a model and a checkpoint.
import pathlib, sys
args = sys.argv[1:]
assert args[:3] == ["-m", "carl_tui", "train"], args
out = pathlib.Path(args[args.index("--output") + 1])
(out / "checkpoint-5").mkdir(parents=True, exist_ok=True)
(out / "checkpoint-5" / "optimizer.txt").write_text("state")
(out / "config.json").write_text('{{"model_type": "tiny"}}')
(out / "stream.jsonl").write_text('{{"step": 1, "loss": 1.0}}\\n')
print("trained", flush=True)
sys.exit({rc})
"""


def _fake_trainer(tmp_path: Path, rc: int = 0) -> str:
    p = tmp_path / "fake-python"
    p.write_text(FAKE_TRAINER.format(python=sys.executable, rc=rc))
    p.chmod(0o755)
    return str(p)


@pytest.fixture
def repos(server, monkeypatch):
    pytest.importorskip("huggingface_hub")
    import huggingface_hub.constants as hc

    server.routes.clear()
    server.requests.clear()
    state = HubState()
    install_repo_routes(server, state)
    monkeypatch.setattr(hc, "ENDPOINT", server.url)  # what HF_ENDPOINT sets at import
    monkeypatch.setenv("HF_TOKEN", TEST_TOKEN)
    return state


def test_job_entry_trains_then_pushes_the_final_model(tmp_path, repos):
    from carl_tui.training import job_entry

    out = tmp_path / "out"
    rc = job_entry.main(["--output-dir", str(out), "--push-to", "alice/final", "--num-processes",
                         "1", "--", "--model", "m", "--output", str(out)],
                        python=_fake_trainer(tmp_path))
    assert rc == 0
    repo = repos.repos["alice/final"]
    assert repo.private is True
    assert sorted(repo.files) == ["config.json", "stream.jsonl"]  # checkpoints stay behind
    assert repo.files["config.json"] == b'{"model_type": "tiny"}'


def test_job_entry_pushes_nothing_when_training_fails(tmp_path, repos, server):
    from carl_tui.training import job_entry

    rc = job_entry.main(["--output-dir", str(tmp_path / "o"), "--push-to", "alice/final", "--",
                         "--output", str(tmp_path / "o")], python=_fake_trainer(tmp_path, rc=4))
    assert rc == 4
    assert repos.repos == {} and server.requests == []


def test_job_entry_command_for_several_gpus():
    from carl_tui.training.job_entry import train_command

    assert train_command(["--model", "m"], 4, python="py") == [
        "py", "-m", "accelerate.commands.launch", "--num_processes", "4", "-m", "carl_tui", "train",
        "--model", "m"]
    assert train_command(["--model", "m"], 1, python="py") == ["py", "-m", "carl_tui", "train",
                                                                "--model", "m"]


# -- local training process -------------------------------------------------------

CHILD = textwrap.dedent("""
    import json, signal, sys, time, os
    path = sys.argv[1]
    mode = sys.argv[2]
    stop = False
    def on_int(signum, frame):
        global stop
        stop = True
    if mode == "graceful":
        signal.signal(signal.SIGINT, on_int)
    elif mode == "stubborn":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if mode == "forks":
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            with open(path + ".grandchild", "w") as f:
                f.write(str(os.getpid()))
            while True:
                time.sleep(0.05)
    step = 0
    with open(path, "a") as f:
        while not stop and step < int(sys.argv[3]):
            f.write(json.dumps({"step": step, "loss": 1.0 / (step + 1)}) + "\\n")
            f.flush()
            step += 1
            time.sleep(0.02)
        if stop:
            f.write(json.dumps({"event": "interrupted", "step": step}) + "\\n")
    print("finished at", step, flush=True)
    sys.exit(int(sys.argv[4]) if len(sys.argv) > 4 else 0)
""")


def _wait_for_lines(path: Path, n: int = 2, timeout: float = 5.0) -> None:
    wait_until(lambda: path.exists() and len(path.read_text().splitlines()) >= n,
               f"{path} having {n} lines", timeout)


def _child(stream: Path, mode: str, steps: int = 100000, rc: int = 0) -> list[str]:
    return [sys.executable, "-c", CHILD, str(stream), mode, str(steps), str(rc)]


def test_local_job_stops_gracefully_on_sigint(tmp_path):
    stream = tmp_path / "run" / "stream.jsonl"
    job = LocalJob.start(_child(stream, "graceful"), stream)
    try:
        _wait_for_lines(stream)
        assert job.poll() == "running"
        assert os.getpgid(job.pid) == job.pid  # its own process group
        t0 = time.monotonic()
        assert job.stop(grace=5, term_grace=5) == "canceled"
        assert time.monotonic() - t0 < 3  # SIGINT was enough
        assert job.returncode == 0
        last = json.loads(stream.read_text().splitlines()[-1])
        assert last["event"] == "interrupted"
        assert "finished at" in job.log_path.read_text()
        assert job.log_path == stream.with_suffix(".log")
    finally:
        job.stop(grace=0.1, term_grace=0.1)


def test_local_job_escalates_to_sigkill(tmp_path):
    stream = tmp_path / "s.jsonl"
    job = LocalJob.start(_child(stream, "stubborn"), stream)
    _wait_for_lines(stream)
    t0 = time.monotonic()
    assert job.stop(grace=0.3, term_grace=0.3) == "canceled"
    assert 0.5 < time.monotonic() - t0 < 5
    assert job.returncode == -signal.SIGKILL


def test_local_job_stop_reaches_the_whole_process_group(tmp_path):
    stream = tmp_path / "s.jsonl"
    job = LocalJob.start(_child(stream, "forks"), stream)
    _wait_for_lines(stream)
    marker = Path(str(stream) + ".grandchild")
    deadline = time.monotonic() + 5
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    grandchild = int(marker.read_text())
    job.stop(grace=0.3, term_grace=0.3)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(grandchild):
        time.sleep(0.02)
    assert not _alive(grandchild), "the grandchild survived the stop"


def _alive(pid: int) -> bool:
    """Running (a killed process may linger as a zombie until its new parent reaps it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def test_local_job_completed_and_failed(tmp_path):
    ok = LocalJob.start(_child(tmp_path / "a.jsonl", "plain", steps=3), tmp_path / "a.jsonl")
    bad = LocalJob.start(_child(tmp_path / "b.jsonl", "plain", steps=2, rc=3), tmp_path / "b.jsonl")
    assert ok.wait(10) == "completed" and ok.returncode == 0
    assert bad.wait(10) == "failed" and bad.returncode == 3
    assert len((tmp_path / "a.jsonl").read_text().splitlines()) == 3
    from carl_tui.events import RunRef

    run = RunRef("jsonl", "local", "b")
    ev = bad.status_event(run)
    assert ev.stage == "ERROR" and ev.message == "exit status 3" and ev.flavor == "local"
    assert ev.life == "failed" and ev.job_id == f"local-{bad.pid}" and ev.run == run
    assert ok.status_event(run).stage == "COMPLETED"
    assert ok.stop() == "completed"  # stopping a finished run changes nothing


def test_a_local_jobs_time_stops_when_it_ends(tmp_path):
    """The job bar counts a job's time from its start to its end: a local run that ended
    has an end, so its duration and time running stay what they were."""
    from carl_tui.events import RunRef

    job = LocalJob.start(_child(tmp_path / "a.jsonl", "plain", steps=2), tmp_path / "a.jsonl")
    run = RunRef("jsonl", "local", "a")
    assert job.wait(10) == "completed"
    first = job.status_event(run)
    assert first.finished_at is not None and first.started_at <= first.finished_at
    assert first.finished_at <= time.time()
    again = job.status_event(run)
    assert again.finished_at == first.finished_at
    assert again.duration_s == first.duration_s == first.finished_at - job.started_at


def test_local_job_refuses_bad_input(tmp_path):
    with pytest.raises(CarlError, match="Max steps"):
        LocalJob.start(LaunchSpec(target="local", max_steps=0), tmp_path / "s.jsonl")
    with pytest.raises(CarlError, match="empty"):
        LocalJob.start([], tmp_path / "s.jsonl")
    with pytest.raises(CarlError, match="Cannot start"):
        LocalJob.start([str(tmp_path / "no-such-program")], tmp_path / "s.jsonl")


# -- tied to the dashboard, or not; the registry of local runs -----------------------

TIED_CHILD = textwrap.dedent("""
    import json, sys, time
    from carl_tui.actions.local_job import watch_parent
    path, mode, grace = sys.argv[1], sys.argv[2], float(sys.argv[3])
    stop = []
    on_gone = (lambda: stop.append("parent gone")) if mode == "cooperating" else (lambda: None)
    tied = watch_parent(on_gone, grace=grace)
    with open(path, "a") as f:
        f.write(json.dumps({"tied": tied}) + "\\n")
        f.flush()
        while not stop:
            time.sleep(0.02)
        f.write(json.dumps({"event": "stopped", "why": stop[0]}) + "\\n")
""")

PARENT = textwrap.dedent("""
    import json, sys, time
    from carl_tui.actions.local_job import LocalJob
    stream, tie, mode = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
    child = [sys.executable, "-c", sys.argv[4], stream, mode, "0.5"]
    job = LocalJob.start(child, stream, tie_to_parent=tie)
    print(json.dumps({"pid": job.pid, "outlives": job.outlives_dashboard}), flush=True)
    time.sleep(600)
""")


def _parent_with_child(tmp_path, tie: bool, mode: str = "cooperating"):
    import subprocess

    stream = tmp_path / "s.jsonl"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(stream), "1" if tie else "0",
                               mode, TIED_CHILD], stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[1].parent)
    info = json.loads(parent.stdout.readline())
    _wait_for_lines(stream, 1, timeout=30)
    return parent, info, stream


def _wait_gone(pid: int, timeout: float = 30.0) -> bool:
    wait_until(lambda: not _alive(pid), f"process {pid} gone", timeout)
    return True


def test_tied_run_stops_cleanly_when_its_parent_is_killed(tmp_path):
    parent, info, stream = _parent_with_child(tmp_path, tie=True)
    try:
        assert info["outlives"] is False
        assert json.loads(stream.read_text().splitlines()[0]) == {"tied": True}
        parent.kill()  # SIGKILL: no handler, no cleanup in the parent
        parent.wait()
        assert _wait_gone(info["pid"]), "the tied run outlived its parent"
        last = json.loads(stream.read_text().splitlines()[-1])
        assert last == {"event": "stopped", "why": "parent gone"}  # on_gone, not the grace exit
    finally:
        if _alive(info["pid"]):
            os.killpg(info["pid"], signal.SIGKILL)


def test_tied_run_that_ignores_the_stop_is_ended_after_the_grace(tmp_path):
    parent, info, stream = _parent_with_child(tmp_path, tie=True, mode="ignoring")
    try:
        parent.kill()
        parent.wait()
        assert _wait_gone(info["pid"])
        assert "stopped" not in stream.read_text()  # ended by the grace timer, not by on_gone
    finally:
        if _alive(info["pid"]):
            os.killpg(info["pid"], signal.SIGKILL)


def test_untied_run_outlives_its_parent(tmp_path):
    parent, info, stream = _parent_with_child(tmp_path, tie=False)
    try:
        assert info["outlives"] is True
        assert json.loads(stream.read_text().splitlines()[0]) == {"tied": False}
        parent.kill()
        parent.wait()
        time.sleep(1.0)  # longer than the tied child's grace
        assert _alive(info["pid"])
    finally:
        if _alive(info["pid"]):
            os.killpg(info["pid"], signal.SIGKILL)
    assert _wait_gone(info["pid"])


def test_watch_parent_outside_a_tied_run_does_nothing(monkeypatch):
    from carl_tui.actions.local_job import PARENT_FD_ENV, watch_parent

    monkeypatch.delenv(PARENT_FD_ENV, raising=False)
    assert watch_parent(lambda: None) is False


def test_a_tie_is_never_passed_on(tmp_path, monkeypatch):
    """A tied process's own runs do not inherit its tie (they get their own, or none)."""
    from carl_tui.actions.local_job import PARENT_FD_ENV, PARENT_PID_ENV

    monkeypatch.setenv(PARENT_FD_ENV, "97")
    monkeypatch.setenv(PARENT_PID_ENV, "1")
    stream = tmp_path / "env.jsonl"
    code = ("import json, os, sys; open(sys.argv[1], 'w').write(json.dumps("
            "{k: v for k, v in os.environ.items() if k.startswith('CARL_TUI_PARENT')}) + '\\n')")
    job = LocalJob.start([sys.executable, "-c", code, str(stream)], stream)
    assert job.wait(30) == "completed"
    assert json.loads(stream.read_text()) == {}
    assert job.outlives_dashboard is True


@pytest.fixture
def registry(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    from carl_tui.actions.local_job import registry_path

    path = registry_path()
    assert path == tmp_path / "cache" / "carl-tui" / "local-runs.jsonl"
    return path


def test_registry_round_trip(tmp_path, registry):
    import subprocess

    from carl_tui.actions.local_job import list_local_runs, record_local_run

    assert list_local_runs() == []  # no registry yet
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    first = record_local_run(pid=done.pid, stream_path=tmp_path / "a.jsonl",
                             log_path=tmp_path / "a.log", argv=["python", "-c", "pass"],
                             name="finished run", started_at=1_795_000_000.25)
    live = LocalJob.start(_child(tmp_path / "b.jsonl", "graceful"), tmp_path / "b.jsonl")
    try:
        second = live.record("grpo on tiny")
        runs = list_local_runs()
        assert [r.name for r in runs] == ["grpo on tiny", "finished run"]  # newest first
        newest, oldest = runs
        assert newest.alive and not oldest.alive
        assert newest.pid == live.pid and newest.argv == tuple(live.argv)
        assert newest.stream_path == (tmp_path / "b.jsonl").resolve()
        assert newest.log_path == live.log_path.resolve() and newest.outlives_dashboard
        assert newest.process_start is not None
        assert abs(newest.started_at - live.started_at) < 1e-6
        assert oldest.started_at == first.started_at == 1_795_000_000.25
        assert (oldest.pid, oldest.argv) == (done.pid, ("python", "-c", "pass"))
        assert second.alive is False  # as recorded; `alive` is read when listed
        # a reused pid: same pid, another start time -> not this run
        line = json.loads(registry.read_text().splitlines()[-1])
        line.update(process_start=line["process_start"] - 3600, name="older process, same pid")
        with registry.open("a") as f:
            f.write(json.dumps(line) + "\n")
        reused = list_local_runs()[0]
        assert reused.name == "older process, same pid" and reused.alive is False
    finally:
        live.stop(grace=5, term_grace=1)
    assert not list_local_runs()[1].alive  # stopped now


def test_registry_skips_bad_lines_and_other_hosts(tmp_path, registry):
    from carl_tui.actions.local_job import list_local_runs, record_local_run

    record_local_run(pid=os.getpid(), stream_path="s.jsonl", log_path="s.log", argv=["x"],
                     name="this test", outlives_dashboard=False)
    other = json.loads(registry.read_text())
    other.update(host=other["host"] + "-elsewhere", name="another machine")
    with registry.open("a") as f:
        f.write("not json\n[1, 2]\n{\"pid\": \"seven\"}\n\n" + json.dumps(other) + "\n")
    runs = list_local_runs()
    assert [(r.name, r.alive, r.outlives_dashboard) for r in runs] == [("this test", True, False)]
    both = list_local_runs(all_hosts=True)
    assert [(r.name, r.alive) for r in both] == [("another machine", False), ("this test", True)]


def test_registry_is_cut_to_its_newest_entries(tmp_path, registry, monkeypatch):
    import carl_tui.actions.local_job as lj

    monkeypatch.setattr(lj, "REGISTRY_MAX_BYTES", 1500)
    monkeypatch.setattr(lj, "REGISTRY_KEEP", 3)
    for i in range(12):
        lj.record_local_run(pid=10**7 + i, stream_path=f"s{i}.jsonl", log_path=f"s{i}.log",
                            argv=["x"], name=f"run {i}")
    names = [r.name for r in lj.list_local_runs()]
    assert 3 <= len(names) < 12 and len(registry.read_text().splitlines()) == len(names)
    assert names == [f"run {i}" for i in range(11, 11 - len(names), -1)]  # the newest, in order


def test_registry_that_cannot_be_written_is_a_plain_error(tmp_path):
    from carl_tui.actions.local_job import list_local_runs, record_local_run

    blocker = tmp_path / "file"
    blocker.write_text("a file where a folder should be")
    with pytest.raises(CarlError, match="Cannot record the run"):
        record_local_run(pid=1, stream_path="s", log_path="l", argv=["x"], name="n",
                         path=blocker / "runs.jsonl")
    assert list_local_runs(path=blocker / "runs.jsonl") == []


# -- `carl-tui launch` ------------------------------------------------------------


def test_launch_command_line(hub, monkeypatch, capsys):
    import huggingface_hub.constants as hc

    from carl_tui.cli import main

    srv, jobs = hub
    monkeypatch.setattr(hc, "ENDPOINT", srv.url)
    monkeypatch.setenv("HF_TOKEN", TEST_TOKEN)
    rc = main(["launch", "--output-repo", "alice/cli-out", "--flavor", "a10g-large", "--max-steps",
               "50", "--no-carl", "--namespace", "alice"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    (req,) = srv.requests_to("POST", JOBS_POST)
    body = req.json()
    assert body["flavor"] == "a10g-large" and "--no-carl" in body["command"]
    assert body["secrets"] == {"HF_TOKEN": TEST_TOKEN}
    (job_id,) = jobs.jobs
    assert f"launched job {job_id} (a10g-large) in alice" in out.out
    assert f"carl-tui --job {job_id} --namespace alice" in out.out
    assert TEST_TOKEN not in out.out + out.err

    assert main(["launch", "--list-hardware", "--namespace", "alice"]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert listing[0].startswith("cpu-basic") and any("$5.00/h" in line for line in listing)


def test_launch_command_line_refuses_a_bad_spec(hub, capsys):
    from carl_tui.cli import main

    srv, _ = hub
    assert main(["launch", "--max-steps", "0"]) == 2
    err = capsys.readouterr().err
    assert "Output repo is empty" in err and "Max steps" in err
    assert srv.requests == []
    assert main(["launch", "--output-repo", "a/b", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "uv run --python 3.12 --with 'carl-tui[train,hub,trackio]'" in out and srv.requests == []
