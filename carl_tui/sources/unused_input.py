"""What a source read but could not use, by reason, and what it read but does not plot.

Every source keeps one `UnusedInput`:

- `skip(reason, example)`: input that is bad (a malformed line, a value that
  is not a finite number, a step that is not an integer, a record whose CRC
  fails). Counted per reason, with the first example kept (cut to
  `EXAMPLE_CHARS`; the status bar redacts it before showing it). `total` is
  what the status bar calls "skipped".
- `note(kind)`: input that is valid but not plotted (Trackio media and
  tables, TensorBoard histograms, images and text). Never an error.

Reasons are short fixed phrases ("not JSON", "value not a finite number",
"invalid step", ...), so counts group well; the example says what exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

from carl_tui.redact import redact

EXAMPLE_CHARS = 120


@dataclass(frozen=True, slots=True)
class SkipReason:
    reason: str
    count: int
    example: str


class UnusedInput:
    __slots__ = ("_examples", "_notes", "_reasons", "total")

    def __init__(self) -> None:
        self.total = 0
        self._reasons: dict[str, int] = {}
        self._examples: dict[str, str] = {}
        self._notes: dict[str, int] = {}

    def skip(self, reason: str, example: object = "", n: int = 1) -> None:
        """Count `n` skipped items for `reason`; the first example is kept."""
        if n <= 0:
            return
        self.total += n
        self._reasons[reason] = self._reasons.get(reason, 0) + n
        if reason not in self._examples:
            text = example if isinstance(example, str) else _short_repr(example)
            self._examples[reason] = _cut(redact(text))  # masked before it is cut short

    def note(self, kind: str, n: int = 1) -> None:
        """Count `n` valid items of `kind` that the dashboard does not plot."""
        if n > 0:
            self._notes[kind] = self._notes.get(kind, 0) + n

    def reasons(self) -> tuple[SkipReason, ...]:
        """Skip reasons, most frequent first."""
        items = sorted(self._reasons.items(), key=lambda kv: (-kv[1], kv[0]))
        return tuple(SkipReason(r, c, self._examples.get(r, "")) for r, c in items)

    def notes(self) -> tuple[tuple[str, int], ...]:
        return tuple(sorted(self._notes.items()))

    def merge(self, other: UnusedInput) -> None:
        for r in other.reasons():
            self.skip(r.reason, r.example, r.count)
        for kind, n in other.notes():
            self.note(kind, n)


def _short_repr(obj: object) -> str:
    try:
        return repr(obj)
    except Exception:  # noqa: BLE001 - an example must never break counting
        return f"<{type(obj).__name__}>"


def _cut(text: str) -> str:
    text = text.replace("\r", "\\r").replace("\n", "\\n")
    return text if len(text) <= EXAMPLE_CHARS else text[: EXAMPLE_CHARS - 1] + "…"
