"""The fleet of a TensorBoard logdir of 300 run folders, each written by torch's own
`SummaryWriter` (TRL-shaped tags, `train/` prefixed, one value a tag a step).

    python -m benchmarks fleet_tensorboard   (CARL_BENCH_FLEET_TB=RUNSxSTEPS, default
                                              300x1000)

Ours: `carl-tui fleet --tensorboard DIR --json` in a process of its own, from process
start to the JSON array printed (every row with its phase); its peak memory. Reference,
in the same run: TensorBoard's own `EventAccumulator` loading every run folder (every
scalar kept), in a process of its own. The folders are written once and kept in the
benchmarks' cache folder (CARL_BENCH_CACHE).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import Row, timed_command
from benchmarks.trl_store import cache_root, rows

VERSION = 1  # bump when the shape changes (cached folders are rewritten)
TAGS = ("train/loss", "train/grad_norm", "train/learning_rate", "train/entropy",
        "train/mean_token_accuracy", "train/reward")


def size() -> tuple[int, int]:
    runs, _, steps = (os.environ.get("CARL_BENCH_FLEET_TB") or "300x1000").partition("x")
    return int(runs), int(steps)


def write(root: Path, runs: int, steps: int) -> None:
    """One folder a run, written by torch's SummaryWriter."""
    from torch.utils.tensorboard import SummaryWriter

    for i in range(runs):
        w = SummaryWriter(str(root / f"sweep-{i:03d}"), max_queue=10_000, flush_secs=3600)
        for step, row in enumerate(rows(0, steps, steps, seed=i)):
            for tag in TAGS:
                w.add_scalar(tag, row[tag], step)
        w.close()


def ensure_logdir(runs: int, steps: int) -> Path:
    root = cache_root() / f"tb-fleet-v{VERSION}-{runs}x{steps}"
    done = root / "done"
    if not done.exists():
        import shutil

        shutil.rmtree(root, ignore_errors=True)  # a half-written logdir
        root.mkdir(parents=True)
        subprocess.run([sys.executable, "-m", "benchmarks.bench_fleet_tensorboard", "write",
                        str(root), str(runs), str(steps)], check=True)
        done.write_text("1")
    return root


def _ours(root: Path) -> dict:
    """`carl-tui fleet --tensorboard ROOT --json`, timed from process start; its peak."""
    took, peak, text = timed_command([sys.executable, "-m", "carl_tui", "fleet",
                                      "--tensorboard", str(root), "--json"])
    got = json.loads(text)
    return {"seconds": took, "rows": len(got),
            "phases": sum(1 for r in got if (r.get("phase") or {}).get("phase")),
            "last_steps": sorted({r.get("last_step") for r in got}, key=str),
            "peak_mb": peak}


def _accumulate(root: str) -> dict:
    """In its own process: EventAccumulator.Reload() on every run folder."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    t0 = time.perf_counter()
    values = 0
    for folder in sorted(p for p in Path(root).iterdir() if p.is_dir()):
        acc = ea.EventAccumulator(str(folder), size_guidance={ea.SCALARS: 0})
        acc.Reload()
        values += sum(len(acc.Scalars(t)) for t in acc.Tags()["scalars"])
    return {"seconds": time.perf_counter() - t0, "values": values}


def run() -> list[Row]:
    runs, steps = size()
    root = ensure_logdir(runs, steps)
    ours = _ours(root)
    out = subprocess.run([sys.executable, "-m", "benchmarks.bench_fleet_tensorboard", "ref",
                          str(root)], check=True, capture_output=True, text=True)
    ref = json.loads(out.stdout.strip().splitlines()[-1])
    assert ours["rows"] == runs and ours["last_steps"] == [steps - 1], ours
    assert ref["values"] == runs * steps * len(TAGS), ref
    label = f"fleet: TensorBoard logdir of {runs} runs x {steps} steps"
    return [
        Row(f"{label}, every row's phase", ours["seconds"], ref["seconds"], "s", "",
            f"`fleet --tensorboard --json` from process start, {ours['phases']}/{runs} "
            f"phases, peak {ours['peak_mb']:.0f} MB; ref: EventAccumulator.Reload() of "
            f"every folder ({ref['values']} scalars)"),
    ]


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    else:
        print(json.dumps(_accumulate(sys.argv[2])))
