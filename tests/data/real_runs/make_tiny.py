"""Real tiny TRL runs for the corpus of training histories (tests/data/real_runs).

Each run trains the offline tiny model (`carl_tui.training.tiny`: reverse a
digit string) with a real TRL trainer on the CPU and writes its
`state.log_history` (training rows only) as `tiny-NAME.json`, in the corpus's
format: {"name", "kind", "source", "steps", "log_history"}. The runs differ in
model size, learning rate, batch size, length and logging interval, so that
the corpus has fast and slow climbs, sparse logging, GRPO from scratch (the
reward hardly moves) and GRPO after a short SFT (it climbs). The later runs keep every
numeric key TRL logs and shape the curve on purpose: a model pre-trained silently (it
climbs at once), a pause, a collapse, a divergence to NaN, and GRPO runs with a failure
induced at a known global step (constant reward, truncation, entropy collapse, NaN, KL
drift), recorded as the run's "induced": {flag, onset_step, how}.

    python tests/data/real_runs/make_tiny.py [NAME ...]    # all runs by default

`--demos` converts the demo's streams (`python -m carl_tui.training.demo
--stream PATH --seed N --pace 0`) given after it into `demo-seedN.json` runs
(every metrics line of the stream; stage markers as `stages`).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: The short SFT warm-up of the GRPO runs for the health flags (so that the reward moves).
WARM = {"kind": "sft+grpo", "hidden": 64, "layers": 2, "lr": 5e-3, "batch": 32, "sft_steps": 60}

# name -> kind (sft | grpo | sft+grpo), hidden size, layers, learning rate, batch,
# max_steps, logging_steps (and for sft+grpo: sft_steps, grpo_lr).
RUNS: dict[str, dict] = {
    "sft-h32-lr3e-3": {"kind": "sft", "hidden": 32, "layers": 1, "lr": 3e-3, "batch": 4,
                       "steps": 200, "log": 1},
    "sft-h64-lr1e-2-fast": {"kind": "sft", "hidden": 64, "layers": 2, "lr": 1e-2, "batch": 16,
                            "steps": 250, "log": 1},
    "sft-h32-lr1e-3-slow": {"kind": "sft", "hidden": 32, "layers": 1, "lr": 1e-3, "batch": 8,
                            "steps": 300, "log": 1},
    "sft-h32-lr3e-5-flat": {"kind": "sft", "hidden": 32, "layers": 1, "lr": 3e-5, "batch": 4,
                            "steps": 150, "log": 1},
    "sft-h64-lr5e-3-ls5": {"kind": "sft", "hidden": 64, "layers": 2, "lr": 5e-3, "batch": 32,
                           "steps": 400, "log": 5},
    "sft-h32-lr3e-3-ls10": {"kind": "sft", "hidden": 32, "layers": 1, "lr": 3e-3, "batch": 4,
                            "steps": 300, "log": 10},
    "sft-h16-lr3e-2": {"kind": "sft", "hidden": 16, "layers": 1, "lr": 3e-2, "batch": 8,
                       "steps": 200, "log": 1},
    "sft-h64-lr2e-3-long": {"kind": "sft", "hidden": 64, "layers": 2, "lr": 2e-3, "batch": 16,
                            "steps": 800, "log": 2},
    "grpo-scratch": {"kind": "grpo", "hidden": 32, "layers": 1, "lr": 3e-4, "batch": 8,
                     "steps": 80, "log": 1},
    "sft-h64-lr5e-3-b32": {"kind": "sft", "hidden": 64, "layers": 2, "lr": 5e-3, "batch": 32,
                           "steps": 300, "log": 1},
    "sft-h64-lr1e-2-b64": {"kind": "sft", "hidden": 64, "layers": 2, "lr": 1e-2, "batch": 64,
                           "steps": 250, "log": 1},
    "sft-then-grpo-100": {"kind": "sft+grpo", "hidden": 64, "layers": 2, "lr": 5e-3,
                          "batch": 32, "sft_steps": 100, "grpo_lr": 1e-3, "steps": 120, "log": 1},
    "sft-then-grpo-150": {"kind": "sft+grpo", "hidden": 64, "layers": 2, "lr": 5e-3,
                          "batch": 32, "sft_steps": 150, "grpo_lr": 3e-4, "steps": 100, "log": 1},
    "sft-then-grpo-40": {"kind": "sft+grpo", "hidden": 64, "layers": 2, "lr": 5e-3,
                         "batch": 16, "sft_steps": 40, "grpo_lr": 1e-3, "steps": 100, "log": 1},
    # Runs for the phases and the health flags: every numeric key TRL logs (`keep_all`), and
    # where a cause is applied at a known global step, "induced": {flag, onset_step, how}.
    "sft-pretrained-climbs-at-once": {
        "kind": "sft", "hidden": 64, "layers": 2, "lr": 2e-3, "batch": 32, "steps": 300, "log": 1,
        "keep_all": True,
        "pretrain": {"steps": 120, "lr": 5e-3, "batch": 32, "min_len": 2, "max_len": 4}},
    "sft-pretrained-2": {
        "kind": "sft", "hidden": 64, "layers": 2, "lr": 5e-3, "batch": 32, "steps": 300, "log": 1,
        "keep_all": True, "seed": 1, "warmup": 10,
        "pretrain": {"steps": 60, "lr": 5e-3, "batch": 32, "min_len": 3, "max_len": 6}},
    "sft-pause": {
        "kind": "sft", "hidden": 64, "layers": 2, "lr": 5e-3, "batch": 32, "steps": 300, "log": 1,
        "keep_all": True, "lr_mult": [[80, 130, 1e-4]],
        "induced": {"flag": "pause", "onset_step": 80,
                    "how": "LambdaLR scales the learning rate by 1e-4 for steps 80-129, then "
                           "back"}},
    "sft-collapse": {
        "kind": "sft", "hidden": 64, "layers": 2, "lr": 5e-3, "batch": 32, "steps": 300, "log": 1,
        "keep_all": True, "lr_mult": [[180, None, 100.0]],
        "induced": {"flag": "task_collapse", "onset_step": 180,
                    "how": "LambdaLR multiplies the learning rate by 100 from step 180 on"}},
    "sft-diverge": {
        "kind": "sft", "hidden": 64, "layers": 2, "lr": 5e-3, "batch": 32, "steps": 250, "log": 1,
        "keep_all": True, "nan_at": 150,
        "induced": {"flag": "loss_spike", "onset_step": 150,
                    "how": "a callback writes NaN into one MLP weight before step 150's update"}},
    "sft-quiet-2": {
        "kind": "sft", "hidden": 64, "layers": 2, "lr": 1e-5, "batch": 16, "steps": 200, "log": 1,
        "keep_all": True, "seed": 2},
    "grpo-slow-noisy": {
        **WARM, "grpo_lr": 5e-4, "grpo_batch": 16, "gens": 4, "steps": 300, "log": 1,
        "keep_all": True},
    "grpo-healthy-1": {
        **WARM, "grpo_lr": 1e-3, "grpo_batch": 64, "gens": 8, "steps": 150, "log": 1,
        "keep_all": True, "induced": {"flag": "none", "onset_step": None, "how": "healthy"}},
    "grpo-healthy-2": {
        **WARM, "grpo_lr": 5e-4, "grpo_batch": 64, "gens": 8, "steps": 150, "log": 1,
        "keep_all": True, "seed": 1,
        "induced": {"flag": "none", "onset_step": None, "how": "healthy"}},
    "grpo-healthy-3": {
        **WARM, "grpo_lr": 2e-3, "grpo_batch": 32, "gens": 8, "steps": 150, "log": 1,
        "keep_all": True, "seed": 2,
        "induced": {"flag": "none", "onset_step": None, "how": "healthy"}},
    "grpo-constant-reward": {
        **WARM, "grpo_lr": 1e-3, "grpo_batch": 64, "gens": 8, "steps": 150, "log": 1,
        "keep_all": True, "reward": "const", "reward_from": 120,
        "induced": {"flag": "no_learning_signal", "onset_step": 120,
                    "how": "from step 120 the reward function returns 0.5 for every completion"}},
    "grpo-truncation": {
        **WARM, "grpo_lr": 1e-3, "grpo_batch": 64, "gens": 8, "steps": 150, "log": 1,
        "keep_all": True, "reward": "length", "reward_from": 120, "max_completion": 8,
        "induced": {"flag": "truncation", "onset_step": 120,
                    "how": "from step 120 the reward pays the completion's length over the "
                           "cap of 8"}},
    "grpo-entropy-collapse": {
        **WARM, "grpo_lr": 1e-3, "grpo_batch": 64, "gens": 8, "steps": 150, "log": 1,
        "keep_all": True, "beta": 0.0, "grpo_lr_mult": [[120, None, 20.0]],
        "grpo_schedule": "constant",
        "induced": {"flag": "entropy_collapse", "onset_step": 120,
                    "how": "beta=0; constant learning rate 1e-3, multiplied by 20 from step "
                           "120 on"}},
    "grpo-nan": {
        **WARM, "grpo_lr": 1e-3, "grpo_batch": 64, "gens": 8, "steps": 150, "log": 1,
        "keep_all": True, "nan_at": 150, "gen_kwargs": {"remove_invalid_values": True},
        "induced": {"flag": "loss_spike", "onset_step": 150,
                    "how": "a callback writes NaN into one MLP weight before step 150's update "
                           "(generation drops NaN logits: uniform sampling from then on)"}},
    "grpo-kl-drift": {
        "kind": "sft+grpo", "hidden": 64, "layers": 2, "lr": 5e-3, "batch": 32, "sft_steps": 60,
        "grpo_lr": 3e-4, "grpo_batch": 64, "gens": 8, "steps": 200, "log": 1,
        "keep_all": True, "beta": 0.04, "reward": "noise", "reward_from": 120,
        "grpo_lr_mult": [[120, None, 10.0]],
        "induced": {"flag": "kl_drift", "onset_step": 120,
                    "how": "beta=0.04; from step 120 the reward is uniform noise, unrelated to "
                           "the completion, and the learning rate is multiplied by 10"}},
}


#: The keys a row keeps (the corpus holds what the phases, gates and alerts read). The
#: runs made before `KEEP_ALL` kept these only; `KEEP_ALL` runs keep every finite numeric
#: key TRL logs (frac_reward_zero_std, rewards/*/std, completions/*, clip_ratio/*, ...)
#: but the totals (`total_flos`, `train_*`).
KEEP = {"step", "epoch", "loss", "grad_norm", "learning_rate", "mean_token_accuracy", "entropy",
        "num_tokens", "reward", "reward_std", "kl", "completion_length", "completions/mean_length",
        "phi", "cascade/stage", "carl/reward"}


def _keep(key: str) -> bool:
    return key in KEEP or key.startswith("warm_start/") or (
        key.startswith("rewards/") and not key.endswith("/std"))


def _keep_all(key: str) -> bool:
    return key != "total_flos" and not key.startswith("train_")


def _train_rows(history: list[dict], keep_all: bool = False) -> list[dict]:
    keep = _keep_all if keep_all else _keep
    rows = []
    for row in history:
        if "train_runtime" in row or any(k.startswith("eval_") for k in row):
            continue
        out = {}
        for k, v in row.items():
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not keep(k):
                continue
            # NaN/inf values are kept as such (json writes NaN/Infinity): the diverging runs.
            out[k] = v
        rows.append(out)
    return rows


def _lr_lambda(total: int | None, mults: list, offset: int = 0):
    """The trainer's default schedule (linear decay to 0 over `total` steps, no warm-up;
    constant if `total` is None) times the factors of `mults`: [first, last, factor] rules
    over global steps (`last` excluded; None = to the end). Index i of LambdaLR is the
    update of local step i + 1 (the learning rate the trainer logs at that step)."""
    def f(i: int) -> float:
        factor = 1.0 if total is None else max(0.0, (total - i) / total)
        step = offset + i + 1
        for first, last, mult in mults:
            if step >= first and (last is None or step < last):
                factor *= mult
        return factor
    return f


def _optimizers(model, lr: float, total: int | None, mults: list, offset: int = 0):
    """(AdamW, LambdaLR) as the Trainer makes them (weight decay 0), the schedule bent by
    `mults`."""
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, _lr_lambda(total, mults, offset))


def _nan_callback(model, step: int):
    """A callback that writes NaN into one MLP weight just before the update of local `step`."""
    from transformers import TrainerCallback

    class NaNAt(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step + 1 == step:
                import torch

                with torch.no_grad():
                    model.model.layers[0].mlp.down_proj.weight[0, 0] = float("nan")

    return NaNAt()


def _reward(spec: dict, offset: int):
    """The GRPO reward function of a run: the task's `reverse_reward`, or from global step
    `reward_from` on a broken one (`const`: 0.5 for every completion; `length`: the
    completion's length over the cap; `noise`: uniform noise in [0, 0.7))."""
    import random

    from carl_tui.training.tiny import reverse_reward

    kind = spec.get("reward", "reverse")
    if kind == "reverse":
        return reverse_reward
    first = spec.get("reward_from")
    cap = spec.get("max_completion", 8)
    rng = random.Random(spec.get("seed", 0) + 4242)

    def reward(completions, answer, trainer_state=None, **kwargs):
        task = reverse_reward(completions, answer)
        step = offset + (trainer_state.global_step if trainer_state else 0) + 1
        if first is not None and step < first:
            return task
        if kind == "const":
            return [0.5] * len(task)
        if kind == "length":
            return [min(len(str(c).strip()), cap) / cap for c in completions]
        if kind == "noise":  # about the task reward's level before, so that it does not jump
            return [0.7 * rng.random() for _ in task]
        raise ValueError(kind)

    reward.__name__ = spec.get("reward_name", "reverse_reward")
    return reward


def run(name: str) -> dict:
    from transformers import set_seed
    from trl import GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer

    from carl_tui.training.tiny import (
        grpo_dataset,
        sft_dataset,
        tiny_model,
        tiny_tokenizer,
    )

    spec = RUNS[name]
    seed = spec.get("seed", 0)
    keep_all = spec.get("keep_all", False)
    set_seed(seed)
    tok = tiny_tokenizer()
    model = tiny_model(hidden_size=spec["hidden"], num_layers=spec["layers"],
                       num_heads=2 if spec["hidden"] < 64 else 4, seed=seed)
    work = tempfile.mkdtemp(prefix=f"tiny-{name}-")
    common = {"output_dir": work, "report_to": "none", "use_cpu": True, "disable_tqdm": True,
              "save_strategy": "no", "seed": seed, "logging_steps": spec["log"]}
    if keep_all:  # NaN/inf losses are logged as they are, not replaced by the running mean
        common["logging_nan_inf_filter"] = False
    pre = spec.get("pretrain")
    if pre:  # silent: a model that half-knows the task before the logged run starts
        config = SFTConfig(per_device_train_batch_size=pre["batch"], learning_rate=pre["lr"],
                           max_length=32, max_steps=pre["steps"],
                           **{**common, "logging_steps": 10**6})
        data = sft_dataset(4096, seed=seed + 100, min_len=pre.get("min_len", 3),
                           max_len=pre.get("max_len", 6))
        SFTTrainer(model=model, args=config, train_dataset=data, processing_class=tok).train()
    rows: list[dict] = []
    nan_at = spec.get("nan_at")
    if spec["kind"] in ("sft", "sft+grpo"):
        steps = spec["steps"] if spec["kind"] == "sft" else spec["sft_steps"]
        config = SFTConfig(per_device_train_batch_size=spec["batch"], learning_rate=spec["lr"],
                           max_length=32, max_steps=steps, warmup_steps=spec.get("warmup", 0),
                           **common)
        extra: dict = {}
        if spec.get("lr_mult"):
            extra["optimizers"] = _optimizers(model, spec["lr"], steps, spec["lr_mult"])
        if nan_at is not None and nan_at <= steps:
            extra["callbacks"] = [_nan_callback(model, nan_at)]
        trainer = SFTTrainer(model=model, args=config, train_dataset=sft_dataset(4096),
                             processing_class=tok, **extra)
        trainer.train()
        rows += _train_rows(trainer.state.log_history, keep_all)
    if spec["kind"] in ("grpo", "sft+grpo"):
        offset = rows[-1]["step"] if rows else 0
        lr = spec.get("grpo_lr", spec["lr"])
        config = GRPOConfig(per_device_train_batch_size=spec.get("grpo_batch", spec["batch"]),
                            num_generations=spec.get("gens", 4),
                            max_completion_length=spec.get("max_completion", 8),
                            learning_rate=lr, temperature=1.0, beta=spec.get("beta", 0.0),
                            max_steps=spec["steps"], generation_kwargs=spec.get("gen_kwargs"),
                            **common)
        extra = {}
        if spec.get("beta"):  # TRL builds the reference model from the config's path
            ref = Path(work) / "ref"
            model.save_pretrained(ref)
            model.config._name_or_path = str(ref)
        if spec.get("grpo_lr_mult"):
            total = None if spec.get("grpo_schedule") == "constant" else spec["steps"]
            extra["optimizers"] = _optimizers(model, lr, total, spec["grpo_lr_mult"], offset)
        if nan_at is not None and nan_at > offset:
            extra["callbacks"] = [_nan_callback(model, nan_at - offset)]
        trainer = GRPOTrainer(model=model, args=config, train_dataset=grpo_dataset(2048),
                              processing_class=tok, reward_funcs=[_reward(spec, offset)],
                              **extra)
        trainer.train()
        for row in _train_rows(trainer.state.log_history, keep_all):
            rows.append({**row, "step": row["step"] + offset})
    doc = {"name": f"tiny-{name}", "kind": spec["kind"],
           "source": {"generator": "tests/data/real_runs/make_tiny.py", "spec": spec},
           "steps": len(rows), "log_history": rows}
    if "induced" in spec:
        doc["induced"] = spec["induced"]
    return doc


def demo_run(stream: Path) -> dict:
    """A demo stream as a run: its metrics lines as log rows, its stage markers."""
    rows, stages, config = [], [], {}
    for line in stream.read_text().splitlines():
        obj = json.loads(line)
        if obj.get("event") == "marker" and obj.get("kind") == "stage":
            stages.append({"step": obj["step"], "stage": obj["stage"]})
        elif obj.get("event") == "meta" and "config" in obj:
            config = obj["config"]
        elif "event" not in obj and "step" in obj:
            rows.append({k: v for k, v in obj.items() if _keep(k)})
    seed = config.get("seed", 0)
    return {"name": f"demo-seed{seed}", "kind": "sft+grpo",
            "source": {"generator": "python -m carl_tui.training.demo --pace 0", "config": config},
            "stages": stages, "steps": len(rows), "log_history": rows}


def write(doc: dict) -> None:
    path = HERE / f"{doc['name']}.json"
    path.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(path.name, doc["kind"], doc["steps"])


def main(argv: list[str]) -> None:
    os.environ.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                       "TOKENIZERS_PARALLELISM": "false"})
    if argv[:1] == ["--demos"]:
        for p in argv[1:]:
            write(demo_run(Path(p)))
        return
    import torch

    torch.set_num_threads(1)
    import time

    for name in argv or list(RUNS):
        start = time.monotonic()
        doc = run(name)
        write(doc)
        print(f"  {time.monotonic() - start:.0f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
