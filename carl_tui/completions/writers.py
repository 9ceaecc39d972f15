"""`carl-tui export SOURCE --completions`: one row per completion, in step order.

JSONL: `{"step", "prompt", "completion", "rewards": {name: value}, "advantage"}` (and
`"carl_score"`, the CARL score, where the CARL stream gave one). CSV: `step, prompt,
completion`, one column per reward function, `advantage` (and `carl_score`).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from typing import IO, Any

from carl_tui.completions.log import CompletionLog
from carl_tui.completions.model import CompletionTable


def tables(log: CompletionLog) -> Iterator[CompletionTable]:
    """Every step's table, read one at a time (memory stays bounded)."""
    for step in log.steps:
        table = log.table(step)
        if table is not None:
            yield table


def rows(log: CompletionLog) -> Iterator[dict[str, Any]]:
    for table in tables(log):
        for r in table.rows:
            row: dict[str, Any] = {"step": table.step, "prompt": r.prompt,
                                   "completion": r.completion, "rewards": dict(r.rewards),
                                   "advantage": r.advantage}
            if r.carl is not None:
                row["carl_score"] = r.carl
            yield row


def write_jsonl(out: IO[str], log: CompletionLog) -> int:
    n = 0
    for row in rows(log):
        out.write(json.dumps(row, ensure_ascii=False) + "\n")
        n += 1
    return n


def write_csv(out: IO[str], log: CompletionLog) -> int:
    names: dict[str, None] = {}
    carl = False
    for table in tables(log):
        for name in table.reward_names:
            names.setdefault(name, None)
        carl = carl or any(r.carl is not None for r in table.rows)
    header = ["step", "prompt", "completion", *names, "advantage",
              *(["carl_score"] if carl else [])]
    w = csv.writer(out)
    w.writerow(header)
    n = 0
    for row in rows(log):
        rewards = row["rewards"]
        w.writerow([row["step"], row["prompt"], row["completion"],
                    *(_cell(rewards.get(k)) for k in names), _cell(row["advantage"]),
                    *([_cell(row.get("carl_score"))] if carl else [])])
        n += 1
    return n


def _cell(v: float | None) -> str:
    return "" if v is None else repr(float(v))
