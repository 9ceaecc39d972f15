"""`carl-tui export SOURCE --completions`: one row per completion, in step order.

JSONL: `{"step", "prompt", "completion", "rewards": {name: value}, "advantage"}` (and
`"carl_score"`, the CARL score, where the CARL stream gave one). CSV: `step, prompt,
completion`, one column per reward function, `advantage` (and `carl_score`).
"""

from __future__ import annotations

import csv
import json
import re
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
        line = json.dumps(row, ensure_ascii=False)
        if _has_surrogate(line):  # a lone surrogate (`"\ud800"`, valid JSON): kept as its
            line = json.dumps(row)  # escape, which UTF-8 cannot carry as a character
        out.write(line + "\n")
        n += 1
    return n


_SURROGATE = re.compile("[\ud800-\udfff]")  # in a str, a surrogate is always alone


def _has_surrogate(text: str) -> bool:
    return _SURROGATE.search(text) is not None


def _utf8(text: str) -> str:
    """`text` with each lone surrogate (which no UTF-8 file can hold) as U+FFFD."""
    return _SURROGATE.sub("\ufffd", text)


def write_csv(out: IO[str], log: CompletionLog) -> int:
    names: dict[str, None] = {}
    carl = False
    for table in tables(log):
        for name in table.reward_names:
            names.setdefault(name, None)
        carl = carl or any(r.carl is not None for r in table.rows)
    header = ["step", "prompt", "completion", *map(_utf8, names), "advantage",
              *(["carl_score"] if carl else [])]
    w = csv.writer(out)
    w.writerow(header)
    n = 0
    for row in rows(log):
        rewards = row["rewards"]
        w.writerow([row["step"], _utf8(row["prompt"]), _utf8(row["completion"]),
                    *(_cell(rewards.get(k)) for k in names), _cell(row["advantage"]),
                    *([_cell(row.get("carl_score"))] if carl else [])])
        n += 1
    return n


def _cell(v: float | None) -> str:
    return "" if v is None else repr(float(v))
