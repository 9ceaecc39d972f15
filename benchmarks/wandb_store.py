"""An offline W&B run shaped like a real TRL run, written by wandb itself.

    python -m benchmarks.wandb_store DIR N [RUNS]

writes `DIR/wandb/offline-run-*/run-*.wandb`: RUNS runs (default 1) of N steps
each, `wandb.init(mode="offline")` and `run.log` in a loop, the rows of
`trl_store.rows` (TRL's `train/` keys, `train/global_step` declared as the step
metric, as transformers' W&B callback does). `ensure_wandb_run()` keeps the
folder between runs of the benchmark in the cache folder of `trl_store` (a
1M-step run takes minutes to write).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from benchmarks.trl_store import CHUNK, cache_root, rows

VERSION = 1  # bump when the shape changes (cached runs are rewritten)


def writer_env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(
        WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DISABLE_GIT="true",
        WANDB_DISABLE_CODE="true", WANDB_CONSOLE="off", WANDB_DIR=str(root),
        WANDB_CONFIG_DIR=str(root / ".config"), WANDB_CACHE_DIR=str(root / ".cache"),
        WANDB_DATA_DIR=str(root / ".data"), HOME=str(root),
    )
    return env


def write(root: Path, n: int, runs: int = 1) -> None:
    """Write the runs (call in a process whose environment is `writer_env(root)`)."""
    import wandb

    settings = wandb.Settings(
        x_disable_stats=True, x_disable_machine_info=True, x_save_requirements=False,
        disable_git=True, save_code=False, console="off", silent=True,
    )
    for k in range(runs):
        run = wandb.init(mode="offline", dir=str(root), project="trl", name=f"sft-run-{k}",
                         config={"model_name_or_path": "Qwen/Qwen2.5-0.5B",
                                 "vocab_size": 151936, "learning_rate": 2e-5, "seed": k},
                         settings=settings)
        run.define_metric("train/global_step")
        run.define_metric("*", step_metric="train/global_step", step_sync=True)
        for start in range(0, n, CHUNK):
            for row in rows(start, min(n, start + CHUNK), n, seed=k):
                run.log(row)
        run.finish()


def ensure_wandb_run(n: int, runs: int = 1) -> Path:
    """A folder holding `wandb/` with `runs` offline runs of `n` steps, written once and kept."""
    home = cache_root() / f"wandb-v{VERSION}-{n}x{runs}"
    done = home / "done"
    if not done.exists():
        home.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "benchmarks.wandb_store", str(home), str(n),
                        str(runs)], env=writer_env(home), check=True,
                       cwd=str(Path(__file__).resolve().parents[1]))
        done.write_text("ok")
    return home


def run_dirs(home: Path) -> list[Path]:
    return sorted((home / "wandb").glob("offline-run-*"))


if __name__ == "__main__":
    write(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 1)
