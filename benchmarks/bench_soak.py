"""Soak: the dashboard follows a file that grows at 2,000 lines a second.

A writer process appends 2,000 lines/s (10 metrics each, values shaped like a
real run: decaying loss and entropy with noise, a warm-up and cosine learning
rate, occasional grad-norm spikes) for `SOAK_S` seconds (default 600; set the
environment variable CARL_SOAK_S, or `python -m benchmarks.bench_soak SECONDS`).
The real dashboard (`build_app(DashboardConfig(sources=[JsonlSource(path)]))`
under `App.run_test`, headless) follows it in its own process, which samples
its resident memory (RSS) every few seconds.

Reported: the RSS curve (a few points), the RSS slope after warm-up (the first
fifth of the run) in MB/min, the app's CPU, and every point accounted for:
lines written == steps logged in the store (and nothing skipped). Reference
for the slope: the raw rate of the data (steps and 10 float64 values a line),
what memory would grow by if every point were kept at full resolution.

    python -m benchmarks soak          # 10 minutes
    CARL_SOAK_S=60 python -m benchmarks soak
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import Row

LINES_PER_S = 2000
BATCH_S = 0.05  # the writer appends every 50 ms
SAMPLE_S = 5.0  # RSS sampling period
METRICS = 10
CATCH_UP_S = 120.0  # after the writer stops, how long the app may take to catch up


def duration() -> float:
    return float(os.environ.get("CARL_SOAK_S", "600"))


# -- the writer process ---------------------------------------------------------------------


def writer(path: Path, seconds: float, rate: int = LINES_PER_S) -> int:
    """Append `rate` lines/s for `seconds`; returns the number of lines written."""
    import math
    import random

    import orjson

    rnd = random.Random(7)
    total = int(seconds * rate)
    per_batch = max(1, int(rate * BATCH_S))
    t0 = time.monotonic()
    wall0 = time.time()
    written = 0
    with open(path, "ab", buffering=0) as fh:
        while written < total:
            lines = []
            for i in range(written, min(total, written + per_batch)):
                x = i / max(total, 1)
                warm = min(1.0, i / 2000)
                loss = 2.4 * math.exp(-4 * x) + 0.08 + rnd.gauss(0, 0.04)
                entropy = 3.2 * math.exp(-3 * x) + 0.25 + rnd.gauss(0, 0.05)
                spike = rnd.random() < 0.002
                lines.append(orjson.dumps({
                    "step": i,
                    "time": wall0 + i / rate,
                    "loss": loss,
                    "entropy": entropy,
                    "mean_token_accuracy": min(0.999, 0.1 + 0.85 * (1 - math.exp(-5 * x))
                                               + rnd.gauss(0, 0.01)),
                    "learning_rate": 2e-5 * warm * 0.5 * (1 + math.cos(math.pi * x)),
                    "grad_norm": abs(rnd.gauss(1.2, 0.3)) * (8 if spike else 1),
                    "reward": 0.2 + 0.7 * (1 - math.exp(-3 * x)) + rnd.gauss(0, 0.05),
                    "reward_std": abs(rnd.gauss(0.3, 0.05)),
                    "kl": 0.02 * x + abs(rnd.gauss(0, 0.005)),
                    "completion_length": 180 + 60 * x + rnd.gauss(0, 12),
                    "epoch": 3 * x,
                }) + b"\n")
            fh.write(b"".join(lines))
            written += len(lines)
            due = t0 + written / rate
            time.sleep(max(0.0, due - time.monotonic()))
    return written


# -- the app process ---------------------------------------------------------------------


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


async def follow_app(path: Path, done: Path) -> dict:
    """Run the dashboard on `path` until the writer is done (`done` holds the
    line count) and the store has every step; sample RSS meanwhile."""
    from carl_tui.sources.jsonl import JsonlSource
    from carl_tui.ui.app import DashboardConfig, build_app

    source = JsonlSource(path)
    app = build_app(DashboardConfig(sources=[source]))
    samples: list[tuple[float, float, int]] = []  # (seconds, RSS MB, steps logged)
    expected = None
    async with app.run_test(size=(160, 45)) as pilot:
        t0, cpu0 = time.monotonic(), time.process_time()
        next_sample = 0.0
        caught_up_by = None
        while True:
            now = time.monotonic() - t0
            logged = app.snapshot.steps_logged if app.snapshot else 0
            if now >= next_sample:
                samples.append((now, rss_mb(), logged))
                next_sample += SAMPLE_S
            if expected is None and done.exists():
                expected = int(done.read_text())
                caught_up_by = now + CATCH_UP_S
            if expected is not None and (logged >= expected or now > caught_up_by):
                break
            await pilot.pause(0.2)
        elapsed = time.monotonic() - t0
        cpu = time.process_time() - cpu0
        samples.append((elapsed, rss_mb(), logged))
        snap = app.snapshot
        result = {
            "samples": samples,
            "expected": expected,
            "steps_logged": snap.steps_logged if snap else 0,
            "last_step": snap.last_step if snap else None,
            "skipped": source.skipped,
            "restarts": source.restarts,
            "cpu_pct": 100 * cpu / elapsed,
        }
        await pilot.press("q")
    return result


# -- the benchmark -------------------------------------------------------------------------


def slope_mb_per_min(samples: list[tuple[float, float, int]], warmup_s: float) -> float:
    """Least-squares slope of RSS over time after the warm-up, in MB/min."""
    pts = [(t, m) for t, m, _ in samples if t >= warmup_s]
    if len(pts) < 2:
        return float("nan")
    n = len(pts)
    mt = sum(t for t, _ in pts) / n
    mm = sum(m for _, m in pts) / n
    var = sum((t - mt) ** 2 for t, _ in pts)
    cov = sum((t - mt) * (m - mm) for t, m in pts)
    return 60 * cov / var if var else float("nan")


def soak(seconds: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "soak.jsonl"
        done = Path(tmp) / "soak.done"
        path.touch()
        app = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.bench_soak", "--app", str(path), str(done)],
            stdout=subprocess.PIPE, text=True,
        )
        try:
            time.sleep(2.0)  # let the app start before the stream does
            written = writer(path, seconds)
            done.write_text(str(written))
            out, _ = app.communicate(timeout=seconds + CATCH_UP_S + 120)
        finally:
            if app.poll() is None:
                app.kill()
                app.wait()
        result = json.loads(out.strip().splitlines()[-1])
        result["written"] = written
        result["seconds"] = seconds
        result["file_mb"] = path.stat().st_size / 2**20
        return result


def curve(samples: list, points: int = 6) -> str:
    if not samples:
        return ""
    picks = sorted({round(i * (len(samples) - 1) / (points - 1)) for i in range(points)})
    return ", ".join(f"{samples[i][0] / 60:.1f} min: {samples[i][1]:.0f} MB" for i in picks)


def run(seconds: float | None = None) -> list[Row]:
    seconds = duration() if seconds is None else seconds
    r = soak(seconds)
    samples = r["samples"]
    warmup = seconds / 5
    slope = slope_mb_per_min(samples, warmup)
    raw_rate = LINES_PER_S * 60 * (METRICS + 1) * 8 / 2**20  # MB/min at full resolution
    after = [m for t, m, _ in samples if t >= warmup]
    rows = [
        Row(f"soak {seconds / 60:.3g} min: RSS after warm-up", after[0] if after else float("nan"),
            None, "MB", note=f"{LINES_PER_S} lines/s x {METRICS} metrics"),
        Row("soak: RSS at the end", samples[-1][1], None, "MB", note=curve(samples)),
        Row("soak: RSS slope after warm-up", slope, raw_rate, "MB/min",
            target="~0 (bounded)", note="ref: raw data rate at full resolution"),
        Row("soak: steps logged in the store", r["steps_logged"], r["written"], "lines",
            target="== lines written",
            note=(f"{r['steps_logged']:,} of {r['written']:,}; skipped {r['skipped']}, "
                  f"restarts {r['restarts']}, last step {r['last_step']}")),
        Row("soak: app CPU (% of a core)", r["cpu_pct"], None, "%",
            note=f"file {r['file_mb']:.0f} MB"),
    ]
    return rows


def main(argv: list[str]) -> None:
    if argv and argv[0] == "--app":
        import asyncio

        result = asyncio.run(follow_app(Path(argv[1]), Path(argv[2])))
        print(json.dumps(result))
        return
    seconds = float(argv[0]) if argv else None
    from benchmarks.common import HEADER

    print(HEADER)
    for row in run(seconds):
        print(row.format(), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
