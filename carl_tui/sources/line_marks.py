"""Where the lines of a followed file that a second reader wants are: its one read, shared.

The completions view reads the `completions` lines of the JSONL stream the metrics come
from. Rather than tail the file a second time, the source that reads it feeds each
`FollowRead` here: the lines holding every one of `needles` are kept as a locator
(generation, start, end) and a small key (`key(line)`: a step, or why the line cannot
be used), never as text. A reader takes the marks after the last it took (`since`) and
reads one line back on demand (`line`, through the same `FileFollower`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from carl_tui.sources.tail import FileFollower, FollowRead

NOT_UTF8 = "not UTF-8"
NOT_JSON = "not JSON"

Mark = tuple[tuple[int, int, int], Any]  # ((generation, start, end), key)


class LineMarks:
    """The marked lines of what `follower` read, oldest first (see the module doc)."""

    def __init__(self, follower: FileFollower, needles: tuple[bytes, ...],
                 key: Callable[[bytes], Any]):
        self.follower = follower
        self.needles = needles
        self.key = key
        self._marks: list[Mark] = []
        self._lock = threading.Lock()

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
        if found:
            with self._lock:
                self._marks.extend(found)

    def since(self, count: int) -> list[Mark]:
        """The marks after the first `count`."""
        with self._lock:
            return self._marks[count:]

    def line(self, locator: tuple[int, int, int]) -> bytes | None:
        """A marked line read again; None when its file is no longer the one followed."""
        return self.follower.read_range(*locator)


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
