"""A Trackio store shaped like a real TRL run, written by trackio's own `bulk_log`.

    python -m benchmarks.trl_store DIR PROJECT N

writes `DIR/PROJECT.db` (run "sft-run"): N rows with `train/`-prefixed keys as TRL's
Trainer logs them (loss, grad_norm, learning_rate, entropy, num_tokens,
mean_token_accuracy, epoch, phi, reward, reward_std: 10 metrics) plus
`train/global_step`, full-precision floats, gradual and noisy (accuracy rises
along a noisy sigmoid, entropy falls, the learning rate decays linearly), one
timestamp every 0.5 s. It runs in its own process because trackio reads
`TRACKIO_DIR` when it is imported. `ensure_store()` keeps stores between runs of
the benchmark in a cache folder (a 1M-row store takes a while to write).
"""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

RUN = "sft-run"
RUN_ID = "sft-run-0001"
CHUNK = 50_000
VERSION = 3  # bump when the shape changes (cached stores are rewritten)


def rows(start: int, stop: int, n: int, seed: int = 0) -> list[dict]:
    """TRL-like rows `start..stop` of an `n`-step run (deterministic for a seed)."""
    rnd = random.Random(seed * 1_000_003 + start)
    out = []
    for i in range(start, stop):
        x = i / max(n - 1, 1)
        p = 0.35 + 0.6 / (1 + math.exp(-12 * (x - 0.45)))  # the accuracy's trend
        acc = p + rnd.gauss(0, 0.04) * math.sqrt(p * (1 - p))  # binomial-like noise
        entropy = (2.4 - 1.9 / (1 + math.exp(-10 * (x - 0.4)))) * math.exp(rnd.gauss(0, 0.03))
        loss = (0.08 + 2.5 * (1 - p)) * math.exp(rnd.gauss(0, 0.08))
        out.append({
            "train/loss": loss,
            "train/grad_norm": abs(1.5 * math.exp(-3 * x) + rnd.gauss(0, 0.2)) + 1e-3,
            "train/learning_rate": 2e-5 * (1 - x) + 1e-7,
            "train/entropy": entropy,
            "train/num_tokens": float(2048 * (i + 1)),
            "train/mean_token_accuracy": min(1.0, max(0.0, acc)),
            "train/epoch": 3.0 * x,
            "train/phi": 1 - entropy / math.log(151936),
            "train/reward": acc + rnd.gauss(0, 0.02),
            "train/reward_std": 0.3 * (1 - p) * math.exp(rnd.gauss(0, 0.1)),
            "train/global_step": i,
        })
    return out


def write(root: Path, project: str, n: int) -> Path:
    """Write the store (call in a process whose TRACKIO_DIR is `root`)."""
    from trackio.sqlite_storage import SQLiteStorage

    t0 = datetime(2025, 11, 1, 8, 0, tzinfo=timezone.utc)
    for start in range(0, n, CHUNK):
        stop = min(n, start + CHUNK)
        SQLiteStorage.bulk_log(
            project, RUN, rows(start, stop, n),
            steps=list(range(start, stop)),
            timestamps=[(t0 + timedelta(seconds=0.5 * i)).isoformat()
                        for i in range(start, stop)],
            config={"model": "Qwen/Qwen2.5-0.5B", "vocab_size": 151936,
                    "learning_rate": 2e-5} if start == 0 else None,
            run_id=RUN_ID,
        )
    return root / f"{project}.db"


def ensure_jsonl(n: int) -> Path:
    """The same run as a JSONL stream (`step`, `time` and the `train/` keys), kept."""
    path = cache_root() / f"v{VERSION}-{n}.jsonl"
    if not path.exists():
        import orjson

        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        t0 = 1_761_984_000.0
        with open(tmp, "wb") as f:
            for start in range(0, n, CHUNK):
                f.writelines(
                    orjson.dumps({"step": row.pop("train/global_step"), "time": t0 + 0.5 * i,
                                  **row}) + b"\n"
                    for i, row in enumerate(rows(start, min(n, start + CHUNK), n), start)
                )
        tmp.rename(path)
    return path


def cache_root() -> Path:
    return Path(os.environ.get("CARL_BENCH_CACHE") or
                Path(tempfile.gettempdir()) / "carl-tui-bench-stores")


def trackio_env(root: Path | str) -> dict[str, str]:
    """This process's environment for a child that uses the Trackio folder `root`
    (no other TRACKIO_ setting, offline)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACKIO_")}
    env.update(TRACKIO_DIR=str(root), HF_HUB_OFFLINE="1")
    return env


def write_trackio_once(root: Path, project: str, done: Path, argv: list[str]) -> None:
    """Run the writer `argv` (a module of benchmarks/ writing `root/<project>.db` with
    trackio) unless `done` says it ran to its end; a half-written database is removed."""
    if done.exists():
        return
    root.mkdir(parents=True, exist_ok=True)
    for f in root.glob(f"{project}.db*"):
        f.unlink()
    subprocess.run([sys.executable, "-m", *argv], env=trackio_env(root), check=True)
    done.write_text("ok")


def ensure_store(n: int, project: str = "trl") -> Path:
    """A folder holding `trackio/<project>.db` of `n` rows, written once and kept
    (the folder doubles as a HOME for tools that look in ~/.cache/huggingface/trackio)."""
    home = cache_root() / f"v{VERSION}-{n}"
    root = home / ".cache" / "huggingface" / "trackio"
    write_trackio_once(root, project, home / "done",
                       ["benchmarks.trl_store", str(root), project, str(n)])
    return home


if __name__ == "__main__":
    write(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]))
