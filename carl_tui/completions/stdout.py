"""The completions tables TRL prints to the Trainer's stdout.

With `log_completions=True` (and rich installed) `GRPOTrainer.log` prints, after
each logged dict, a rich panel titled `Step N` holding a table: Prompt,
Completion, one column per reward function, Advantage (then `log_extra`
columns), numbers to 2 decimals, a separator after every row. A progress bar
redrawn without a newline can sit in front of a panel line (`...| 1/4 [...]╭─
Step 1 ─╮`) and warnings can fall between its lines: each line is read from
its first box character, lines without one are skipped.

A cell's text wraps inside its column: a line that fills the column was cut in
a word (joined as is), any other break was a space (joined with one). That is
the printed form: numbers to their printed precision, TRL's own sample
(`num_completions_to_print`).

`find_panels` (`sources/printed_panels.py`, where the Trainer log's source marks them as
it reads) finds whole panels in a byte buffer (a panel still being written waits for
its end); `parse_panel` turns one into a `CompletionTable`.
"""

from __future__ import annotations

import itertools
import re

from carl_tui.completions.model import CompletionTable, make_row
from carl_tui.sources.printed_panels import (
    ANSI,
    TITLE,
    clean,
    find_panels,  # noqa: F401  (said here too)
)


def _inner(line: str) -> str:
    """The table line inside a panel line `│ ... │`."""
    line = clean(line)
    if not line.startswith("│"):
        return ""
    end = line.rfind("│")
    return line[1:end].strip(" ") if end > 0 else ""


def _cells(line: str, cuts: list[int]) -> list[str]:
    """The cells of a table line: cut where the top border has its corners and joins
    (every line of the table has them at the same columns), else at its bars."""
    if len(line) == cuts[-1] + 1:
        return [line[a + 1:b] for a, b in itertools.pairwise(cuts)]
    return re.split("[│┃]", line.strip("│┃"))


def _join(pieces: list[str]) -> str:
    """A wrapped cell's pieces (each with its padding) as one text."""
    out = ""
    for i, raw in enumerate(pieces):
        body = raw[1:-1] if len(raw) >= 2 else raw.strip()
        text = body.rstrip()
        if i == 0:
            out = text
        else:
            prev = pieces[i - 1]
            filled = len(prev) >= 2 and len(prev[1:-1].rstrip()) == len(prev) - 2
            out += text.lstrip(" ") if filled else (" " + text.strip(" ") if text else "")
    return out


def _gather(lines: list[str]) -> tuple[list[str], list[list[list[str]]]]:
    """(column names, rows of cell pieces) of a table's lines."""
    cuts: list[int] = []
    header: list[list[str]] = []
    rows: list[list[list[str]]] = []
    current: list[list[str]] | None = None
    for line in lines:
        if not line:
            continue
        head = line[0]
        if head == "┏":
            cuts = [i for i, ch in enumerate(line) if ch in "┏┳┓"]
        elif not cuts:
            continue
        elif head == "┃":
            cells = _cells(line, cuts)
            header = header or [[] for _ in cells]
            for col, cell in zip(header, cells):
                col.append(cell)
        elif head == "│":
            cells = _cells(line, cuts)
            current = current or [[] for _ in cells]
            for col, cell in zip(current, cells):
                col.append(cell)
        elif head in "├└" and current is not None:
            rows.append(current)
            current = None
    if current is not None:
        rows.append(current)
    return [_join(c).strip() for c in header], rows


def parse_panel(text: str) -> CompletionTable | None:
    """The table of one printed panel (from its title line to its bottom line)."""
    m = TITLE.search(ANSI.sub("", text))
    if not m:
        return None
    names, rows = _gather([_inner(x) for x in text.split("\n")])
    if "Prompt" not in names or "Completion" not in names:
        return None
    ip, ic = names.index("Prompt"), names.index("Completion")
    ia = names.index("Advantage") if "Advantage" in names else None
    reward_cols = range(ic + 1, ia if ia is not None else len(names))
    out = []
    for cells in rows:
        if len(cells) != len(names):
            continue
        vals = {names[j]: _join(cells[j]).strip() for j in reward_cols}
        out.append(make_row(_join(cells[ip]), _join(cells[ic]),
                            {k: _num(v) for k, v in vals.items()},
                            _num(_join(cells[ia]).strip()) if ia is not None else None))
    return CompletionTable(step=int(m.group(1)), rows=tuple(out), origin="stdout", decimals=2)


def _num(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None
