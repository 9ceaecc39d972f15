"""Ingest speed of the local sources: JSONL lines and Trackio rows into batches.

Ours: JsonlSource / TrackioLocalSource read until caught up (columnar batches).
Reference: the naive way, `json.loads` per line or row and a dict per row,
then `ScalarBatch.from_rows`. Data: 10 metrics a row (TRL-like names and
values, full-precision floats), written to a temporary directory.
"""

from __future__ import annotations

import json
import random
import sqlite3
import tempfile
from pathlib import Path

import orjson

from benchmarks.common import Row, best_time
from carl_tui.events import RunRef, ScalarBatch
from carl_tui.metric_names import canonical, is_metric_key, valid_number
from carl_tui.sources.jsonl import JsonlSource
from carl_tui.sources.trackio.local import TrackioLocalSource

METRICS = (
    "loss", "learning_rate", "grad_norm", "entropy", "mean_token_accuracy",
    "num_tokens", "epoch", "rewards/reverse/mean", "reward", "phi",
)  # fmt: skip
REF = RunRef("bench", "bench", "bench")


def _row(rnd: random.Random, i: int, n: int) -> dict:
    return {
        "loss": round(2 * rnd.random(), 4),
        "learning_rate": 2e-5 * (1 - i / n),
        "grad_norm": 3 * rnd.random(),
        "entropy": 4 * rnd.random(),
        "mean_token_accuracy": rnd.random(),
        "num_tokens": float(512 * i),
        "epoch": round(3 * i / n, 4),
        "rewards/reverse/mean": rnd.random(),
        "reward": rnd.random(),
        "phi": rnd.random(),
    }


def write_jsonl(path: Path, n: int, seed: int = 0) -> Path:
    rnd = random.Random(seed)
    with open(path, "wb") as f:
        f.writelines(b"".join(
                    orjson.dumps({"step": i, "time": 1732350000.0 + 0.5 * i, **_row(rnd, i, n)})
                    + b"\n"
                    for i in range(start, min(n, start + 100_000))
                ) for start in range(0, n, 100_000))
    return path


def write_trackio_db(root: Path, project: str, n: int, seed: int = 0) -> Path:
    """A database laid out as Trackio 0.43 writes it (metrics JSON as bytes)."""
    rnd = random.Random(seed)
    path = root / f"{project}.db"
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE metrics (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, "
        "timestamp TEXT NOT NULL, run_name TEXT NOT NULL, step INTEGER NOT NULL, "
        "metrics TEXT NOT NULL, log_id TEXT, space_id TEXT)"
    )
    conn.execute(
        "CREATE TABLE configs (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, "
        "run_name TEXT NOT NULL, config TEXT NOT NULL, created_at TEXT NOT NULL, UNIQUE(run_id))"
    )
    conn.executemany(
        "INSERT INTO metrics (run_id, timestamp, run_name, step, metrics) VALUES (?, ?, ?, ?, ?)",
        (
            (
                "0123456789abcdef",
                "2025-01-01T00:00:00+00:00",
                "bench",
                i,
                orjson.dumps({**{f"train/{k}": v for k, v in _row(rnd, i, n).items()},
                              "train/global_step": i}),
            )
            for i in range(n)
        ),
    )
    conn.commit()
    conn.close()
    return path


def ours_jsonl(path: Path) -> int:
    src = JsonlSource(path)
    total = 0
    while True:
        total += sum(len(e) for e in src.poll() if isinstance(e, ScalarBatch))
        if src.interval:
            src.close()
            return total


def _naive_values(d: dict) -> dict[str, float]:
    """The reference's per-row, per-value conversion (what the sources vectorise)."""
    vals = {}
    for k, v in d.items():
        if is_metric_key(k):
            num = valid_number(v)
            if num is not None:
                vals[canonical(k)] = num
    return vals


def naive_jsonl(path: Path) -> int:
    rows = []
    prev = -1
    with open(path, encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            step = d.get("step", prev + 1)
            rows.append((step, _naive_values(d)))
            prev = step
    return len(ScalarBatch.from_rows(REF, rows))


def ours_trackio(root: Path, project: str) -> int:
    src = TrackioLocalSource(project, root=root)
    total = 0
    while True:
        total += sum(len(e) for e in src.poll() if isinstance(e, ScalarBatch))
        if src.interval:
            src.close()
            return total


def naive_trackio(root: Path, project: str) -> int:
    conn = sqlite3.connect(root / f"{project}.db")
    rows = []
    for step, blob in conn.execute("SELECT step, metrics FROM metrics ORDER BY id"):
        d = json.loads(blob)
        step = d.get("train/global_step", step)
        rows.append((step, _naive_values(d)))
    conn.close()
    return len(ScalarBatch.from_rows(REF, rows))


def run() -> list[Row]:
    out: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="carl-bench-") as tmp:
        root = Path(tmp)
        for n, repeat, target in ((100_000, 5, "< 0.5 s"), (1_000_000, 2, "< 2.5 s")):
            path = write_jsonl(root / f"lines-{n}.jsonl", n)
            assert ours_jsonl(path) == n == naive_jsonl(path)
            ours = best_time(lambda p=path: ours_jsonl(p), repeat=repeat, warmup=0)
            ref = best_time(lambda p=path: naive_jsonl(p), repeat=1, warmup=0)
            size = path.stat().st_size / 1e6
            out.append(
                Row(f"jsonl: {n:,} lines x 10 metrics -> batches", ours, ref,
                    target=target, note=f"{size:.0f} MB; ref: json.loads + dict per row")
            )  # fmt: skip
            path.unlink()
        n = 100_000
        write_trackio_db(root, "bench", n)
        assert ours_trackio(root, "bench") == n == naive_trackio(root, "bench")
        ours = best_time(lambda: ours_trackio(root, "bench"), repeat=3, warmup=0)
        ref = best_time(lambda: naive_trackio(root, "bench"), repeat=1, warmup=0)
        out.append(
            Row(f"trackio db: {n:,} rows x 10 metrics -> batches", ours, ref,
                note="ref: sqlite3 + json.loads + dict per row")
        )  # fmt: skip
    return out


if __name__ == "__main__":
    from benchmarks.common import HEADER

    print(HEADER)
    for row in run():
        print(row.format(), flush=True)
