"""`CompletionLog`: every logged step's completions, in bounded memory.

Readers (one per place TRL puts completions) say which steps they hold and
where (`scan`: new `(step, locator, table or None)` since the last scan), and
read one step back on demand (`load(locator)`). The log keeps the index of
every step (a step and a small locator each: a byte range, a row id, a file)
and only the tables of the last `keep` steps looked at or logged; an older step
is read again from its reader when it is asked for.

Several readers may hold the same step (TRL's parquet file and its printed
sample): the one listed first wins (full precision before the printed form).
A step logged twice (the Trainer logs again at the end of training) keeps its
newest table.
"""

from __future__ import annotations

import bisect
from collections import Counter, OrderedDict
from typing import Any, Protocol

from carl_tui.completions.model import CompletionTable
from carl_tui.redact import redact

DEFAULT_KEEP = 32


class Reader(Protocol):
    origin: str
    skipped: Counter[str]  # lines (rows) left out, by reason: counted, never silent

    def scan(self) -> list[tuple[int, Any, CompletionTable | None]]: ...

    def load(self, locator: Any) -> CompletionTable | None: ...


class CompletionLog:
    """The completions of one run from `readers` (in order of preference)."""

    def __init__(self, readers: list[Reader], keep: int = DEFAULT_KEEP):
        self.readers = list(readers)
        self.keep = max(1, int(keep))
        self._where: dict[int, tuple[int, Any]] = {}  # step -> (reader index, locator)
        self._steps: list[int] = []
        self._cache: OrderedDict[int, CompletionTable] = OrderedDict()
        self.errors: list[str] = []
        self.loads = 0  # tables read back from a reader (tests, benchmarks)

    @property
    def steps(self) -> list[int]:
        """Every step with completions, ascending."""
        return list(self._steps)

    def __len__(self) -> int:
        return len(self._steps)

    def poll(self) -> int:
        """Scan every reader for new tables; returns how many steps are new or changed.
        A reader that fails says why in `errors` (the others go on)."""
        changed = 0
        self.errors = []
        for i, reader in enumerate(self.readers):
            try:
                found = reader.scan()
            except Exception as exc:  # noqa: BLE001 - one reader's failure is shown, not raised

                self.errors.append(redact(f"{reader.origin}: {exc}"))
                continue
            for step, locator, table in found:
                changed += self._add(i, int(step), locator, table)
        return changed

    def _add(self, i: int, step: int, locator: Any, table: CompletionTable | None) -> int:
        have = self._where.get(step)
        if have is not None and have[0] < i:
            return 0  # a preferred reader holds this step
        if have is None:
            bisect.insort(self._steps, step)
        self._where[step] = (i, locator)
        self._cache.pop(step, None)
        if table is not None:
            self._remember(step, table)
        return 1

    def _remember(self, step: int, table: CompletionTable) -> None:
        self._cache[step] = table
        self._cache.move_to_end(step)
        while len(self._cache) > self.keep:
            self._cache.popitem(last=False)

    def skipped(self) -> Counter[str]:
        """What the readers left out, by reason (a line too long, not UTF-8, not JSON)."""
        total: Counter[str] = Counter()
        for reader in self.readers:
            total.update(reader.skipped)
        return total

    def skipped_text(self) -> str:
        """`skipped 2 completions lines (1 not UTF-8, 1 line too long)`, or ""."""
        counts = self.skipped()
        n = sum(counts.values())
        if not n:
            return ""
        why = ", ".join(f"{k} {reason}" for reason, k in sorted(counts.items()))
        return f"skipped {n} completions line{'s' if n != 1 else ''} ({why})"

    def cached_steps(self) -> list[int]:
        return sorted(self._cache)

    def table(self, step: int) -> CompletionTable | None:
        """The table of `step` (read back from its reader if it is not in memory)."""
        if step in self._cache:
            self._cache.move_to_end(step)
            return self._cache[step]
        where = self._where.get(step)
        if where is None:
            return None
        table = self.readers[where[0]].load(where[1])
        self.loads += 1
        if table is not None:
            self._remember(step, table)
        return table

    def close(self) -> None:
        """Close what the readers hold open (a local Trackio database's connection)."""
        for reader in self.readers:
            close = getattr(reader, "close", None)
            if close is not None:
                close()

    def origin(self, step: int) -> str:
        where = self._where.get(step)
        return self.readers[where[0]].origin if where else ""
