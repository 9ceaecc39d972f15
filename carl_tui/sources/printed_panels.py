"""Where TRL's printed completions tables (rich panels titled `Step N`) are in a Trainer's
stdout, found in bytes: for the Trainer log's source, which marks them as it reads
(`line_marks.PanelMarks`), and for the completions view, which parses one when it is
looked at (`completions/stdout.py`). No parsing of a table here.
"""

from __future__ import annotations

import re

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
TITLE = re.compile(r"╭─*\s*Step (\d+)\s*─*╮")
#: Lines between a panel's top and its bottom beyond which it is given up.
MAX_PANEL_LINES = 20_000


def clean(line: str) -> str:
    """A printed line without colour codes, from its first box character on."""
    line = ANSI.sub("", line).replace("\r", "")
    for i, ch in enumerate(line):
        if ch in "│╭╰":
            return line[i:]
    return ""


def find_panels(data: bytes, base: int = 0) -> tuple[list[tuple[int, int, int]], int]:
    """Whole panels in `data` (read from file offset `base`): `(start, end, step)` file
    offsets of each, and how many bytes were consumed (a panel not yet ended, or a
    line not yet ended, is left for the next read)."""
    panels: list[tuple[int, int, int]] = []
    pos, consumed = 0, 0
    start, step, lines = -1, 0, 0
    while True:
        nl = data.find(b"\n", pos)
        if nl < 0:
            break
        line = data[pos:nl]
        if start < 0:
            if b"Step" in line and "╭".encode() in line:
                m = TITLE.search(ANSI.sub("", line.decode("utf-8", "replace")))
                if m:
                    start, step, lines = pos, int(m.group(1)), 0
        else:
            lines += 1
            if "╰".encode() in line and clean(line.decode("utf-8", "replace")).startswith("╰"):
                panels.append((base + start, base + nl + 1, step))
                start = -1
            elif lines > MAX_PANEL_LINES:
                start = -1
        pos = nl + 1
        if start < 0:
            consumed = pos
    return panels, consumed
