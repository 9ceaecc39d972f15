"""Readers of completions kept in files: a Trainer's stdout, the CARL stream, TRL's
parquet folder, a W&B run's table files.

Each reads what is new since its last scan and remembers where each step's
table is (a byte range, a file), so that an old step is read again on demand
rather than kept in memory. The growing files are read by the sources' one
`FileFollower` (truncation, rotation, partial last lines, long lines): the
stream's completions lines are those its metrics source marked as it read them.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from carl_tui.completions.model import CompletionTable, from_records, make_row
from carl_tui.completions.stdout import parse_panel
from carl_tui.errors import CarlError, SourceError
from carl_tui.sources.base import WAITING
from carl_tui.sources.line_marks import (
    LINE_TOO_LONG,
    NOT_JSON,  # noqa: F401  (why a completions line is skipped: said here too)
    NOT_UTF8,  # noqa: F401
    Marks,
    PanelMarks,
    completions_marks,
)
from carl_tui.sources.tail import FileFollower, FollowRead

#: Bytes read from a growing file per scan.
CHUNK = 8 << 20
#: A line longer than a read is read whole up to this size (a printed panel, not ended,
#: is held up to it too); a longer one is skipped and counted. What follows is read.
MAX_LINE = 512 << 20



def _waited(follower: FileFollower) -> FollowRead | None:
    """One read of `follower`; None while its file is missing (not there yet, deleted)."""
    try:
        return follower.read()
    except SourceError as exc:
        if exc.kind == WAITING:
            return None
        raise


def _reads(follower: FileFollower, skipped: Counter[str]) -> Iterator[FollowRead]:
    """`follower`'s reads up to what the file holds now; a line past its limit counted."""
    while (got := _waited(follower)) is not None:
        skipped.update(why for why, _ in got.dropped if why == LINE_TOO_LONG)
        yield got
        if not got.backlog:
            return


class _MarkedReader:
    """The tables a followed file holds, from its `Marks`: those the source reading the
    file marked as it read it (the file is read once), or, given a path (`export`, a
    replay, tests), those it marks reading the file with a `FileFollower` of its own."""

    origin = ""

    def __init__(self, source: str | Path | Marks):
        self._own: FileFollower | None = None
        if isinstance(source, Marks):
            self.marks = source
        else:
            self._own = FileFollower(source, max_bytes_per_poll=CHUNK, max_line_bytes=MAX_LINE)
            self.marks = self._marks_of(self._own)
        self.skipped: Counter[str] = Counter()  # lines left out, by reason
        self._taken = 0  # marks taken so far

    def _marks_of(self, follower: FileFollower) -> Marks:
        raise NotImplementedError

    def scan(self) -> list[tuple[int, Any, CompletionTable | None]]:
        for got in _reads(self._own, self.skipped) if self._own is not None else ():
            self.marks.feed(got)
        new = self.marks.since(self._taken)
        self._taken += len(new)
        out = []
        for locator, step in new:
            if isinstance(step, str):
                self.skipped[step] += 1
            elif step is not None:  # the table is made when it is looked at
                out.append((step, locator, None))
        return out


class StdoutReader(_MarkedReader):
    """The rich tables printed in a Trainer's stdout (`train.log`, a job's log): indexed
    (generation, start, end), parsed (and redacted) when looked at."""

    origin = "stdout"

    def _marks_of(self, follower: FileFollower) -> Marks:
        return PanelMarks(follower, MAX_LINE)

    def load(self, locator: tuple[int, int, int]) -> CompletionTable | None:
        text = self.marks.line(locator)
        return None if text is None else parse_panel(text.decode("utf-8", "replace"))


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


class StreamReader(_MarkedReader):
    """The `completions` lines of a JSONL stream (the CARL callback's, a recording)."""

    origin = "stream"

    def _marks_of(self, follower: FileFollower) -> Marks:
        return completions_marks(follower)

    def load(self, locator: tuple[int, int, int]) -> CompletionTable | None:
        line = self.marks.line(locator)
        return None if line is None else _table_of_line(line)


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
            import pyarrow.parquet as pq  # lazy: the optional parquet extra
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
