"""The fleet table's filter: `phase:crystallisation state:live lr>=1e-4 name~grpo`.

Terms are separated by spaces and all must hold (AND). Each term is `key OP value`:

- `key:value`: equal (case-insensitive text; a number equals a number: `seed:3`);
- `key~text`: the value contains the text (case-insensitive);
- `key>=n`, `key<=n`, `key>n`, `key<n`, `key=n`, `key!=n`: numeric comparison.

A key is one of the fleet's filterable columns (`fleet_columns.py`: name, source, state,
phase, step, ...) or a key of a run's config (`lr`, `learning_rate`, `seed`, ...). A row
without the key does not match. A value with spaces is quoted: `model:"tiny gpt"`.

`parse_filter` raises `FilterError` with one sentence saying what is wrong; the table
keeps the last good filter meanwhile. No Textual here.
"""

from __future__ import annotations

import math
import operator
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from carl_tui.store.fleet import FleetRow
from carl_tui.store.fleet_columns import filter_fields


class FilterError(ValueError):
    """A filter that cannot be read; its message says why, in one sentence."""


_NUMERIC = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt,
            "=": operator.eq, "!=": operator.ne}
_TERM = re.compile(r"^([^\s:~<>=!]+)(>=|<=|!=|:|~|>|<|=)(.*)$", re.DOTALL)


@dataclass(frozen=True)
class Term:
    key: str
    op: str
    value: str
    number: float | None  # the value as a number, where it is one

    def matches(self, row: FleetRow) -> bool:
        have = value_of(row, self.key)
        if isinstance(have, tuple):  # several values (the health flags): any of them
            return any(self._holds(v) for v in have)
        return self._holds(have)

    def _holds(self, have: Any) -> bool:
        if have is None:
            return False
        if self.op == "~":
            return self.value.lower() in str(have).lower()
        if self.op == ":":
            n = as_number(have)
            if self.number is not None and n is not None:
                return n == self.number
            return str(have).lower() == self.value.lower()
        n = as_number(have)
        return n is not None and _NUMERIC[self.op](n, self.number)


@dataclass(frozen=True)
class FleetFilter:
    text: str
    terms: tuple[Term, ...] = ()

    def matches(self, row: FleetRow) -> bool:
        return all(t.matches(row) for t in self.terms)

    def __bool__(self) -> bool:
        return bool(self.terms)


def value_of(row: FleetRow, key: str) -> Any:
    """The row's field `key`, else its config's `key` (None where it has neither)."""
    get = filter_fields().get(key)
    if get is not None:
        return get(row)
    return row.config.get(key)


def as_number(v: Any) -> float | None:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v) if not math.isnan(v) else None
    if isinstance(v, str):
        try:
            n = float(v)
        except ValueError:
            return None
        return None if math.isnan(n) else n
    return None


def parse_filter(text: str, config_keys: Iterable[str] = ()) -> FleetFilter:
    """The filter `text` says; `config_keys`: the config keys the runs have (a key that
    is neither a field nor one of them is refused, with the known keys named)."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise FilterError(f"cannot read the filter: {exc}") from None
    known = set(config_keys)
    fields = filter_fields()
    terms = []
    for word in words:
        m = _TERM.match(word)
        if m is None:
            raise FilterError(f"{word!r}: write key:value, key~text or key>=number "
                              "(e.g. state:live lr>=1e-4 name~grpo)")
        key, op, value = m.groups()
        if key not in fields and key not in known:
            names = ", ".join([*fields, *sorted(k for k in known if not k.startswith("_"))])
            raise FilterError(f"unknown key {key!r} (known: {names})")
        if not value:
            raise FilterError(f"{word!r}: no value after {op!r}")
        number = as_number(value)
        if op in _NUMERIC and number is None:
            raise FilterError(f"{word!r}: {op} compares numbers, and {value!r} is not one")
        terms.append(Term(key, op, value, number))
    return FleetFilter(text, tuple(terms))
