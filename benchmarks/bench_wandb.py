"""Opening a long W&B run, as a user sees it: `carl-tui --wandb RUN_DIR` in a real
terminal (a pty of 160x45), timed from process start, on an offline run written
by wandb itself (`wandb_store.py`: `wandb.init(mode="offline")`, `run.log` in a
loop, TRL-shaped rows), beside a bare Textual app and `wandb leet RUN_DIR`
(wandb's own terminal UI) measured in the same run.

    python -m benchmarks wandb
    CARL_BENCH_WANDB=100000 python -m benchmarks wandb        # sizes, comma-separated
    CARL_BENCH_WANDB_RUNS=100x2000 python -m benchmarks wandb  # the folder of runs
    CARL_BENCH_LEET=0 python -m benchmarks wandb               # without wandb leet

What is read off the screen (no hooks in either program):

- latest step: carl-tui shows the run's last step with a phase (the metrics
  table and the status bar; `bench_startup.useful`), vs the bare app's first frame.
- whole history: the last step is on screen and nothing is marked provisional
  ("≈") any more: every record was read in order. For `wandb leet`: its run
  overview's summary shows `_step` at the last step. leet reads the log from the
  start and updates that summary as it goes, so this is when it has read the
  whole log (it shows no step before that).

The folder of runs (CARL_BENCH_WANDB_RUNS, RUNSxSTEPS, empty: none) is timed in
process: `list_runs` (every run's name), and a `WandbSource` of the folder with
the dashboard's preview on until every run's last step has arrived.
Runs are written once and kept in the benchmarks' cache folder (CARL_BENCH_CACHE).
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time

from benchmarks.bench_startup import (
    SIZE,
    _env,
    _load,
    _median,
    _tool,
    measure_bare,
    measure_carl,
)
from benchmarks.common import Row, timed_command
from benchmarks.pty_screen import Session
from benchmarks.wandb_store import ensure_wandb_run, run_dirs


def measure_leet(home, run_dir, last_step: int, timeout: float) -> float | None:
    """Seconds from start until `wandb leet RUN_DIR` shows the last step in its summary."""
    tool = _tool("wandb")
    if tool is None:
        return None
    pattern = re.compile(rf"\b_step\s+{last_step}\b")
    with Session([tool, "leet", str(run_dir)], _env(home), size=SIZE, cwd=str(home)) as s:
        try:
            return s.wait_until(lambda sc: bool(pattern.search(sc.text())), timeout)
        finally:
            try:  # leet's Go core is a child of the wandb CLI: end the whole group
                os.killpg(s.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _single(n: int, repeat: int) -> list[Row]:
    home = ensure_wandb_run(n)
    run = run_dirs(home)[0]
    last = n - 1
    timeout = max(120.0, n / 1_000)
    bare = [measure_bare(home) for _ in range(repeat)]
    carl = [measure_carl(home, last, timeout, args=("--wandb", str(run)))
            for _ in range(repeat)]
    with_leet = os.environ.get("CARL_BENCH_LEET", "1") != "0"
    leet = measure_leet(home, run, last, timeout) if with_leet else None
    for c in carl:
        if c["whole"] is None:
            print(f"carl-tui never showed the whole history of {n:,} W&B steps; screen:\n"
                  f"{c.get('screen', '')}", file=sys.stderr)
    b_frame = _median(d["frame"] for d in bare)
    label = f"W&B {n:,} steps"
    size_mb = sum(p.stat().st_size for p in run.glob("*.wandb")) / 1e6
    return [
        Row(f"{label}: first frame (ref: bare app frame)",
            _median(c["frame"] for c in carl) or float("nan"), b_frame),
        Row(f"{label}: latest step on screen (ref: bare app frame)",
            _median(c["useful"] for c in carl) or float("nan"), b_frame,
            target="<= 3.5x bare", note=f"{size_mb:.0f} MB log; {_load()}"),
        Row(f"{label}: whole history shown (ref: wandb leet)",
            _median(c["whole"] for c in carl) or float("nan"), leet,
            target="faster than leet",
            note="ref: `wandb leet RUN` until its summary shows the last _step (once)"
            if leet is not None else "wandb leet not run (CARL_BENCH_LEET=0)" if not with_leet
            else "wandb leet did not show the last step in time"),
        Row(f"{label}: peak memory", max(c["peak_mb"] for c in carl), None, "MB",
            note=f"resident at the end {carl[0]['rss_mb']:.0f} MB"),
    ]


def _folder(runs: int, steps: int) -> list[Row]:
    from carl_tui.events import ScalarBatch
    from carl_tui.sources.wandb_run import WandbSource, list_runs

    home = ensure_wandb_run(steps, runs)
    t0 = time.perf_counter()
    listed = list_runs(home)
    t_list = time.perf_counter() - t0
    src = WandbSource(home)
    src.preview = True
    latest: dict[str, int] = {}
    done = 0
    while done < runs:
        got = src.poll()
        for e in got:
            if isinstance(e, ScalarBatch) and len(e):
                latest[e.run.run_id] = max(latest.get(e.run.run_id, -1), int(e.steps.max()))
        done = sum(v == steps - 1 for v in latest.values())
        if not got and src.interval > 0:
            break
    t_latest = time.perf_counter() - t0
    label = f"W&B folder of {runs} runs x {steps:,} steps"
    return [
        Row(f"{label}: list every run", t_list, None, note=f"{len(listed)} runs listed"),
        Row(f"{label}: every run's last step read", t_latest, None,
            note=f"{done} of {runs} runs at their last step"),
        _fleet(home, label, runs),
    ]


def _fleet(home, label: str, runs: int) -> Row:
    """`carl-tui fleet --wandb HOME --json`, from process start to every row's phase."""
    import json
    import sys

    took, peak, text = timed_command([sys.executable, "-m", "carl_tui", "fleet", "--wandb",
                                      str(home), "--json"])
    got = json.loads(text)
    phases = sum(1 for r in got if (r.get("phase") or {}).get("phase"))
    assert len(got) == runs, len(got)
    return Row(f"{label}: fleet --json, every row's phase", took, None,
               note=f"{phases}/{len(got)} phases, from process start, peak {peak:.0f} MB")


def run() -> list[Row]:
    sizes = [int(x) for x in os.environ.get("CARL_BENCH_WANDB", "1000000").split(",") if x]
    repeat = int(os.environ.get("CARL_BENCH_REPEAT", "3"))
    rows: list[Row] = []
    for n in sizes:
        rows += _single(n, repeat if n <= 100_000 else 1)
    folder = os.environ.get("CARL_BENCH_WANDB_RUNS", "100x2000")
    if folder:
        runs, steps = (int(x) for x in folder.split("x"))
        rows += _folder(runs, steps)
    return rows


if __name__ == "__main__":
    from benchmarks.common import HEADER

    print(HEADER)
    for row in run():
        print(row.format(), flush=True)

