"""What was skipped, said as what it was: "32 NaN or infinite values" is not "32 lines".

Sources count skipped input by reason (sources/unused_input.py): a value that is not a finite
number skips that value only, a malformed line its line, a damaged record its record.
`skipped_text` names the unit of each reason and sums the counts of one unit.
"""

from __future__ import annotations

from collections.abc import Iterable

# Reason (as the sources word it) -> what one count of it is (singular, plural).
_UNITS = {
    "value not a finite number": ("NaN or infinite value", "NaN or infinite values"),
    "value not a number": ("value not a number", "values not numbers"),
    "value not JSON": ("unreadable value", "unreadable values"),
    "scalar not readable": ("unreadable value", "unreadable values"),
    "invalid metric name": ("value with an invalid name", "values with invalid names"),
    "record CRC mismatch": ("damaged record", "damaged records"),
    "record not readable": ("damaged record", "damaged records"),
    "corrupt record": ("damaged record", "damaged records"),
    "not an event file": ("file not an event file", "files not event files"),
    "row metrics not a JSON object": ("malformed row", "malformed rows"),
    "": ("item", "items"),  # counted without a reason
}
_LINE = ("malformed line", "malformed lines")  # every other reason skips a line


def unit(reason: str) -> tuple[str, str]:
    return _UNITS.get(reason, _LINE)


def skipped_counts(reasons: Iterable[tuple[str, int]]) -> list[tuple[int, str]]:
    """[(count, "NaN or infinite values"), ...], largest first."""
    sums: dict[tuple[str, str], int] = {}
    for reason, count in reasons:
        if count > 0:
            u = unit(reason)
            sums[u] = sums.get(u, 0) + count
    return [(n, u[0] if n == 1 else u[1])
            for u, n in sorted(sums.items(), key=lambda kv: (-kv[1], kv[0]))]


def counts_text(counts: list[tuple[int, str]], most: int = 3) -> str:
    """"32 NaN or infinite values, 3 malformed lines" ("nothing" when nothing was)."""
    if not counts:
        return "nothing"
    shown = [f"{n} {what}" for n, what in counts[:most]]
    if len(counts) > most:
        shown.append(f"{sum(n for n, _ in counts[most:])} more")
    return ", ".join(shown)
