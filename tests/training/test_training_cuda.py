"""The training side on a GPU: what a launched GRPO job does on its CUDA card.

A real tiny GRPO run through TRL's GRPOTrainer on the GPU in bf16 with the
cascade and the stream, and `carl-tui train` itself with the trainer told to use the
GPU (what a job's YAML does). Skipped where no CUDA device is present: the rest of
the suite covers the same code on the CPU (and the CARL reward on CUDA against the
float64 host reference is in test_training_reward.py).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

from carl_tui.coherence.gates import CascadeGate
from carl_tui.training.callback import CarlCallback
from carl_tui.training.cascade_reward import CascadeReward
from carl_tui.training.reward import carl_reward
from carl_tui.training.tiny import (
    reverse_reward,
    tiny_model,
    tiny_tokenizer,
)


def test_grpo_trains_on_cuda_in_bf16(tmp_path):
    """TRL's GRPOTrainer on the GPU, bf16, with the cascade and the CARL reward: the
    stream holds every step, finite, and the CARL reward is scored on the GPU."""
    from transformers import logging as hf_logging
    from trl import GRPOConfig, GRPOTrainer

    from carl_tui.training.tiny import grpo_dataset

    hf_logging.set_verbosity_error()
    tok = tiny_tokenizer()
    model = tiny_model(seed=1)
    stream = tmp_path / "run.jsonl"
    cb = CarlCallback(stream, model.config.vocab_size, run_name="grpo-cuda",
                      phase_metric="rewards/reverse_reward/mean")
    carl = carl_reward(model, tok)
    cascade = CascadeReward([reverse_reward], carl,
                            gate=CascadeGate(window=2, warmup=2, patience=1), callback=cb)
    args = GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=16,
                      num_generations=4, max_completion_length=8, learning_rate=3e-4,
                      max_steps=12, logging_steps=1, save_strategy="no", report_to=[],
                      bf16=True, disable_tqdm=True, seed=0)
    torch.cuda.reset_peak_memory_stats()
    trainer = GRPOTrainer(model=model, args=args, processing_class=tok,
                          train_dataset=grpo_dataset(400), reward_funcs=cascade.reward_funcs,
                          callbacks=[cb])
    trainer.train()
    cb.close()
    assert next(trainer.model.parameters()).device.type == "cuda"
    assert torch.cuda.max_memory_allocated() > 0
    rows = [json.loads(x) for x in stream.read_text().splitlines()]
    steps = [r for r in rows if "reward" in r]
    assert [r["step"] for r in steps] == list(range(1, 13))
    for r in steps:
        assert r["phi"] == pytest.approx(1 - r["entropy"] / math.log(13), abs=1e-9)
        assert all(math.isfinite(v) for k, v in r.items()
                   if k != "step" and isinstance(v, (int, float)))
    carl_on = [r for r in steps if "carl/composite" in r]
    for r in carl_on:
        assert 0.0 <= r["carl/composite"] <= 1.0


def test_train_command_uses_the_gpu_when_told(tmp_path):
    """`carl-tui train` (a launched job's command) with the trainer's `use_cpu: false` and
    `bf16: true` from its YAML: it trains on the GPU, streams, exits 0."""
    cfg = tmp_path / "carl.yaml"
    cfg.write_text("trainer:\n  use_cpu: false\n  bf16: true\n")
    stream = tmp_path / "stream.jsonl"
    probe = ("import runpy, sys, torch\n"
             "sys.argv = ['carl-tui-train'] + sys.argv[1:]\n"
             "try:\n"
             "    runpy.run_module('carl_tui.training.train', run_name='__main__')\n"
             "finally:\n"
             "    print('CUDA_PEAK', torch.cuda.max_memory_allocated(), flush=True)\n")
    out = subprocess.run(
        [sys.executable, "-c", probe, "--model", "tiny", "--dataset", "tiny",
         "--method", "grpo", "--max-steps", "6", "--num-generations", "4",
         "--config", str(cfg), "--stream", str(stream), "--output", str(tmp_path / "out")],
        check=False, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    peak = int(out.stdout.rsplit("CUDA_PEAK", 1)[1].split()[0])
    assert peak > 0, "nothing was allocated on the GPU"
    rows = [json.loads(x) for x in stream.read_text().splitlines()]
    assert [r["step"] for r in rows if "reward" in r] == list(range(1, 7))
    assert np.isfinite([r["loss"] for r in rows if "loss" in r]).all()
