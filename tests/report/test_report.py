"""`carl-tui summary` and `carl-tui export` through the real CLI, on files the real writers
wrote: the numbers must be the run's own, step by step."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import random

import pytest

from carl_tui.cli import main
from carl_tui.coherence.gates import PhaseTransitionGate
from tests.conftest import spec_trajectory
from tests.data.make_trainer_stdout import true_steps


def cli(argv, capsys) -> tuple[int, str, str]:
    try:
        rc = main(argv)
    except SystemExit as exc:
        rc = exc.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def summary(argv, capsys) -> dict:
    rc, out, err = cli(["summary", *argv, "--json"], capsys)
    assert rc == 0, err
    return json.loads(out)


def export_rows(argv, capsys) -> list[dict]:
    rc, out, err = cli(["export", *argv], capsys)
    assert rc == 0, err
    return [json.loads(line) for line in out.splitlines()]


def printed(v: float) -> float:
    """A value as transformers prints it in a log dict (4 significant digits)."""
    return float(f"{v:.4g}")


def reference_gate(rows: list[tuple[int, float]]) -> int | None:
    gate = PhaseTransitionGate()
    for step, acc in rows:
        if gate.update(step, acc):
            return step
    return None


# -- real Trainer stdout -----------------------------------------------------------------


@pytest.mark.parametrize("name", ["sft_ls1", "sft_ls5", "sft_resume", "sft_save_eval",
                                  "grpo_ls1", "grpo_ls1_buffered", "sft_kill_resume"])
def test_summary_and_export_of_real_trainer_logs(trainer_logs, name, capsys):
    log = trainer_logs[name]
    truth = [e for e in true_steps(log) if "train_runtime" not in e["keys"]]
    train = [e for e in truth if not any(k.startswith("eval_") for k in e["keys"])]
    d = summary([str(log)], capsys)
    # every dict at its true step; no two training dicts share one
    assert d["steps_logged"] == len({e["step"] for e in truth})  # steps, not rows
    assert d["first_step"] == min(e["step"] for e in truth)
    assert d["last_step"] == max(e["step"] for e in truth)
    if name != "sft_kill_resume":  # (killed and resumed: steps after its checkpoint repeat)
        assert len({e["step"] for e in train}) == len(train)
    assert d["steps_estimated"] is False and d["skipped"] == 0
    for metric in ("loss", "grad_norm", "learning_rate"):
        values = [(e["step"], e["values"][metric]) for e in train if metric in e["values"]]
        m = d["metrics"][metric]
        assert m["last_step"] == values[-1][0] and m["count"] == len(values)
        assert m["last"] == pytest.approx(printed(values[-1][1]), rel=1e-3, abs=1e-12)
        assert m["min"] == pytest.approx(printed(min(v for _, v in values)), rel=1e-3, abs=1e-12)
        assert m["max"] == pytest.approx(printed(max(v for _, v in values)), rel=1e-3, abs=1e-12)
    # the gate fires where the run's own (printed) accuracy makes it fire
    acc = [(e["step"], printed(e["values"]["mean_token_accuracy"])) for e in train
           if "mean_token_accuracy" in e["values"]]
    assert d["gate"] == {"metric": "mean_token_accuracy", "fired_at": reference_gate(acc)}
    if name.startswith("grpo"):
        assert {p["stage"] for p in d["phases"]} == {"reward"}  # judged on the task reward
        assert d["cascade"] == {"switched_at": None, "source": None}  # no CARL in this run
    # the end-of-training dict: in the summary and the export, apart from the curves
    (end,) = [e for e in true_steps(log) if "train_runtime" in e["keys"]]
    kept = d["train_summary"]
    assert kept["step"] == end["step"] and "train_loss" not in d["metrics"]
    for key in ("train_loss", "train_runtime", "train_steps_per_second"):
        assert kept["values"][key] == pytest.approx(printed(end["values"][key]), rel=1e-3)
    rows = export_rows([str(log), "--metrics", "loss,learning_rate,train_loss"], capsys)
    assert [r["step"] for r in rows] == sorted({e["step"] for e in truth})
    assert [r["step"] for r in rows if "train_loss" in r] == [end["step"]]
    by_step = {r["step"]: r for r in rows}
    for e in train:
        if "loss" in e["values"]:
            assert by_step[e["step"]]["loss"] == pytest.approx(printed(e["values"]["loss"]),
                                                              rel=1e-3, abs=1e-12)


def test_a_log_without_progress_bars_says_its_steps_are_estimated(trainer_logs, capsys):
    d = summary([str(trainer_logs["sft_no_bars"])], capsys)
    assert d["steps_estimated"] is True
    # placed by the end line and the epochs: 10 dicts, every 4 steps, not steps 1..10
    assert (d["first_step"], d["last_step"], d["steps_logged"]) == (4, 40, 10)
    rc, out, _ = cli(["summary", str(trainer_logs["sft_no_bars"])], capsys)
    assert rc == 0 and "some steps estimated" in out


# -- a JSONL stream -------------------------------------------------------------------------


def write_stream(path, rows, meta=None):
    with open(path, "w") as f:
        if meta:
            f.write(json.dumps({"event": "meta", **meta}) + "\n")
        f.writelines(json.dumps({"step": step, **values}) + "\n" for step, values in rows)


def test_summary_of_a_stream_is_exact(tmp_path, capsys):
    rows = spec_trajectory(n=46, seed=4)
    path = tmp_path / "run.jsonl"
    write_stream(path, rows, {"name": "spec-run", "vocab_size": 151936})
    d = summary([str(path)], capsys)
    assert d["run"] == "spec-run" and d["steps_logged"] == 46
    assert (d["first_step"], d["last_step"]) == (0, 45)
    for metric in ("loss", "entropy", "mean_token_accuracy"):
        values = [v[metric] for _, v in rows]
        m = d["metrics"][metric]
        assert (m["last"], m["min"], m["max"]) == (values[-1], min(values), max(values))
    ent = [v["entropy"] for _, v in rows]
    phi = d["metrics"]["phi"]
    assert phi["derived"] is True
    assert phi["last"] == pytest.approx(1 - ent[-1] / math.log(151936), rel=1e-12)
    acc = [(s, v["mean_token_accuracy"]) for s, v in rows]
    fired = reference_gate(acc)
    assert fired is not None and d["gate"]["fired_at"] == fired
    assert next(p["phase"] for p in d["phases"]) == "baseline"
    assert any(e["kind"] == "phase_transition" and e["step"] == d["gate"]["fired_at"]
               for e in d["events"])


def test_export_merges_rows_of_one_step_and_derives_phi(tmp_path, capsys):
    rng = random.Random(3)
    path = tmp_path / "run.jsonl"
    lines = [{"step": s, "loss": 2.0 / (1 + s) + rng.random() * 1e-3, "entropy": 1.7 - s / 40}
             for s in range(20)]
    lines.insert(10, {"step": 7, "reward": 0.4321})  # a second row at step 7 adds a metric
    lines.append({"step": 19, "loss": 0.05})  # and a later value for step 19 wins
    with open(path, "w") as f:
        f.write(json.dumps({"event": "meta", "vocab_size": 64}) + "\n")
        f.writelines(json.dumps(x) + "\n" for x in lines)
    rows = export_rows([str(path)], capsys)
    assert [r["step"] for r in rows] == list(range(20))
    assert rows[7]["reward"] == 0.4321 and "reward" not in rows[6]
    assert rows[19]["loss"] == 0.05
    assert rows[3]["phi"] == pytest.approx(1 - lines[3]["entropy"] / math.log(64), rel=1e-12)
    rc, out, _ = cli(["export", str(path), "--format", "csv", "--metrics", "loss,reward"], capsys)
    table = list(csv.reader(io.StringIO(out)))
    assert table[0] == ["step", "loss", "reward"] and len(table) == 21
    assert table[8] == ["7", repr(lines[7]["loss"]), "0.4321"] and table[1][2] == ""
    out_file = tmp_path / "out.csv"
    rc, _, err = cli(["export", str(path), "--format", "csv", "-o", str(out_file)], capsys)
    assert rc == 0 and "wrote 20 steps" in err and out_file.read_text().startswith("step,")


@pytest.mark.parametrize("content,words", [
    (b"", "holds no run"),
    (b"Epoch 1: nothing here\nloading weights...\n", "run bad has no metrics"),
    (b"not json\n{broken\n", "has no metrics"),
    (b"{\"step\": \"nine\"}\n{broken\n", "holds no run"),
])
def test_bad_input_is_one_clear_line_and_a_nonzero_exit(tmp_path, capsys, content, words):
    path = tmp_path / "bad.log"
    path.write_bytes(content)
    rc, out, err = cli(["summary", str(path)], capsys)
    assert rc == 1 and out == "" and words in err and "Traceback" not in err


@pytest.mark.parametrize("flag", ["--tensorboard", "--wandb"])
def test_an_empty_local_folder_is_answered_without_waiting_out_the_timeout(
        tmp_path, capsys, flag):
    """Nothing can arrive in a folder by waiting: the answer comes once the source has
    been tried for a moment, not after --timeout (an hour here: the test would hit its
    own limit; it used to wait the whole timeout in silence)."""
    if flag == "--wandb":
        pytest.importorskip("wandb")  # without it: "needs wandb", at once
    rc, out, err = cli(["summary", flag, str(tmp_path), "--timeout", "3600"], capsys)
    assert rc == 1 and out == ""
    assert err.count("\n") == 1 and "holds no run yet" in err and str(tmp_path) in err


def test_a_remote_source_says_what_it_waits_for(capsys):
    """A refused server may come up: summary waits --timeout for it, and says so on
    stderr first, then gives its one-line answer."""
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    rc, out, err = cli(["summary", "--trackio", url, "--project", "p", "--timeout", "1"],
                       capsys)
    lines = err.splitlines()
    assert rc == 1 and out == "" and len(lines) == 2, err
    assert lines[0].startswith("carl-tui: waiting up to 1 s (--timeout) for trackio:")
    assert "connection refused" in lines[0] and url in lines[0]
    assert lines[1].startswith("carl-tui: could not read it:")


def test_export_to_a_file_that_cannot_be_written_is_one_line(tmp_path, capsys):
    """-o into a missing folder or onto a folder is a bad flag, said before reading (it
    was a traceback after reading); a write that fails is one line and exit 1."""
    path = tmp_path / "run.jsonl"
    write_stream(path, [(0, {"loss": 1.0})], {"name": "r"})
    for target, says in [(tmp_path / "no" / "out.csv", f"no such directory: {tmp_path / 'no'}"),
                         (tmp_path, f"{tmp_path} is a directory; give a file name"),
                         (path / "out.csv", f"no such directory: {path}")]:
        rc, out, err = cli(["export", str(path), "-o", str(target)], capsys)
        assert (rc, out, err) == (2, "", f"carl-tui: -o: {says}\n")
    if os.path.exists("/dev/full"):  # every write fails: no space left
        rc, out, err = cli(["export", str(path), "-o", "/dev/full"], capsys)
        assert rc == 1 and err.count("\n") == 1 and "-o: cannot write /dev/full" in err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_export_of_completions_to_a_file_that_cannot_be_written_is_one_line(tmp_path, capsys):
    """`export --completions -o FILE`: a write that fails is one line and exit 1, as for
    the metrics (it was a traceback)."""
    path = tmp_path / "run.jsonl"
    write_stream(path, [(1, {"loss": 1.0})], {"name": "r"})
    with open(path, "a") as f:
        f.write(json.dumps({"event": "completions", "step": 1,
                            "rows": [{"prompt": "2+2?", "completion": "4"}]}) + "\n")
    rc, out, err = cli(["export", str(path), "--completions"], capsys)
    assert rc == 0 and json.loads(out)["completion"] == "4", err
    rc, out, err = cli(["export", str(path), "--completions", "-o", "/dev/full"], capsys)
    assert (rc, out) == (1, "") and err.count("\n") == 1, err
    assert err.startswith("carl-tui: -o: cannot write /dev/full: ")


def test_asking_for_a_run_that_is_not_there(tmp_path, capsys):
    path = tmp_path / "run.jsonl"
    write_stream(path, [(0, {"loss": 1.0})], {"name": "only-run"})
    rc, _, err = cli(["summary", str(path), "--run", "other"], capsys)
    assert rc == 1 and "no run 'other'" in err and "only-run" in err


# -- the trackers' own files ----------------------------------------------------------------


def test_summary_of_a_tensorboard_logdir(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    rng = random.Random(11)
    losses = {}
    for run in ("sft", "grpo"):
        w = SummaryWriter(str(tmp_path / "logs" / run))
        for step in range(0, 200, 5):
            loss = 3.0 * math.exp(-step / 60) + rng.random() * 0.05
            losses.setdefault(run, []).append((step, loss))
            w.add_scalar("train/loss", loss, step)
            w.add_scalar("train/reward", 0.1 + step / 250 + rng.random() * 0.02, step)
        w.close()
    d = summary(["--tensorboard", str(tmp_path / "logs"), "--run", "grpo"], capsys)
    want = losses["grpo"]
    assert d["run"] == "grpo" and d["steps_logged"] == len(want)
    loss = d["metrics"]["loss"]
    f32 = [float(__import__("numpy").float32(v)) for _, v in want]
    assert loss["last"] == f32[-1] and loss["min"] == min(f32) and loss["max"] == max(f32)
    rows = export_rows(["--tensorboard", str(tmp_path / "logs"), "--run", "sft",
                        "--metrics", "loss"], capsys)
    assert [r["step"] for r in rows] == [s for s, _ in losses["sft"]]
    rc, out, _ = cli(["summary", "--tensorboard", str(tmp_path / "logs"), "--run", "grpo"],
                     capsys)  # no token accuracy in a GRPO run: the gate says why it waits
    assert rc == 0
    assert ("gate    mean_token_accuracy: not fired: the run does not log it "
            "(--gate-metric picks another)") in out


def test_summary_of_a_trackio_store(tmp_path, capsys):
    pytest.importorskip("trackio")
    from tests.fakes.trackio_server import start_writer, wait_writer

    rng = random.Random(5)
    points = [{"train/loss": 2.5 * math.exp(-i / 30) + rng.random() * 0.01,
               "train/global_step": 10 * (i + 1)} for i in range(40)]
    wait_writer(start_writer(tmp_path, "proj-x", "run-a", points))
    d = summary(["--project", "proj-x", "--trackio-dir", str(tmp_path)], capsys)
    assert d["run"] == "run-a" and d["steps_logged"] == 40
    assert (d["first_step"], d["last_step"]) == (10, 400)
    assert d["metrics"]["loss"]["last"] == points[-1]["train/loss"]


@pytest.mark.parametrize("command", ["summary", "export", "fleet"])
def test_a_reader_that_stops_early_ends_it_quietly(tmp_path, command):
    """`carl-tui summary run.jsonl | head`: the reader is gone before anything is written
    (its end of the pipe is closed here first); no BrokenPipeError traceback, the exit
    status of a tool ended by SIGPIPE."""
    import os
    import subprocess
    import sys

    path = tmp_path / "run.jsonl"
    write_stream(path, [(s, {"loss": 1.0 / (1 + s)}) for s in range(3000)], {"name": "r"})
    read, write = os.pipe()
    os.close(read)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    try:
        proc = subprocess.run([sys.executable, "-m", "carl_tui", command, str(path)],
                              stdout=write, stderr=subprocess.PIPE, env=env, timeout=120,
                              check=False)
    finally:
        os.close(write)
    err = proc.stderr.decode()
    assert proc.returncode == 141, err
    assert err == ""


def test_a_tensorboard_run_is_named_by_its_own_folder_too(tmp_path, capsys):
    """`--run` takes the run folder's own name as well as its path under the logdir."""
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    for run, scale in (("Nov26_08-00-00_host", 1.0), ("Nov26_09-00-00_host", 2.0)):
        w = SummaryWriter(str(tmp_path / "logs" / "exp1" / run))
        for step in range(0, 50, 10):
            w.add_scalar("train/loss", scale / (1 + step), step)
        w.close()
    logs = str(tmp_path / "logs")
    for wanted in ("Nov26_08-00-00_host", "exp1/Nov26_08-00-00_host"):
        d = summary(["--tensorboard", logs, "--run", wanted], capsys)
        assert d["run"] == "exp1/Nov26_08-00-00_host"
        assert d["metrics"]["loss"]["max"] == 1.0
    rc, _, err = cli(["summary", "--tensorboard", logs, "--run", "08-00-00_host",
                      "--timeout", "1"], capsys)  # a part of the name is not the name
    assert rc == 1 and "waiting for run 08-00-00_host" in err
