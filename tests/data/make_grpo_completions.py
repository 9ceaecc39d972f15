"""A real tiny GRPO run with `log_completions=True`: every place TRL puts completions.

The offline tiny model (`carl_tui.training.tiny`) trains a few GRPO steps with two
task rewards, `report_to=["trackio", "wandb"]` (a local Trackio store, a W&B
offline run) and the CARL callback's stream with its completions sample. Stdout
and stderr go to ONE file (`train.log`), progress bars on, as a job's log holds
them. TRL writes its parquet tables under `out/completions/` (`output_dir` is relative,
so the Trackio and W&B runs' configs name no folder a reader finds: their own tables are
read, not the parquet files).

    python tests/data/make_grpo_completions.py OUTDIR [--no-wandb]

Layout of OUTDIR: train.log, stream.jsonl, out/completions/*.parquet, trackio/
(the store: project "compl", run "grpo-compl"), wandb/ (the offline run).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PROJECT = "compl"
RUN_NAME = "grpo-compl"
MAX_STEPS = 4


def length_bonus(completions, **kwargs):
    """A second reward function: prefers completions of 3 to 6 characters."""
    return [1.0 if 3 <= len(str(c).strip()) <= 6 else -0.5 for c in completions]


def _child(outdir: str, wandb: bool) -> None:  # pragma: no cover - runs in a subprocess
    from transformers import set_seed
    from trl import GRPOConfig, GRPOTrainer

    from carl_tui.training.callback import CarlCallback
    from carl_tui.training.tiny import grpo_dataset, reverse_reward, tiny_model, tiny_tokenizer

    out = Path(outdir)
    set_seed(0)
    tok = tiny_tokenizer()
    model = tiny_model(hidden_size=32, num_layers=1, num_heads=2)
    cb = CarlCallback(out / "stream.jsonl", model.config.vocab_size, run_name=RUN_NAME,
                      phase_metric="rewards/reverse_reward/mean", completions=4)
    config = GRPOConfig(
        output_dir="out", per_device_train_batch_size=4, num_generations=2,
        max_completion_length=6, learning_rate=3e-4, max_steps=MAX_STEPS, logging_steps=1,
        save_strategy="no", use_cpu=True, seed=0, log_completions=True,
        report_to=["trackio", "wandb"] if wandb else ["trackio"],
        project=PROJECT, run_name=RUN_NAME,
    )
    trainer = GRPOTrainer(model=model, args=config, train_dataset=grpo_dataset(64),
                          processing_class=tok, reward_funcs=[reverse_reward, length_bonus],
                          callbacks=[cb])
    cb.attach(trainer)
    trainer.train()
    cb.close()


def generate(outdir: Path, *, wandb: bool = True) -> Path:
    """Run it into `outdir`; raises CalledProcessError (with the output) on failure."""
    outdir.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "TRACKIO_"))}
    env.update(PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT),
               TRACKIO_DIR=str(outdir / "trackio"), GRADIO_ANALYTICS_ENABLED="False",
               WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DISABLE_GIT="true",
               WANDB_DISABLE_CODE="true", WANDB_DIR=str(outdir),
               WANDB_CONFIG_DIR=str(outdir / ".wandb-config"),
               WANDB_CACHE_DIR=str(outdir / ".wandb-cache"),
               WANDB_DATA_DIR=str(outdir / ".wandb-data"), WANDB_PROJECT=PROJECT)
    env.pop("TQDM_DISABLE", None)
    with open(outdir / "train.log", "wb") as log:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", str(outdir), *([] if wandb else ["--no-wandb"])],
            check=False, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=outdir)
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, proc.args,
                                            (outdir / "train.log").read_text(errors="replace"))
    return outdir


if __name__ == "__main__":  # pragma: no cover
    if sys.argv[1] == "--child":
        _child(sys.argv[2], "--no-wandb" not in sys.argv)
    else:
        generate(Path(sys.argv[1]), wandb="--no-wandb" not in sys.argv)
