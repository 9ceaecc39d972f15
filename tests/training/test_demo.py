"""The live demo: the warm start is streamed from its first step, the stages share one
stream, and the training process ends with the dashboard however the dashboard ends.

The dashboard tests run the real `carl-tui demo` (the same code path as a user's) in a
pseudo-terminal and kill it; they wait for the first metrics line, so they take the
time the child needs to import torch and build the model (a few seconds each).
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import pty
import signal
import struct
import subprocess
import sys
import termios
import threading
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("trl")
psutil = pytest.importorskip("psutil")

from carl_tui.training.tiny import tiny_vocab_size
from tests.conftest import wait_until

ROOT = Path(__file__).resolve().parents[1].parent
RECORDING = ROOT / "recordings" / "tiny-demo.jsonl"


def read_lines(path: Path) -> list[dict]:
    """The complete lines of a stream another process is writing."""
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]


def wait_for(predicate, what: str, timeout: float = 120.0):
    """`wait_until` with the demo's generous bound (a real trainer on a loaded machine)."""
    return wait_until(predicate, what, timeout)


def gone(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group `pgid`."""
    out = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (ProcessLookupError, PermissionError):
            continue
    return out


class Dashboard:
    """`carl-tui demo` in a pseudo-terminal of 120x36, its output drained."""

    def __init__(self, stream: Path):
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 36, 120, 0, 0))
        env = dict(os.environ, TERM="xterm-256color")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "carl_tui", "demo", "--stream", str(stream)],
            stdin=slave, stdout=slave, stderr=slave, env=env, cwd=ROOT, start_new_session=True,
        )
        os.close(slave)
        self.master = master
        self.screen = bytearray()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            self.screen += data[-4096:]
            del self.screen[:-65536]

    def child(self) -> psutil.Process:
        """The training process, once it runs the demo (not the fork before its exec)."""

        def demo_child():
            for kid in psutil.Process(self.proc.pid).children():
                try:
                    if kid.cmdline()[1:3] == ["-m", "carl_tui.training.demo"]:
                        return kid
                except psutil.Error:
                    continue
            return None

        self._child = wait_for(demo_child, "the training process")
        return self._child

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        os.close(self.master)
        child = getattr(self, "_child", None)
        if child is not None and not gone(child):  # a failed test leaves no orphan behind
            os.killpg(child.pid, signal.SIGKILL)


@pytest.fixture
def dashboard(tmp_path):
    stream = tmp_path / "demo.jsonl"
    board = Dashboard(stream)
    board.stream = stream
    yield board
    board.close()


def check_warm_start_streamed(lines: list[dict]) -> None:
    """Meta, the warm_start stage and a log line come first; the first metrics line is
    warm-start step 1 with phi from its entropy, under names the gate does not read."""
    first = next(i for i, x in enumerate(lines) if "event" not in x)
    head, row = lines[:first], lines[first]
    assert head[0]["event"] == "meta" and head[0]["vocab_size"] == tiny_vocab_size() == 13
    assert head[0]["name"] == "tiny-reverse-seed0" and head[0]["method"] == "sft"
    stages = [x for x in head if x.get("kind") == "stage"]
    assert stages == [{"event": "marker", "kind": "stage", "step": 0, "stage": "warm_start"}]
    assert any(x["event"] == "log" and x["text"].startswith("warm start") for x in head)
    assert row["step"] == 1
    entropy = row["warm_start/entropy"]
    assert 0 < entropy <= math.log(13) + 1e-6  # a random model: near ln V
    assert row["phi"] == pytest.approx(1 - entropy / math.log(13), abs=1e-12)
    assert 0 <= row["warm_start/mean_token_accuracy"] <= 1 and row["warm_start/loss"] > 0
    assert not {"entropy", "mean_token_accuracy", "loss"} & set(row)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGHUP])
def test_training_ends_with_the_dashboard(dashboard, sig):
    child = dashboard.child()
    wait_for(lambda: any("event" not in x for x in read_lines(dashboard.stream)),
             "the first metrics line")
    check_warm_start_streamed(read_lines(dashboard.stream))

    os.kill(dashboard.proc.pid, sig)
    dashboard.proc.wait(timeout=30)
    wait_for(lambda: gone(child), f"the training process to end after {sig.name}", timeout=30)
    assert group_members(child.pid) == []  # nothing of its process group is left either
    last = read_lines(dashboard.stream)[-1]
    assert last["event"] == "log"  # it stopped cleanly (the trainer's stop), not cut off
    assert last["text"].startswith("demo stopped (its dashboard ended) after "), last


@pytest.mark.slow
def test_demo_stages_share_one_stream(tmp_path):
    stream = tmp_path / "demo.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "carl_tui.training.demo", "--stream", str(stream), "--pace", "0",
         "--warm-start-steps", "4", "--sft-steps", "5", "--grpo-steps", "3", "--seed", "3"],
        check=False, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = read_lines(stream)
    stages = [(x["stage"], x["step"]) for x in lines if x.get("kind") == "stage"]
    assert stages == [("warm_start", 0), ("sft", 4), ("grpo", 9)]
    rows = [x for x in lines if "event" not in x]
    warm = [r["step"] for r in rows if "warm_start/entropy" in r]
    sft = [r["step"] for r in rows if "mean_token_accuracy" in r]
    grpo = [r["step"] for r in rows if "reward" in r]
    assert (warm, sft, grpo) == ([1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11, 12])
    logged = [r for r in rows if "warm_start/entropy" in r or "entropy" in r]
    assert len(logged) == 12 and all("phi" in r for r in logged)
    assert lines[-1]["event"] == "log" and lines[-1]["text"].startswith("demo finished after")
    assert "warm start" in lines[-1]["text"] and "GRPO" in lines[-1]["text"]  # stage timings


def test_pretokenized_sft_data_is_what_sfttrainer_prepares(tmp_path):
    """The demo hands SFTTrainer its data already prepared (it starts at once); it must be
    exactly what the trainer makes of the prompt/completion data set."""
    from transformers import logging as hf_logging
    from trl import SFTConfig, SFTTrainer

    from carl_tui.training.tiny import (
        sft_dataset,
        sft_dataset_tokenized,
        tiny_model,
        tiny_tokenizer,
    )

    hf_logging.set_verbosity_error()
    args = SFTConfig(output_dir=str(tmp_path), report_to=[], use_cpu=True, shuffle_dataset=False)
    trainer = SFTTrainer(model=tiny_model(), args=args, processing_class=tiny_tokenizer(),
                         train_dataset=sft_dataset(200, seed=11, min_len=1, max_len=9))
    theirs = trainer.train_dataset
    ours = sft_dataset_tokenized(200, seed=11, min_len=1, max_len=9)
    assert len(ours) == len(theirs) == 200
    assert ours["input_ids"] == theirs["input_ids"]
    assert ours["labels"] == theirs["labels"]
    assert sum(label != -100 for row in ours["labels"] for label in row) > 200  # not all masked


def test_the_recording_tells_the_whole_story():
    """The committed recording is a real demo run: warm start, SFT melting then
    crystallising with the gate, GRPO, the cascade switch, CARL on to the end."""
    from carl_tui.training.demo import STAGES

    lines = [json.loads(line) for line in RECORDING.read_text(encoding="utf-8").splitlines()]
    markers = [x for x in lines if x.get("event") == "marker"]
    stages = [(m["stage"], m["step"]) for m in markers if m["kind"] == "stage"]
    assert [s for s, _ in stages] == list(STAGES)
    rows = [x for x in lines if "event" not in x]
    first_sft, first_grpo = stages[1][1] + 1, stages[2][1] + 1
    assert rows[0]["step"] == 1 and "warm_start/entropy" in rows[0] and "phi" in rows[0]
    warm = [r for r in rows if r["step"] < first_sft]
    assert warm and all("warm_start/entropy" in r for r in warm)
    assert warm[-1]["phi"] > warm[0]["phi"] + 0.5  # the copy task makes it confident
    sft = [r for r in rows if first_sft <= r["step"] < first_grpo and "entropy" in r]
    entropy = [r["entropy"] for r in sft]
    assert max(entropy[:30]) > 2.5 * sorted(entropy[:5])[2]  # melting early in SFT
    gate = next(m for m in markers if m["kind"] == "phase_transition")
    assert gate["step"] == stages[2][1] == sft[-1]["step"]  # the gate ended SFT
    assert sft[-1]["mean_token_accuracy"] >= 0.99
    phases = [m["phase"] for m in markers if m["kind"] == "phase" and m["step"] < first_grpo]
    assert phases[:4] == ["baseline", "melting", "transition", "crystallisation"]
    cascade = next(m for m in markers if m["kind"] == "cascade")
    grpo = [r for r in rows if r["step"] >= first_grpo]
    assert first_grpo < cascade["step"] < grpo[-1]["step"]
    assert all(r["cascade/stage"] == (1.0 if r["step"] >= cascade["step"] else 0.0)
               for r in grpo if "cascade/stage" in r)
    config = next(x["config"] for x in lines if x.get("event") == "meta" and "config" in x)
    carl_steps = config["carl_steps"]
    steps = [r["step"] for r in grpo if "reward" in r]
    assert steps[-1] == cascade["step"] + carl_steps - 1  # CARL on for --carl-steps steps
    assert lines[-1]["event"] == "log" and lines[-1]["text"].startswith("demo finished after")


def test_phase_panel_never_says_none():
    """A phase, gate or peak whose step is not known is shown without one, never "None"."""
    import io

    from rich.console import Console

    from carl_tui.sources.jsonl import JsonlSource
    from carl_tui.store import RunStore
    from carl_tui.ui.widgets.phase_panel import PhasePanel

    class Panel(PhasePanel):
        def _color(self, phase: str) -> str:  # no app (theme) in this test
            return "bold"

    def text(snap) -> str:
        console = Console(width=100, file=io.StringIO(), color_system=None)
        console.print(Panel()._render_snapshot(snap))
        return console.file.getvalue()

    src = JsonlSource(RECORDING)
    events = [e for _ in range(50) for e in src.poll()]
    store = RunStore(vocab_size=13)
    store.apply(events)
    snap = store.snapshot(store.runs()[0].key)
    shown = text(snap)
    assert "CRYSTALLISED at step" in shown and "since step" in shown and "None" not in shown
    unknown = replace(snap, phase=replace(snap.phase, since_step=None),
                      gate=replace(snap.gate, trigger_step=None, peak_entropy_step=None))
    shown = text(unknown)
    assert "None" not in shown
    assert "CRYSTALLISED" in shown and "since step" not in shown
    assert f"peak entropy {snap.gate.peak_entropy:.3g}" in " ".join(shown.split())


# A trainer that ignores SIGINT and SIGTERM until a file appears, then exits 0.
DEAF_TRAINER = (
    "import pathlib, signal, sys, time\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('deaf', flush=True)\n"
    "while not pathlib.Path(sys.argv[1]).exists():\n"
    "    time.sleep(0.02)\n"
)


async def test_quitting_the_demo_does_not_wait_for_a_trainer_that_ignores_signals(tmp_path):
    """The dashboard's on_exit (the UI thread, as the screen closes) only asks the run to
    stop: the app is gone while the deaf trainer still runs; what `run_demo` does next
    (its `finally`) waits for the stop, and nothing is left running."""
    from carl_tui.actions.local_job import LocalJob
    from carl_tui.cli import stop_soon
    from carl_tui.identity import demo_run
    from carl_tui.ui.app import DashboardConfig, build_app
    from tests.conftest import ScriptedSource

    release = tmp_path / "release"
    job = LocalJob.start([sys.executable, "-c", DEAF_TRAINER, str(release)],
                         tmp_path / "stream.jsonl", tie_to_parent=True)
    try:
        wait_for(lambda: "deaf" in job.log_path.read_text(), "the trainer to ignore signals")
        app = build_app(DashboardConfig(sources=[ScriptedSource()], on_exit=stop_soon(job),
                                        local_jobs=[(demo_run(0), job)]))
        async with app.run_test(size=(120, 36)) as pilot:
            await pilot.press("q")
        assert job.returncode is None  # the screen closed without waiting for the run
        wait_for(lambda: job.poll() == "stopping", "the stop to be asked")
        release.touch()  # the trainer gives in (as a real one ends its step)
        assert job.stop(grace=10, term_grace=5) == "canceled"  # run_demo's finally
        assert job.returncode == 0 and group_members(job.pid) == []
    finally:
        release.touch()
        if job.returncode is None:
            os.killpg(job.pid, signal.SIGKILL)
