"""CARL reward: batched, on-device reduction vs the reference approach; GRPO overhead.

Reference approach (as the original reward function): one forward pass per
completion (the completion alone), the full [T, V] logits copied to the host,
numpy softmax and `log(p + 1e-10)`. Ours: `carl_reward`, all completions in one
pass with their prompts, reduced on the device in chunks.

Peak memory, each approach in a fresh process: tracemalloc (host allocations
made through Python/numpy), the peak resident set size above the starting point
(Linux VmHWM after resetting it; covers torch's own CPU allocations), and on a
GPU the peak of torch's CUDA allocator above the starting point.

Runs on CUDA when a GPU is present (CARL_BENCH_DEVICE=cpu forces the CPU).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import random
import subprocess
import sys
import time

from benchmarks.common import Row, best_time

N_COMPLETIONS = 16
COMPLETION_LEN = 128


def _device() -> str:
    import torch

    want = os.environ.get("CARL_BENCH_DEVICE", "")
    return want or ("cuda" if torch.cuda.is_available() else "cpu")


def _setup(vocab_size: int | None):
    import torch

    from carl_tui.training.tiny import DIGITS, SEP, tiny_model, tiny_tokenizer

    torch.manual_seed(0)
    tok = tiny_tokenizer()
    model = tiny_model(vocab_size, seed=0).eval().to(_device())
    rng = random.Random(0)
    prompts = ["".join(rng.choice(DIGITS) for _ in range(6)) + SEP for _ in range(N_COMPLETIONS)]
    digit_ids = [tok.convert_tokens_to_ids(d) for d in DIGITS]
    completion_ids = [[rng.choice(digit_ids) for _ in range(COMPLETION_LEN)]
                      for _ in range(N_COMPLETIONS)]
    completions = [tok.decode(c) for c in completion_ids]
    return model, tok, prompts, completions, completion_ids


def _ours(model, tok, prompts, completions, completion_ids):
    from carl_tui.training.reward import carl_reward

    reward = carl_reward(model, tok)
    return lambda: reward(prompts=prompts, completions=completions, completion_ids=completion_ids)


def _reference(model, tok, prompts, completions, completion_ids):
    import numpy as np
    import torch

    from carl_tui.coherence.rewards import score_sequence

    def run():
        out = []
        for ids in completion_ids:
            with torch.no_grad():
                x = torch.tensor([ids], device=model.device)
                logits = model(input_ids=x).logits[0].float().cpu().numpy()
            z = logits - logits.max(axis=-1, keepdims=True)
            probs = np.exp(z)
            probs /= probs.sum(axis=-1, keepdims=True)
            entropy = -(probs * np.log(probs + 1e-10)).sum(axis=-1)
            phi = 1.0 - entropy / math.log(logits.shape[-1])
            p_tok = probs[np.arange(len(ids)), ids]
            out.append(score_sequence(phi, p_tok).composite)
        return out

    return run


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _peak_child(kind: str, vocab: int | None) -> dict:
    """Peaks of one scoring call (after a warm-up call) in this process."""
    import tracemalloc

    import torch

    args = _setup(vocab)
    fn = (_ours if kind == "ours" else _reference)(*args)
    fn()  # warm-up: one-time lazy initialisation is not what we measure
    cuda = args[0].device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        gpu_base = torch.cuda.memory_allocated()
    with open("/proc/self/clear_refs", "w") as fh:  # reset VmHWM to the current RSS
        fh.write("5")
    base = _status_kb("VmRSS")
    tracemalloc.start()
    fn()
    _, traced = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    out = {"rss_mb": (_status_kb("VmHWM") - base) / 1024.0, "traced_mb": traced / 2**20}
    if cuda:
        torch.cuda.synchronize()
        out["gpu_mb"] = (torch.cuda.max_memory_allocated() - gpu_base) / 2**20
    return out


def _peak(kind: str, vocab: int | None) -> dict:
    code = ("import json,sys; from benchmarks.bench_reward import _peak_child; "
            f"print(json.dumps(_peak_child({kind!r}, {vocab!r})))")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root,
                         check=True, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _reward_rows(vocab: int | None) -> list[Row]:
    args = _setup(vocab)
    device = args[0].device.type
    label = f"V={args[0].config.vocab_size}, {device}"
    ours = _ours(*args)
    ref = _reference(*args)
    t_ours = best_time(_synced(ours, device), repeat=5)
    t_ref = best_time(_synced(ref, device), repeat=3)
    m_ours, m_ref = _peak("ours", vocab), _peak("reference", vocab)
    what = f"carl_reward {N_COMPLETIONS}x{COMPLETION_LEN} tok, {label}"
    rows = [
        Row(f"{what}: time", t_ours, t_ref, "s", ">= 5x faster"),
        Row(f"{what}: peak RSS growth", m_ours["rss_mb"], m_ref["rss_mb"], "MB", "lower",
            "fresh process each"),
        Row(f"{what}: peak host (tracemalloc)", m_ours["traced_mb"], m_ref["traced_mb"], "MB",
            "lower"),
    ]
    if "gpu_mb" in m_ours:
        rows.append(Row(f"{what}: peak GPU alloc", m_ours["gpu_mb"], m_ref["gpu_mb"], "MB",
                        "lower"))
    return rows


def _synced(fn, device: str):
    if device != "cuda":
        return fn
    import torch

    def run():
        out = fn()
        torch.cuda.synchronize()
        return out

    return run


def _grpo_step_time(with_carl: bool, steps: int = 12) -> float:
    import tempfile

    from transformers import TrainerCallback
    from transformers import logging as hf_logging
    from trl import GRPOConfig, GRPOTrainer

    from carl_tui.training.reward import carl_reward
    from carl_tui.training.tiny import grpo_dataset, reverse_reward, tiny_model, tiny_tokenizer

    hf_logging.set_verbosity_error()
    tok = tiny_tokenizer()
    model = tiny_model(seed=0)
    funcs = [reverse_reward] + ([carl_reward(model, tok)] if with_carl else [])
    times: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            times.append(time.perf_counter() - self.t0)

    with tempfile.TemporaryDirectory() as out:
        cfg = GRPOConfig(output_dir=out, per_device_train_batch_size=32, num_generations=8,
                         max_completion_length=32, max_steps=steps, logging_steps=1,
                         save_strategy="no", report_to=[], use_cpu=_device() == "cpu",
                         disable_tqdm=True, seed=0, learning_rate=1e-4)
        trainer = GRPOTrainer(model=model, args=cfg, processing_class=tok,
                              train_dataset=grpo_dataset(steps * 8), reward_funcs=funcs,
                              callbacks=[Timer()])
        with contextlib.redirect_stdout(io.StringIO()):  # the Trainer prints every log
            trainer.train()
    body = sorted(times[2:])  # skip warm-up steps
    return body[len(body) // 2]


def run() -> list[Row]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    rows = _reward_rows(None) + _reward_rows(32000)
    with_carl = _grpo_step_time(True)
    without = _grpo_step_time(False)
    rows.append(Row("GRPO step (tiny, 32 completions x 32 tok), +CARL", with_carl, without, "s",
                    "report overhead", f"overhead {100 * (with_carl / without - 1):+.0f}%"))
    return rows


if __name__ == "__main__":
    from benchmarks.common import HEADER

    print(HEADER)
    for r in run():
        print(r.format(), flush=True)
