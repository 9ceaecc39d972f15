"""verl and OpenRLHF console logs written by each framework's own logging code.

    python tests/data/framework_logs/make_logs.py OUTDIR   # needs verl and openrlhf installed

Each log is written by a child process whose stdout and stderr go to ONE file, unbuffered,
as a job's log holds them (tqdm's carriage returns included). Beside each log, a JSON of
the values the run logged, step by step, written by the same child from the same dicts.

- verl (`verl.utils.tracking.Tracking` with the "console" backend, which prints through
  `verl.utils.logger.LocalLogger`: `step:N - key:value - ...`). The loop is the one of
  verl's `RayPPOTrainer.fit`: the validation logged at step 0, a tqdm bar
  `desc="Training Progress"`, then per step `logger.log(data=metrics, step=global_steps)`
  and `progress_bar.update(1)`. The actor's metrics are numpy floats, as verl's
  `reduce_metrics` (np.mean) returns them; the data metrics are Python floats (`.item()`).
  verl's package `__init__` imports Ray and its protocol: the two modules are loaded
  without it (their parent packages stand in empty), nothing else of verl runs.
- OpenRLHF (its trainer cannot run without Ray, vLLM and GPUs): its own logger
  (`openrlhf.utils.logging_utils.init_logger`, loaded from its file) and real tqdm, in the
  loop of `PPOTrainer.fit` and `PolicyModelActor.ppo_train` (0.11.2): the bar
  `Episode [1/1]` over the prompts, per step a `Train epoch [1/1]` bar over micro-batches
  with the `short_status` postfix, `logger.info(f"Sample: ...")`, then
  `logger.info(f"✨ Global step {global_step}: {log_status}")` and
  `pbar.update(prompts_consumed)`. The status keys are those `ppo_train` returns for GRPO
  with `entropy_coef` set and no critic, plus the trainer's `timing/*` and `rollout/*`.

The values are made up with realistic shapes (a reward that climbs, an entropy that falls,
a KL that drifts up, lengths that grow into the cap), from a fixed seed.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import time
import types
from pathlib import Path

STEPS = 40
PACE_S = 0.15  # a step's time (tqdm redraws at most every 0.1 s)


def _curve(t: float, lo: float, hi: float, mid: float, width: float) -> float:
    return lo + (hi - lo) / (1.0 + math.exp(-(t - mid) / width))


def verl_child(out_json: str) -> None:
    import numpy as np
    from tqdm import tqdm

    root = Path(importlib.util.find_spec("verl").submodule_search_locations[0])
    for name, sub in (("verl", ""), ("verl.utils", "utils")):  # skip the packages' __init__
        pkg = types.ModuleType(name)
        pkg.__path__ = [str(root / sub)]
        sys.modules[name] = pkg
    from verl.utils.tracking import Tracking

    rng = np.random.default_rng(7)
    logged: dict[int, dict[str, float]] = {}
    tracker = Tracking(project_name="carl", experiment_name="qwen2.5-0.5b-gsm8k-grpo",
                       default_backend="console")

    def log(data: dict, step: int) -> None:
        tracker.log(data=data, step=step)
        logged[step] = {k: float(v) for k, v in data.items()
                        if isinstance(v, (int, float, np.number)) and not isinstance(v, bool)}

    val = {"val-core/openai/gsm8k/reward/mean@1": 0.124}
    log(val, 0)
    bar = tqdm(total=STEPS, initial=0, desc="Training Progress")
    for step in range(1, STEPS + 1):
        t = step / STEPS
        score = _curve(step, 0.08, 0.71, 16, 4.5) + rng.normal(0, 0.025)
        entropy = 1.25 * math.exp(-1.4 * t) + 0.12 + rng.normal(0, 0.015)
        length = 180 + 90 * t + rng.normal(0, 6)
        kl_loss = 0.0008 + 0.021 * t * t + abs(rng.normal(0, 0.0007))
        metrics = {
            "actor/entropy": np.float64(entropy),
            "actor/kl_loss": np.float64(kl_loss),
            "actor/kl_coef": 0.001,
            "actor/pg_loss": np.float64(rng.normal(-0.004, 0.012)),
            "actor/pg_clipfrac": np.float64(0.0018 + 0.004 * t + abs(rng.normal(0, 4e-4))),
            "actor/ppo_kl": np.float64(rng.normal(2e-5, 1.5e-4)),
            "actor/pg_clipfrac_lower": np.float64(0.0),
            "actor/grad_norm": np.float64(abs(rng.normal(0.32, 0.06)) + 0.05),
            "perf/mfu/actor": np.float64(0.21 + rng.normal(0, 0.01)),
            "perf/max_memory_allocated_gb": np.float64(38.6),
            "actor/lr": 1e-06,
            "training/global_step": step,
            "training/epoch": 0,
            "critic/score/mean": score,
            "critic/score/max": 1.0,
            "critic/score/min": 0.0,
            "critic/rewards/mean": score,
            "critic/rewards/max": 1.0,
            "critic/rewards/min": 0.0,
            "critic/advantages/mean": rng.normal(0, 0.004),
            "critic/advantages/max": 1.78,
            "critic/advantages/min": -1.71,
            "critic/returns/mean": rng.normal(0, 0.004),
            "response_length/mean": length,
            "response_length/max": 512.0,
            "response_length/min": 61.0 + rng.integers(0, 20),
            "response_length/clip_ratio": max(0.0, 0.004 + 0.05 * t * t + rng.normal(0, 0.003)),
            "prompt_length/mean": 104.3,
            "prompt_length/max": 196.0,
            "prompt_length/min": 58.0,
            "prompt_length/clip_ratio": 0.0,
            "timing_s/gen": 21.4 + rng.normal(0, 1.2),
            "timing_s/update_actor": 14.9 + rng.normal(0, 0.6),
            "timing_s/step": 41.2 + rng.normal(0, 1.5),
            "perf/total_num_tokens": int(1024 * (length + 104)),
            "perf/throughput": 1650.0 + rng.normal(0, 40),
        }
        if step % 10 == 0:
            metrics["val-core/openai/gsm8k/reward/mean@1"] = round(score + 0.03, 4)
        log(metrics, step)
        time.sleep(PACE_S)  # past tqdm's redraw interval: the bar moves between lines
        bar.update(1)
    bar.close()
    Path(out_json).write_text(json.dumps({"train": {str(k): v for k, v in logged.items()}},
                                         indent=1))


def openrlhf_child(out_json: str) -> None:
    import random

    from tqdm import tqdm

    spec = importlib.util.find_spec("openrlhf")
    path = Path(spec.submodule_search_locations[0]) / "utils" / "logging_utils.py"
    mod_spec = importlib.util.spec_from_file_location("openrlhf_logging_utils", path)
    logging_utils = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(logging_utils)
    logger = logging_utils.init_logger("openrlhf.trainer.ppo_trainer")

    rng = random.Random(11)
    logged: dict[int, dict[str, float]] = {}
    evaluated: dict[int, dict[str, float]] = {}
    prompts_per_step, micro_batches = 16, 4
    pbar = tqdm(range(STEPS * prompts_per_step), desc="Episode [1/1]", initial=0)
    for global_step in range(1, STEPS + 1):
        t = global_step / STEPS
        reward = _curve(global_step, -0.6, 0.55, 18, 5) + rng.gauss(0, 0.03)
        entropy = 0.9 * math.exp(-1.6 * t) + 0.08 + rng.gauss(0, 0.01)
        length = 220 + 130 * t + rng.gauss(0, 8)
        status = {
            "policy_loss": rng.gauss(0.0, 0.015),
            "entropy_loss": entropy,
            "actor_lr": 5e-07,
            "actor_grad_norm": abs(rng.gauss(0.21, 0.05)) + 0.03,
            "kl": 0.0004 + 0.012 * t * t + abs(rng.gauss(0, 0.0004)),
            "logprobs_diff": rng.gauss(0, 0.002),
            "reward": reward,
            "return": reward - 0.001 * t,
            "response_length": length,
            "total_length": length + 96.5,
            "group_reward_std": max(0.0, 0.42 - 0.25 * t + rng.gauss(0, 0.02)),
            "ppo_clip_ratio": 0.001 + 0.006 * t + abs(rng.gauss(0, 5e-4)),
            "ppo_kl": rng.gauss(0, 1e-4),
            "response_clip_ratio": max(0.0, 0.01 + 0.08 * t * t + rng.gauss(0, 0.004)),
        }
        inner = tqdm(range(micro_batches), desc="Train epoch [1/1]")
        for _ in inner:
            short_status = {
                "act_loss": status["policy_loss"] + rng.gauss(0, 0.01),
                "reward": status["reward"] + rng.gauss(0, 0.05),
                "return": status["return"] + rng.gauss(0, 0.05),
                "gen_len": status["response_length"] + rng.gauss(0, 20),
                "tot_len": status["total_length"] + rng.gauss(0, 20),
                "kl": status["kl"],
                "act_lr": status["actor_lr"],
                "grad_norm": status["actor_grad_norm"],
                "ent_loss": status["entropy_loss"],
            }
            inner.set_postfix(short_status)
            time.sleep(PACE_S / micro_batches)
        logger.info(f"Sample: {['What is 17 * 3? The answer is 51.', 1.0]}")
        status["timing/make_experience"] = 6.1 + rng.gauss(0, 0.3)
        status["timing/ppo_train"] = 11.8 + rng.gauss(0, 0.5)
        status["timing/broadcast"] = 1.2
        status["rollout/reward_mean"] = status["reward"]
        status["rollout/reward_std"] = 0.48 + rng.gauss(0, 0.02)
        status["rollout/response_length_mean"] = status["response_length"]
        status["rollout/truncated_rate"] = status["response_clip_ratio"]
        status["rollout/num_samples"] = 128.0
        status["generated_samples"] = ["What is 17 * 3? The answer is 51.", 1.0]
        status["timing/generation"] = 18.3 + rng.gauss(0, 0.8)
        status["timing/step_total"] = sum(v for k, v in status.items() if k.startswith("timing/"))
        log_status = {k: v for k, v in status.items() if k not in ["generated_samples"]}
        logger.info(f"✨ Global step {global_step}: {log_status}")
        logged[global_step] = dict(log_status)
        if global_step % 10 == 0:  # args.eval.steps = 10: evaluate() logs its own line
            logger.info(f"⏰ Evaluation start time: {time.strftime('%Y-%m-%d %H:%M:%S')}")
            logs = {"eval_gsm8k_pass4": min(1.0, reward + 0.9),
                    "eval_gsm8k_pass1": reward / 2 + 0.4,
                    "eval_gsm8k_response_length_mean": length + 3.0,
                    "eval_gsm8k_truncated_rate": status["response_clip_ratio"] / 2,
                    "eval_response_length_mean": length + 3.0,
                    "eval_truncated_rate": status["response_clip_ratio"] / 2,
                    "eval_num_samples": 64.0}
            logger.info(f"✨ Evaluation completed in 0:00:14, global_step {global_step}, "
                        f"eval_metrics: {logs}")
            evaluated[global_step] = logs
        time.sleep(PACE_S)
        pbar.update(prompts_per_step)
    Path(out_json).write_text(json.dumps({"train": {str(k): v for k, v in logged.items()},
                                          "eval": {str(k): v for k, v in evaluated.items()}},
                                         indent=1))


def main(outdir: str) -> None:
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "160"}
    for name in ("verl", "openrlhf"):
        with open(out / f"{name}_console.log", "wb") as log:
            subprocess.run([sys.executable, __file__, "--child", name,
                            str(out / f"{name}_values.json")],
                           stdout=log, stderr=subprocess.STDOUT, env=env, check=True)


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        {"verl": verl_child, "openrlhf": openrlhf_child}[sys.argv[2]](sys.argv[3])
    else:
        main(sys.argv[1])
