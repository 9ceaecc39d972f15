"""Dashboard: time to first paint of big runs, memory, and idle CPU.

Each measurement runs in a fresh subprocess (`python -m benchmarks.dashboard_probe`)
so that memory is the whole process's, as a user would see it.

- first paint: from process start of the app (imports included) to the moment
  every step is in the store and the plots have been drawn, headless.
  Reference: reading the same file the naive way (json.loads per line into
  dicts), measured in the same run.
- idle CPU of a finished run over 5 s, vs an empty Textual app over 5 s.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.bench_ingest import write_jsonl, write_trackio_db
from benchmarks.common import Row


def probe(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.dashboard_probe", *args],
        capture_output=True, text=True, check=True, timeout=600,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def run() -> list[Row]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for n, target, mem_target in ((100_000, "< 1 s", None), (1_000_000, "< 3 s", 150)):
            path = tmp / f"run{n}.jsonl"
            write_jsonl(path, n)
            r = probe("paint-jsonl", str(path), str(n))
            rows.append(Row(f"first paint, JSONL {n:,} steps x 10", r["paint_s"], r["naive_read_s"],
                            target=target, note="ref: naive json.loads read"))
            rows.append(Row(f"process memory, JSONL {n:,} steps x 10", r["rss_mb"], None, "MB",
                            target=f"< {mem_target} MB" if mem_target else ""))
            root = tmp / f"trackio{n}"
            root.mkdir()
            write_trackio_db(root, "bench", n)
            r = probe("paint-trackio", str(root), str(n))
            rows.append(Row(f"first paint, Trackio {n:,} steps x 10", r["paint_s"],
                            r["naive_read_s"], target=target,
                            note="ref: naive sqlite + json.loads read"))
            rows.append(Row(f"process memory, Trackio {n:,} steps x 10", r["rss_mb"], None, "MB",
                            target=f"< {mem_target} MB" if mem_target else ""))
        path = tmp / "idle.jsonl"
        write_jsonl(path, 1000)
        r = probe("idle", str(path))
        rows.append(Row("idle CPU, finished run (% of a core)", r["app_cpu_pct"],
                        r["empty_app_cpu_pct"], "%", target="< 1 %",
                        note="ref: an empty Textual app"))
    return rows
