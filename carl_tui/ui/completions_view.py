"""What the completions view (`a`) shows, without Textual: the phase edges as logged
steps, the rows in the chosen order and filter, the colour of a reward.

A phase edge is the first logged step of completions at or after the step where a
phase began (what the model said in baseline, at the transition, once
crystallised); phases the classifier has not reached have none.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from carl_tui.completions.model import Completion, CompletionTable

SORTS = ("as logged", "reward ↓", "reward ↑", "advantage ↓")


@dataclass(frozen=True)
class Edge:
    phase: str
    starts: int  # the step the phase began
    step: int  # the first logged completions at or after it
    stage: str = ""


def phase_edges(history: Sequence[tuple[str, int, str]], steps: Sequence[int]) -> list[Edge]:
    """Each phase of `history` ((phase, first step, stage), in order) with the logged step
    of `steps` (ascending) that shows it; a phase without completions in its span has none."""
    out: list[Edge] = []
    for i, (phase, start, stage) in enumerate(history):
        end = history[i + 1][1] if i + 1 < len(history) else None
        j = bisect.bisect_left(steps, start)
        if j < len(steps) and (end is None or steps[j] < end):
            out.append(Edge(phase, int(start), int(steps[j]), stage))
    return out


def edges(history: Sequence[tuple[str, int, str]], steps: Sequence[int],
          cascade_step: int | None = None) -> list[Edge]:
    """The phase edges, and the cascade switch (the CARL reward on) where there is one."""
    out = phase_edges(history, steps)
    if cascade_step is not None:
        j = bisect.bisect_left(steps, cascade_step)
        if j < len(steps):
            out.append(Edge("CARL on", int(cascade_step), int(steps[j]), "cascade"))
    return sorted(out, key=lambda e: (e.step, e.starts))


def phase_at(history: Sequence[tuple[str, int, str]], step: int) -> str:
    """The phase the run was in at `step` ("" before the first)."""
    current = ""
    for phase, start, _ in history:
        if start <= step:
            current = phase
        else:
            break
    return current


def matches(row: Completion, query: str) -> bool:
    q = query.casefold()
    return q in row.prompt.casefold() or q in row.completion.casefold()


def ordered(table: CompletionTable | None, sort: str,
            query: str = "") -> list[tuple[int, Completion]]:
    """(position as logged, row) of the rows to show: filtered by `query`, in `sort` order
    (rows without the value last)."""
    if table is None:
        return []
    rows = [(i, r) for i, r in enumerate(table.rows) if not query or matches(r, query)]
    if sort == "as logged":
        return rows
    if sort.startswith("advantage"):
        def key(x):
            return x[1].advantage
    else:
        def key(x):
            return x[1].total
    known = [x for x in rows if key(x) is not None]
    unknown = [x for x in rows if key(x) is None]
    known.sort(key=key, reverse=sort.endswith("↓"))
    return known + unknown


def reward_style(value: float | None, lo: float | None, hi: float | None) -> str:
    """Red (the table's lowest) through yellow to green (its highest); dim when unknown."""
    if value is None or lo is None or hi is None:
        return "dim"
    if hi - lo < 1e-12:
        return "yellow"
    t = (value - lo) / (hi - lo)
    return "red" if t < 1 / 3 else ("yellow" if t < 2 / 3 else "green")


def total_range(table: CompletionTable | None) -> tuple[float | None, float | None]:
    totals = [r.total for r in (table.rows if table else ()) if r.total is not None]
    return (min(totals), max(totals)) if totals else (None, None)


def fmt(value: float | None, decimals: int | None) -> str:
    if value is None:
        return "–"
    return f"{value:.{decimals if decimals is not None else 3}f}"
