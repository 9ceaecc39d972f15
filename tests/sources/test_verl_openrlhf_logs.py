"""verl's and OpenRLHF's console logs, written by each framework's own logging code
(tests/data/framework_logs, see its PROVENANCE), read wherever a Trainer log is read: every
value at the step the framework states, under the names the panels and health flags read."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

from carl_tui.cli import main
from carl_tui.events import Progress, ScalarBatch
from carl_tui.metric_names import canonical, framework_name, is_metric_key
from carl_tui.sources.auto_file import AutoFileSource
from carl_tui.sources.file_format import SNIFF_BYTES, sniff_format
from carl_tui.sources.framework_lines import read_verl
from carl_tui.sources.open import open_file
from carl_tui.sources.trainer_file import TrainerLogSource
from carl_tui.sources.trainer_log import DAMAGED_LINE, TrainerLogParser
from carl_tui.sources.trainer_steps import MetricsLine

DATA = Path(__file__).parents[1] / "data" / "framework_logs"
LOGS = {name: DATA / f"{name}_console.log" for name in ("verl", "openrlhf")}


def text_of(path: Path) -> str:
    """A log's text as written: tqdm's carriage returns kept (read_text makes them newlines)."""
    return path.read_bytes().decode("utf-8")


def logged(name: str, part: str = "train") -> dict[int, dict[str, float]]:
    """What the generating run handed its logger, step by step (its side file)."""
    values = json.loads((DATA / f"{name}_values.json").read_text())[part]
    return {int(step): row for step, row in values.items()}


def expected(name: str, part: str = "train") -> dict[int, dict[str, float]]:
    """The logged values under the dashboard's names (the bookkeeping keys left out)."""
    out: dict[int, dict[str, float]] = {}
    for step, row in logged(name, part).items():
        names = {canonical(framework_name(name, k)): v for k, v in row.items()}
        out[step] = {k: v for k, v in names.items() if is_metric_key(k)}
    return out


def read_rows(src, limit: float = 30.0) -> tuple[dict[int, dict[str, float]], list]:
    """Every row a source gives until it has caught up: {step: {metric: value}}."""
    rows: dict[int, dict[str, float]] = {}
    events: list = []
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        batch = src.poll()
        events += batch
        for e in batch:
            if isinstance(e, ScalarBatch):
                for i, step in enumerate(e.steps):
                    row = rows.setdefault(int(step), {})
                    for k, col in e.columns.items():
                        if not math.isnan(col[i]):
                            row[k] = float(col[i])
        if src.interval != 0 and not batch:
            return rows, events
    raise AssertionError("the source never caught up")


def parse_text(text: str) -> tuple[list[MetricsLine], TrainerLogParser]:
    parser = TrainerLogParser()
    items = []
    for line in text.splitlines(keepends=True):
        items += parser.feed(line)
    items += parser.flush()
    return [i for i in items if isinstance(i, MetricsLine)], parser


def cli(argv, capsys) -> tuple[int, str, str]:
    try:
        rc = main(argv)
    except SystemExit as exc:
        rc = exc.code
    out = capsys.readouterr()
    return rc, out.out, out.err


# -- the logs themselves -----------------------------------------------------------------


def test_the_logs_hold_what_the_frameworks_print():
    verl = text_of(LOGS["verl"])
    assert verl.startswith("step:0 - val-core/openai/gsm8k/reward/mean@1:0.124\n")
    assert "\rTraining Progress:" in verl and "actor/entropy:np.float64(" in verl
    openrlhf = text_of(LOGS["openrlhf"])
    assert "] ✨ Global step 1: {'policy_loss': " in openrlhf
    assert "\rTrain epoch [1/1]:" in openrlhf and "act_loss=" in openrlhf
    assert ", global_step 10, eval_metrics: {'eval_gsm8k_pass4': " in openrlhf
    assert sorted(logged("verl")) == list(range(41))
    assert sorted(logged("openrlhf")) == list(range(1, 41))


@pytest.mark.parametrize("name", sorted(LOGS))
def test_every_value_at_the_step_the_framework_stated(name):
    src = open_file(LOGS[name], settled=True)  # summary, export
    assert isinstance(src, TrainerLogSource)
    rows, _ = read_rows(src)
    want = expected(name)
    if name == "openrlhf":
        for step, row in expected(name, "eval").items():
            want[step].update(row)
    assert sorted(rows) == sorted(want)
    for step, row in want.items():
        assert rows[step] == row, step  # exact: the printed repr reads back bit for bit
    assert src.unused_input.total == 0


def test_the_roles_the_panels_and_health_flags_read():
    verl, openrlhf = logged("verl"), logged("openrlhf")
    rows, events = read_rows(open_file(LOGS["verl"], settled=True))
    for step in (1, 17, 40):
        assert rows[step]["reward"] == verl[step]["critic/score/mean"]
        assert rows[step]["entropy"] == verl[step]["actor/entropy"]
        assert rows[step]["kl"] == verl[step]["actor/kl_loss"]
        assert rows[step]["completions/clipped_ratio"] == verl[step]["response_length/clip_ratio"]
        assert rows[step]["grad_norm"] == verl[step]["actor/grad_norm"]
        assert rows[step]["loss"] == verl[step]["actor/pg_loss"]
        assert rows[step]["learning_rate"] == verl[step]["actor/lr"]
        assert rows[step]["critic/rewards/mean"] == verl[step]["critic/rewards/mean"]
        assert "global_step" not in rows[step] and "training/global_step" not in rows[step]
    # verl's own bar counts the steps done, of its total
    progress = [e for e in events if isinstance(e, Progress)]
    assert (progress[-1].step, progress[-1].total) == (40, 40)
    rows, _ = read_rows(open_file(LOGS["openrlhf"], settled=True))
    for step in (1, 21, 40):
        assert rows[step]["reward"] == openrlhf[step]["reward"]
        assert rows[step]["entropy"] == openrlhf[step]["entropy_loss"]
        assert rows[step]["reward_std"] == openrlhf[step]["group_reward_std"]
        assert rows[step]["loss"] == openrlhf[step]["policy_loss"]
        assert rows[step]["grad_norm"] == openrlhf[step]["actor_grad_norm"]
        assert rows[step]["completions/clipped_ratio"] == openrlhf[step]["rollout/truncated_rate"]
    assert rows[20]["eval/gsm8k_pass1"] == logged("openrlhf", "eval")[20]["eval_gsm8k_pass1"]


# -- where a Trainer log is read -----------------------------------------------------------


@pytest.mark.parametrize("name", sorted(LOGS))
def test_watch_tells_the_format_by_itself(name):
    head = LOGS[name].read_bytes()[:SNIFF_BYTES]
    assert sniff_format(head) == "trainer-log"
    assert sniff_format(head[:200]) == "trainer-log"  # its first line or two
    live = AutoFileSource(LOGS[name])  # --watch FILE
    rows, _ = read_rows(live)
    assert isinstance(live.inner, TrainerLogSource)
    assert sorted(rows) == sorted(logged(name))


@pytest.mark.parametrize("name", sorted(LOGS))
def test_summary_gives_the_task_metric_phases_and_health(name, capsys):
    rc, out, err = cli(["summary", str(LOGS[name]), "--json"], capsys)
    assert rc == 0, err
    d = json.loads(out)
    truth = logged(name)
    reward_key, entropy_key = {"verl": ("critic/score/mean", "actor/entropy"),
                               "openrlhf": ("reward", "entropy_loss")}[name]
    train_steps = [s for s in sorted(truth) if reward_key in truth[s]]
    assert (d["first_step"], d["last_step"]) == (min(truth), 40)
    assert d["steps_estimated"] is False and d["skipped"] == 0
    reward = d["metrics"]["reward"]
    assert reward["last"] == truth[40][reward_key]
    assert reward["max"] == max(truth[s][reward_key] for s in train_steps)
    assert reward["count"] == len(train_steps)
    assert d["metrics"]["entropy"]["last"] == truth[40][entropy_key]
    # the phases are judged on the task reward, and the reward climbs out of its baseline
    assert {p["stage"] for p in d["phases"]} == {"reward"}
    assert d["phases"][-1]["phase"] in ("crystallisation", "converged")
    # the entropy flag reads the framework's entropy: it collapses in both runs
    (flag,) = [f for f in d["health"] if f["flag"] == "entropy_collapse"]
    assert flag["evidence"]["metric"] == "entropy"
    level = flag["evidence"]["level"]
    assert min(truth[s][entropy_key] for s in train_steps) <= level < truth[1][entropy_key]


def test_export_prints_the_values_at_their_steps(capsys):
    rc, out, err = cli(["export", str(LOGS["verl"]), "--metrics", "reward,entropy,kl"], capsys)
    assert rc == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    truth = logged("verl")
    assert [r["step"] for r in rows] == list(range(41))
    assert rows[0] == {"step": 0}  # the validation before training: none of the three
    for r in rows[1:]:
        assert (r["reward"], r["entropy"], r["kl"]) == (
            truth[r["step"]]["critic/score/mean"], truth[r["step"]]["actor/entropy"],
            truth[r["step"]]["actor/kl_loss"])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(LOGS))
def test_a_hugging_face_job_log_reads_the_same(name):
    """A job's log: the HF Jobs source (through huggingface_hub, against the loopback fake
    of the Jobs API) hands its lines to the same parser as a file; the Ray and Slurm job
    sources do too."""
    pytest.importorskip("huggingface_hub")
    from huggingface_hub import HfApi

    from carl_tui.sources.hf_jobs import HfJobSource
    from tests.fakes.hub_jobs import JobsState, install_jobs_routes
    from tests.fakes.server import FakeServer

    state = JobsState(user="alice", token="hf_dummy")
    srv = FakeServer()
    install_jobs_routes(srv, state)
    lines = text_of(LOGS[name]).split("\n")
    with srv:
        state.add_job("job1", flavor="a10g-small")
        state.set_stage("job1", "RUNNING")
        for line in lines:
            state.append_log("job1", line)
        state.set_stage("job1", "COMPLETED")
        src = HfJobSource("job1", namespace="alice", api=HfApi(endpoint=srv.url, token="hf_dummy"),
                          status_interval=0.05, interval=0.02)
        rows: dict[int, dict[str, float]] = {}
        deadline = time.monotonic() + 30
        while not src.finished and time.monotonic() < deadline:
            for e in src.poll():
                if isinstance(e, ScalarBatch):
                    for i, step in enumerate(e.steps):
                        rows.setdefault(int(step), {}).update(
                            {k: float(c[i]) for k, c in e.columns.items() if not math.isnan(c[i])})
            time.sleep(0.02)
    assert src.finished
    want = expected(name)
    assert sorted(rows) == sorted(want)
    assert all(rows[s]["entropy"] == want[s]["entropy"] for s in want if "entropy" in want[s])


# -- damaged input, Ray's prefix -----------------------------------------------------------


def test_damaged_lines_are_skipped_and_counted(tmp_path):
    lines = text_of(LOGS["verl"]).split("\n")
    cut = lines[5][: lines[5].index("actor/kl_loss:np.float64(") + 30]  # a line cut short
    lines[5] = cut
    lines[9] = lines[9].replace("actor/lr:1e-06", "actor/lr:one in a million")
    lines.insert(12, "step:x - loss:1.0")  # no step: not a verl line, plain text
    path = tmp_path / "verl.log"
    path.write_bytes("\n".join(lines).encode("utf-8"))
    src = open_file(path, settled=True)
    rows, _ = read_rows(src)
    assert sorted(rows) == [s for s in range(41) if s not in (5, 9)]
    assert rows[10]["entropy"] == logged("verl")[10]["actor/entropy"]
    assert src.unused_input.total == 2
    (reason,) = src.unused_input.reasons()
    assert (reason.reason, reason.count) == (DAMAGED_LINE, 2)
    assert reason.example.startswith("\rTraining Progress:") or "step:5 - " in reason.example

    text = text_of(LOGS["openrlhf"])
    first = text.index("Global step 7: {")
    end = text.index("\n", first)
    text = text[:end - 40] + text[end:]  # the dict cut short
    items, parser = parse_text(text)
    assert 7 not in [m.step for m in items] and len(items) == 39 + 4  # 4 evaluations
    assert parser.take_damaged()[0] == 1


@pytest.mark.parametrize("prefix", ["(TaskRunner pid=2954931, ip=10.0.0.3) ",
                                    "\x1b[36m(PPOTrainer pid=812)\x1b[0m "])
@pytest.mark.parametrize("name", sorted(LOGS))
def test_rays_actor_prefix_is_read_through(name, prefix):
    """verl's trainer runs in a Ray actor (TaskRunner), OpenRLHF's PPOTrainer too: Ray starts
    each line of theirs with the actor's name and pid (coloured on a terminal)."""
    text = text_of(LOGS[name])
    prefixed = "".join(f"{prefix}{line}" for line in text.splitlines(keepends=True))
    plain, _ = parse_text(text)
    items, parser = parse_text(prefixed)
    assert [(m.step, m.values) for m in items] == [(m.step, m.values) for m in plain]
    assert len(plain) >= 40 and parser.take_damaged() == (0, "")


def test_verl_values_as_pformat_writes_them():
    line = read_verl("step:3 - a:np.float64(0.25) - b:12 - c:np.int64(-4) - d:True - "
                     "e:nan - f:Fraction(1, 4) - g:Decimal('2.5') - h:np.float32(1e-05) - "
                     "val-core/x/reward/mean@1:0.5")
    assert line is not None and line.step == 3 and not line.unreadable
    assert line.values == {"a": 0.25, "b": 12.0, "c": -4.0, "f": 0.25, "g": 2.5,
                           "h": 1e-05, "val-core/x/reward/mean@1": 0.5, "e": line.values["e"]}
    assert math.isnan(line.values["e"])
    assert read_verl("step:3") == read_verl("step:3 ")  # a step with nothing numeric
    assert read_verl("step:3 - a:[1, 2]").unreadable == "a:[1, 2]"
    assert read_verl("steps:3 - a:1") is None and read_verl("step: 3 - a:1") is None


# -- the generating script, where the frameworks are installed ------------------------------


@pytest.mark.skipif(importlib.util.find_spec("verl") is None
                    or importlib.util.find_spec("openrlhf") is None,
                    reason="verl and openrlhf are not installed")
def test_the_script_writes_the_same_values_again(tmp_path):
    subprocess.run([sys.executable, str(DATA / "make_logs.py"), str(tmp_path)], check=True,
                   timeout=300)
    for name, log in LOGS.items():
        assert json.loads((tmp_path / f"{name}_values.json").read_text()) == json.loads(
            (DATA / f"{name}_values.json").read_text())
        new, _ = parse_text(text_of(tmp_path / f"{name}_console.log"))
        old, _ = parse_text(text_of(log))
        assert [(m.step, m.values) for m in new] == [(m.step, m.values) for m in old]
