"""Real tiny TRL runs for the corpus of training histories (tests/data/real_runs).

Each run trains the offline tiny model (`carl_tui.training.tiny`: reverse a
digit string) with a real TRL trainer on the CPU and writes its
`state.log_history` (training rows only) as `tiny-NAME.json`, in the corpus's
format: {"name", "kind", "source", "steps", "log_history"}. The runs differ in
model size, learning rate, batch size, length and logging interval, so that
the corpus has fast and slow climbs, sparse logging, GRPO from scratch (the
reward hardly moves) and GRPO after a short SFT (it climbs).

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
}


#: The keys a row keeps (the corpus holds what the phases, gates and alerts read).
KEEP = {"step", "epoch", "loss", "grad_norm", "learning_rate", "mean_token_accuracy", "entropy",
        "num_tokens", "reward", "reward_std", "kl", "completion_length", "completions/mean_length",
        "phi", "cascade/stage", "carl/reward"}


def _keep(key: str) -> bool:
    return key in KEEP or key.startswith("warm_start/") or (
        key.startswith("rewards/") and not key.endswith("/std"))


def _train_rows(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if isinstance(v, (int, float)) and _keep(k)}
            for row in history if "train_runtime" not in row
            and not any(k.startswith("eval_") for k in row)]


def run(name: str) -> dict:
    from transformers import set_seed
    from trl import GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer

    from carl_tui.training.tiny import (
        grpo_dataset,
        reverse_reward,
        sft_dataset,
        tiny_model,
        tiny_tokenizer,
    )

    spec = RUNS[name]
    set_seed(0)
    tok = tiny_tokenizer()
    model = tiny_model(hidden_size=spec["hidden"], num_layers=spec["layers"],
                       num_heads=2 if spec["hidden"] < 64 else 4)
    work = tempfile.mkdtemp(prefix=f"tiny-{name}-")
    common = {"output_dir": work, "report_to": "none", "use_cpu": True, "disable_tqdm": True,
              "save_strategy": "no", "seed": 0, "logging_steps": spec["log"]}
    rows: list[dict] = []
    if spec["kind"] in ("sft", "sft+grpo"):
        steps = spec["steps"] if spec["kind"] == "sft" else spec["sft_steps"]
        config = SFTConfig(per_device_train_batch_size=spec["batch"], learning_rate=spec["lr"],
                           max_length=32, max_steps=steps, **common)
        trainer = SFTTrainer(model=model, args=config, train_dataset=sft_dataset(4096),
                             processing_class=tok)
        trainer.train()
        rows += _train_rows(trainer.state.log_history)
    if spec["kind"] in ("grpo", "sft+grpo"):
        offset = rows[-1]["step"] if rows else 0
        lr = spec.get("grpo_lr", spec["lr"])
        config = GRPOConfig(per_device_train_batch_size=spec["batch"], num_generations=4,
                            max_completion_length=8, learning_rate=lr, temperature=1.0,
                            max_steps=spec["steps"], **common)
        trainer = GRPOTrainer(model=model, args=config, train_dataset=grpo_dataset(2048),
                              processing_class=tok, reward_funcs=[reverse_reward])
        trainer.train()
        for row in _train_rows(trainer.state.log_history):
            rows.append({**row, "step": row["step"] + offset})
    return {"name": f"tiny-{name}", "kind": spec["kind"],
            "source": {"generator": "tests/data/real_runs/make_tiny.py", "spec": spec},
            "steps": len(rows), "log_history": rows}


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
    for name in argv or list(RUNS):
        write(run(name))


if __name__ == "__main__":
    main(sys.argv[1:])
