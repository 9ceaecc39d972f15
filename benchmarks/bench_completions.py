"""Completions tables in a Trainer's stdout: indexing it, and what holding only the
last N steps saves.

A stdout of STEPS logged GRPO steps, each printed by TRL's own
`print_prompt_completions_sample` (ROWS completions, prompts and completions of a
few hundred characters, wrapped in their columns). Indexing finds every table (its
step and byte range) without parsing it; every table then looked at once (as
stepping through the view or `export --completions` does) by the log keeping the
last 32 tables (the view's default), against the same log keeping every table.
Also: one old step read back from the file.
"""

from __future__ import annotations

import random
import tempfile
import tracemalloc
from pathlib import Path

from benchmarks.common import Row, best_time

STEPS = 400
ROWS = 16


def _write_log(path: Path) -> None:
    from rich.console import Console
    from trl.trainer import utils

    rng = random.Random(0)
    words = ["reverse", "the", "digits", "answer", "step", "model", "token", "then", "so"]

    def text(n):
        return " ".join(rng.choice(words) for _ in range(n))

    with open(path, "w") as f:
        console = Console(file=f, width=120)
        orig = utils.Console
        utils.Console = lambda: console
        try:
            for step in range(1, STEPS + 1):
                f.write(f"{{'loss': 0.1, 'reward': 0.5, 'epoch': {step / STEPS}}}\n")
                utils.print_prompt_completions_sample(
                    [text(40) for _ in range(ROWS)], [text(60) for _ in range(ROWS)],
                    {"accuracy": [rng.random() for _ in range(ROWS)],
                     "format": [rng.random() for _ in range(ROWS)]},
                    [rng.gauss(0, 1) for _ in range(ROWS)], step)
        finally:
            utils.Console = orig


def _read(path: Path, keep: int, *, look: bool = False):
    from carl_tui.completions.files import StdoutReader
    from carl_tui.completions.log import CompletionLog

    log = CompletionLog([StdoutReader(path)], keep=keep)
    while log.poll():
        pass
    if look:
        for step in log.steps:
            assert len(log.table(step).rows) == ROWS
    return log


def _held(path: Path, keep: int) -> float:
    """MB held by the log once every table was looked at."""
    tracemalloc.start()
    log = _read(path, keep, look=True)
    held = tracemalloc.get_traced_memory()[0] / 1e6
    tracemalloc.stop()
    assert len(log.steps) == STEPS
    return held


def run() -> list[Row]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.log"
        _write_log(path)
        size = path.stat().st_size / 1e6
        ours_mb = _held(path, 32)
        all_mb = _held(path, STEPS)
        look_s = best_time(lambda: _read(path, 32, look=True), repeat=1, warmup=0)
        index_s = best_time(lambda: _read(path, 32), repeat=3)
        log = _read(path, 32)
        back = best_time(lambda: (log._cache.pop(1, None), log.table(1)), repeat=20)
    note = f"{STEPS} steps x {ROWS} completions, {size:.1f} MB of stdout"
    return [
        Row("completions: stdout, index every table", index_s, None, "s", "", note),
        Row("completions: every table looked at, memory held", ours_mb, all_mb, "MB",
            "bounded (last 32)", f"keeping all: reference; parsed in {look_s:.2f} s"),
        Row("completions: an old step read back from the file", back, None, "s", "< 50 ms"),
    ]
