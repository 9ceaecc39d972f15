"""Where the parts of a followed file that a second reader wants are: its one read, shared.

The completions view reads the `completions` lines of the JSONL stream the metrics come
from, and the tables TRL prints in the Trainer log the metrics come from. Rather than
tail the file a second time, the source that reads it feeds each `FollowRead` here
(`LineMarks`: the lines holding every one of `needles`; `PanelMarks`: the printed
tables): each is kept as a locator (generation, start, end) and a small key (a step, or
why it cannot be used), never as text. A reader takes the marks after the last it took
(`since`) and reads one back on demand (`line`, through the same `FileFollower`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from carl_tui.sources.printed_panels import find_panels
from carl_tui.sources.tail import FileFollower, FollowRead

NOT_UTF8 = "not UTF-8"
NOT_JSON = "not JSON"
LINE_TOO_LONG = "line too long"

Mark = tuple[tuple[int, int, int], Any]  # ((generation, start, end), key)


class Marks:
    """What a reader of a followed file marked in it, oldest first (see the module doc);
    `feed` is the kind's."""

    def __init__(self, follower: FileFollower):
        self.follower = follower
        self._marks: list[Mark] = []
        self._lock = threading.Lock()

    def feed(self, got: FollowRead) -> None:
        raise NotImplementedError

    def _add(self, found: list[Mark]) -> None:
        if found:
            with self._lock:
                self._marks.extend(found)

    def since(self, count: int) -> list[Mark]:
        """The marks after the first `count`."""
        with self._lock:
            return self._marks[count:]

    def line(self, locator: tuple[int, int, int]) -> bytes | None:
        """What a mark holds, read again; None when its file is no longer the one followed."""
        return self.follower.read_range(*locator)


class LineMarks(Marks):
    """The lines that hold every one of `needles`, each with `key(line)`."""

    def __init__(self, follower: FileFollower, needles: tuple[bytes, ...],
                 key: Callable[[bytes], Any]):
        super().__init__(follower)
        self.needles = needles
        self.key = key

    def feed(self, got: FollowRead) -> None:
        """Mark the lines of one read (searched in its runs of bytes: a line that holds no
        needle costs no Python step)."""
        first, *rest = self.needles
        found: list[Mark] = []
        for off, data in got.runs:
            at = data.find(first)
            while at >= 0:
                start = data.rfind(b"\n", 0, at) + 1
                end = data.find(b"\n", at)
                end = len(data) if end < 0 else end
                line = data[start:end]
                if all(n in line for n in rest):
                    found.append(((got.generation, off + start, off + end), self.key(line)))
                at = data.find(first, end)
        self._add(found)


class PanelMarks(Marks):
    """TRL's printed completions tables in a Trainer's stdout, each with its step; a panel
    begun in one read is held (up to `max_bytes`) until a later one ends it. One never
    ended within that is marked with the reason `LINE_TOO_LONG` instead."""

    def __init__(self, follower: FileFollower, max_bytes: int = 512 << 20):
        super().__init__(follower)
        self.max_bytes = max_bytes
        self._held = b""  # a panel begun in the lines read so far, not ended yet
        self._held_end = (0, 0)  # (generation, offset) just past `_held`

    def feed(self, got: FollowRead) -> None:
        for off, data in got.runs:
            self._add(self._index(got.generation, off, data + b"\n"))

    def _index(self, gen: int, off: int, data: bytes) -> list[Mark]:
        if self._held and self._held_end == (gen, off):  # the panel goes on here
            data, off = self._held + data, off - len(self._held)
        panels, consumed = find_panels(data, off)
        self._held, self._held_end = data[consumed:], (gen, off + len(data))
        found: list[Mark] = [((gen, start, end), step) for start, end, step in panels
                             if b"Prompt" in data[start - off:end - off]]
        if len(self._held) > self.max_bytes:  # never ended: given up
            found.append(((gen, off + consumed, off + len(data)), LINE_TOO_LONG))
            self._held = b""
        return found


def completions_step(line: bytes) -> int | str | None:
    """The step of a completions line; why it cannot be read (a reason) when it cannot;
    None when it is not a completions line after all."""
    try:
        obj = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError:
        return NOT_UTF8
    except (ValueError, RecursionError):
        return NOT_JSON
    if not isinstance(obj, dict) or obj.get("event") != "completions":
        return None
    step = obj.get("step")
    ok = isinstance(step, int) and not isinstance(step, bool) and step >= 0
    return step if ok and isinstance(obj.get("rows"), list) else None


def completions_marks(follower: FileFollower) -> LineMarks:
    """The completions lines of a stream `follower` reads (fed by whoever reads it)."""
    return LineMarks(follower, (b'"completions"', b'"event"'), completions_step)
