"""Readers of completions kept in files: a Trainer's stdout, the CARL stream, TRL's
parquet folder, a W&B run's table files.

Each reads what is new since its last scan and remembers where each step's
table is (a byte range, a file), so that an old step is read again on demand
rather than kept in memory. A file that shrank (truncated, replaced) is read
again from its start.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

from carl_tui.completions.model import CompletionTable, from_records, make_row
from carl_tui.completions.stdout import find_panels, parse_panel
from carl_tui.errors import CarlError

#: Bytes read from a growing file per scan.
CHUNK = 8 << 20
#: A line (a printed panel) longer than a read is read again whole, up to this size;
#: a longer one is skipped and counted. Either way what follows it is read.
MAX_LINE = 512 << 20

LINE_TOO_LONG = "line too long"
NOT_UTF8 = "not UTF-8"
NOT_JSON = "not JSON"


class _Tail:
    """Reading a growing file by byte offset."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.offset = 0
        self._ident: tuple[int, int] | None = None

    def new_bytes(self, size: int = CHUNK) -> bytes:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return b""
        ident = (st.st_dev, st.st_ino)
        if ident != self._ident or st.st_size < self.offset:
            self._ident, self.offset = ident, 0
        if st.st_size <= self.offset:
            return b""
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            return f.read(size)

    def skip_line(self) -> bool:
        """Move past the line at the offset, read piece by piece; False while it has
        no end yet (still being written)."""
        pos = self.offset
        with open(self.path, "rb") as f:
            f.seek(pos)
            while piece := f.read(CHUNK):
                nl = piece.find(b"\n")
                if nl >= 0:
                    self.offset = pos + nl + 1
                    return True
                pos += len(piece)
        return False

    def read_range(self, start: int, end: int) -> bytes:
        with open(self.path, "rb") as f:
            f.seek(start)
            return f.read(end - start)


def _to_the_end(tail: _Tail, chunk: Any) -> list[tuple[int, Any, CompletionTable | None]]:
    """`chunk()` (one read of at most CHUNK bytes) again while it moves on: the whole of
    what the file holds now, whatever lies between its tables."""
    out = []
    while True:
        before = (tail.offset, tail._ident)
        out += chunk()
        if (tail.offset, tail._ident) == before:
            return out


class _TailReader:
    """A reader of one growing file, indexed chunk by chunk (`_index` of the bytes read
    from `base`)."""

    origin = ""

    def __init__(self, path: str | Path):
        self._tail = _Tail(path)
        self.skipped: Counter[str] = Counter()  # lines left out, by reason

    def scan(self) -> list[tuple[int, Any, CompletionTable | None]]:
        return _to_the_end(self._tail, self._chunk)

    def _chunk(self) -> list[tuple[int, Any, CompletionTable | None]]:
        size = CHUNK
        while True:
            base = self._tail.offset
            data = self._tail.new_bytes(size)
            if self._tail.offset != base:  # started over
                base = 0
            out, consumed = self._index(data, base)
            if consumed or len(data) < size:  # moved on, or a line not ended yet
                break
            # Nothing whole in a full read: one line (a panel) is longer than it.
            if size >= MAX_LINE:
                if self._tail.skip_line():
                    self.skipped[LINE_TOO_LONG] += 1
                return out
            size = min(size * 4, MAX_LINE)  # read it again, whole
        self._tail.offset = base + consumed
        return out

    def _index(self, data: bytes, base: int) -> tuple[list, int]:
        raise NotImplementedError


class StdoutReader(_TailReader):
    """The rich tables printed in a Trainer's stdout (`train.log`, a job's log)."""

    origin = "stdout"

    def _index(self, data: bytes, base: int) -> tuple[list, int]:
        panels, consumed = find_panels(data, base)
        # Indexed, not parsed: a table is parsed (and redacted) when it is looked at.
        return [(step, (start, end), None) for start, end, step in panels
                if b"Prompt" in data[start - base:end - base]], consumed

    def load(self, locator: tuple[int, int]) -> CompletionTable | None:
        return parse_panel(self._tail.read_range(*locator).decode("utf-8", "replace"))


def stream_table(obj: Any) -> CompletionTable | None:
    """The table of a CARL stream line `{"event": "completions", "step": N, "rows": [...]}`."""
    if not isinstance(obj, dict) or obj.get("event") != "completions":
        return None
    step, rows = obj.get("step"), obj.get("rows")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        return None
    if not isinstance(rows, list):
        return None
    out = tuple(
        make_row(r.get("prompt", ""), r.get("completion", ""),
                 r["rewards"] if isinstance(r.get("rewards"), dict) else {},
                 r.get("advantage"), r.get("carl"))
        for r in rows if isinstance(r, dict)
    )
    return CompletionTable(step=step, rows=out, origin="stream")


class StreamReader(_TailReader):
    """The `completions` lines of a JSONL stream (the CARL callback's, a recording)."""

    origin = "stream"

    def _index(self, data: bytes, base: int) -> tuple[list, int]:
        out, pos = [], 0
        while True:
            nl = data.find(b"\n", pos)
            if nl < 0:
                break
            line = data[pos:nl]
            if b'"completions"' in line and b'"event"' in line:
                step = _step_of_line(line)
                if isinstance(step, str):
                    self.skipped[step] += 1
                elif step is not None:  # the table is made when it is looked at
                    out.append((step, (base + pos, base + nl), None))
            pos = nl + 1
        return out, pos

    def load(self, locator: tuple[int, int]) -> CompletionTable | None:
        return _table_of_line(self._tail.read_range(*locator))


def _step_of_line(line: bytes) -> int | str | None:
    """The step of a completions line; why it is skipped (a reason) when it cannot be
    read; None when it is not a completions line after all."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return NOT_UTF8
    try:
        obj = json.loads(text)
    except ValueError:
        return NOT_JSON
    if not isinstance(obj, dict) or obj.get("event") != "completions":
        return None
    step = obj.get("step")
    ok = isinstance(step, int) and not isinstance(step, bool) and step >= 0
    return step if ok and isinstance(obj.get("rows"), list) else None


def _table_of_line(line: bytes) -> CompletionTable | None:
    try:
        return stream_table(json.loads(line))
    except (ValueError, UnicodeDecodeError):
        return None


_PARQUET = re.compile(r"completions_(\d+)\.parquet$")


class _FolderReader:
    """Files in a folder, one table each, noticed by name and modification time."""

    origin = ""
    pattern: re.Pattern[str]

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self._seen: dict[str, int] = {}
        self.skipped: Counter[str] = Counter()  # a file is read whole: none so far

    def _files(self) -> list[tuple[str, int]]:
        try:
            entries = list(os.scandir(self.folder))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [(e.name, e.stat().st_mtime_ns) for e in entries
                if self.pattern.search(e.name) and e.is_file()]

    def scan(self) -> list[tuple[int, Any, CompletionTable | None]]:
        out = []
        for name, mtime in sorted(self._files(), key=lambda x: x[1]):
            if self._seen.get(name) == mtime:
                continue
            step = self.step_of(name)
            table = self.load(name) if step is None else None
            if step is None and table is None:
                continue  # still being written: tried again next scan
            self._seen[name] = mtime
            out.append((table.step if table is not None else step, name, table))
        return out

    def step_of(self, name: str) -> int | None:
        """The step a file holds, when its name says (else it is read to know)."""
        return None

    def load(self, name: str) -> CompletionTable | None:
        raise NotImplementedError


class ParquetReader(_FolderReader):
    """TRL's `output_dir/completions/completions_NNNNN.parquet` (full precision, every row)."""

    origin = "parquet"
    pattern = _PARQUET

    def step_of(self, name: str) -> int | None:
        m = _PARQUET.search(name)
        return int(m.group(1)) if m else None

    def load(self, name: str) -> CompletionTable | None:
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise CarlError("reading TRL's parquet completions needs pyarrow: "
                            "pip install 'carl-tui[parquet]'") from None
        try:
            records = pq.read_table(self.folder / name).to_pylist()
        except (OSError, ValueError):  # half written, or not parquet
            return None
        m = _PARQUET.search(name)
        step = int(m.group(1)) if m else None
        return from_records(step, records, "parquet")


class WandbTableReader(_FolderReader):
    """A W&B run's table files (`files/media/table/completions_<n>_<hash>.table.json`)."""

    origin = "wandb"
    pattern = re.compile(r"^completions_\d+_[0-9a-f]+\.table\.json$")

    def load(self, name: str) -> CompletionTable | None:
        try:
            obj = json.loads((self.folder / name).read_bytes())
        except (OSError, ValueError):
            return None
        cols, data = obj.get("columns"), obj.get("data")
        if not isinstance(cols, list) or not isinstance(data, list):
            return None
        records = [dict(zip(cols, row)) for row in data if isinstance(row, list)]
        return from_records(None, records, "wandb")
