"""A real tiny GRPO run through TRL's GRPOTrainer with the cascade and CARL reward,
and the demo process (stage hand-over, clean stop on SIGTERM)."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("trl")

from carl_tui.coherence.gates import CascadeGate
from carl_tui.training.callback import CarlCallback
from carl_tui.training.cascade_reward import CascadeReward
from carl_tui.training.reward import carl_reward
from carl_tui.training.tiny import reverse_reward

GATE = {"window": 2, "warmup": 3, "patience": 2}
RAMP_AT = 5  # trainer step from which the ramp reward pays 1


def ramp(prompts, completions, trainer_state=None, **kwargs):
    """A task reward that switches from 0 to 1 during the run (drives the cascade gate)."""
    step = trainer_state.global_step if trainer_state is not None else 0
    return [1.0 if step >= RAMP_AT else 0.0] * len(completions)


def read_stream(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def grpo_run(tmp_path_factory):
    from transformers import logging as hf_logging
    from trl import GRPOConfig, GRPOTrainer

    from carl_tui.training.tiny import grpo_dataset, tiny_model, tiny_tokenizer

    hf_logging.set_verbosity_error()
    tmp = tmp_path_factory.mktemp("grpo")
    tok = tiny_tokenizer()
    model = tiny_model(seed=1)
    stream = tmp / "run.jsonl"
    cb = CarlCallback(stream, model.config.vocab_size, run_name="grpo-test",
                      phase_metric="rewards/reverse_reward/mean")
    cascade = CascadeReward([reverse_reward, ramp], carl_reward(model, tok),
                            gate=CascadeGate(**GATE), callback=cb)
    args = GRPOConfig(output_dir=str(tmp / "out"), per_device_train_batch_size=8,
                      num_generations=4, max_completion_length=6, learning_rate=1e-3,
                      max_steps=14, logging_steps=1, save_strategy="no", report_to=[],
                      use_cpu=True, disable_tqdm=True, seed=0)
    trainer = GRPOTrainer(model=model, args=args, processing_class=tok,
                          train_dataset=grpo_dataset(200), reward_funcs=cascade.reward_funcs,
                          callbacks=[cb])
    trainer.train()
    cb.close()
    return cascade, read_stream(stream)


@pytest.mark.slow
def test_grpo_stream_keys_steps_and_phi(grpo_run):
    _, lines = grpo_run
    assert lines[0]["event"] == "meta" and lines[0]["method"] == "grpo"
    rows = [x for x in lines if "reward" in x]
    assert [r["step"] for r in rows] == list(range(1, 15))
    for r in rows:
        assert {"loss", "reward", "reward_std", "entropy", "phi", "rewards/reverse_reward/mean",
                "rewards/ramp/mean", "completions/mean_length", "cascade/stage"} <= set(r)
        assert r["phi"] == pytest.approx(1 - r["entropy"] / math.log(13), abs=1e-12)
        assert all(isinstance(v, (int, float)) and math.isfinite(v)
                   for k, v in r.items() if k != "step")


@pytest.mark.slow
def test_cascade_marker_at_predicted_step_and_carl_only_after(grpo_run):
    cascade, lines = grpo_run
    rows = [x for x in lines if "reward" in x]
    gate = CascadeGate(**GATE)
    predicted = next(r["step"] for r in rows
                     if gate.update(r["step"], r["rewards/reverse_reward/mean"]
                                    + r["rewards/ramp/mean"]))
    assert RAMP_AT < predicted < 14
    markers = [x for x in lines if x.get("kind") == "cascade"]
    assert len(markers) == 1 and markers[0]["step"] == predicted == cascade.fired_step
    for r in rows:
        on = r["step"] >= predicted
        assert r["cascade/stage"] == (1.0 if on else 0.0)
        assert ("rewards/carl/mean" in r) == on
        assert ("carl/composite" in r) == on
        if on:
            # TRL's mean of the returned rewards equals the composite logged by the reward
            assert r["rewards/carl/mean"] == pytest.approx(r["carl/composite"], abs=1e-5)
            assert 0.0 <= r["carl/composite"] <= 1.0
            assert {"carl/multiscale", "carl/cloud", "carl/discontinuity"} <= set(r)
            task = r["rewards/reverse_reward/mean"] + r["rewards/ramp/mean"]
            assert r["reward"] == pytest.approx(task + r["rewards/carl/mean"], abs=1e-5)
        else:
            task = r["rewards/reverse_reward/mean"] + r["rewards/ramp/mean"]
            assert r["reward"] == pytest.approx(task, abs=1e-5)


def _demo(stream, *extra):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "carl_tui.training.demo", "--stream", str(stream), "--pace", "0",
         *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)


@pytest.mark.slow
def test_demo_stops_cleanly_on_sigterm(tmp_path):
    stream = tmp_path / "demo.jsonl"
    proc = _demo(stream, "--sft-steps", "5000")
    try:
        deadline = time.time() + 240
        while not (stream.exists() and stream.read_text().count('"loss"') >= 5):
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.time() < deadline, "the demo logged no 5 SFT steps in time"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 0
    lines = read_stream(stream)
    assert lines[-1]["event"] == "log" and "stopped by SIGTERM" in lines[-1]["text"]
    steps = [x["step"] for x in lines if "loss" in x]
    assert 5 <= steps[-1] < 5000
