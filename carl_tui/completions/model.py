"""One completion and one step's table of them.

Text passes through `logged_text()` as a row is made (`redact()`, then `clean_text()`,
the cleaning every other logged text gets): nothing downstream (the view, the
export, a served browser's terminal) sees a secret a prompt or completion held, or
an escape sequence it carried (OSC 52, `ESC[2J`, a DSR query, a C1 control).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from carl_tui.metric_names import finite_number
from carl_tui.redact import redact
from carl_tui.sources.rows import clean_text

#: Columns of TRL's table that are not rewards.
TEXT_COLUMNS = ("prompt", "completion")
NOT_REWARDS = frozenset({"step", "prompt", "completion", "advantage", "carl", "image",
                         "images"})


def text_of(entry: Any) -> str:
    """A prompt or completion as text: a conversation is its messages, `ROLE: content`."""
    if isinstance(entry, str):
        return entry
    if isinstance(entry, (list, tuple)):
        parts = []
        for m in entry:
            if isinstance(m, Mapping):
                content = m.get("content", "")
                if isinstance(content, list):  # typed blocks: keep the text ones
                    content = "".join(str(b.get("text", "")) for b in content
                                      if isinstance(b, Mapping))
                role = str(m.get("role", "")).upper()
                parts.append(f"{role}: {content}" if role else str(content))
            else:
                parts.append(str(m))
        return "\n".join(parts)
    return "" if entry is None else str(entry)


@dataclass(frozen=True, slots=True)
class Completion:
    """One completion: its prompt, the text, each reward function's score, the advantage,
    and (from the CARL stream) its CARL score."""

    prompt: str
    completion: str
    rewards: tuple[tuple[str, float | None], ...]
    advantage: float | None = None
    carl: float | None = None

    def reward(self, name: str) -> float | None:
        return dict(self.rewards).get(name)

    @property
    def total(self) -> float | None:
        """The sum of the rewards that are known (GRPO sums them), None if none is."""
        vals = [v for _, v in self.rewards if v is not None]
        return sum(vals) if vals else None


def logged_text(text: str) -> str:
    """Logged text as it may be shown: secrets masked, control characters (but tab and
    newline) replaced by U+FFFD."""
    return clean_text(redact(text))


def make_row(prompt: Any, completion: Any, rewards: Mapping[str, Any],
             advantage: Any = None, carl: Any = None) -> Completion:
    """A `Completion` from raw values: text (reward names too) made `logged_text`,
    numbers checked."""
    return Completion(
        prompt=logged_text(text_of(prompt)),
        completion=logged_text(text_of(completion)),
        rewards=tuple((logged_text(str(k)), finite_number(v)) for k, v in rewards.items()),
        advantage=finite_number(advantage),
        carl=finite_number(carl),
    )


@dataclass(frozen=True, slots=True)
class CompletionTable:
    """The completions logged at one step. `origin` names where they were read
    ("stdout", "parquet", "stream", "trackio", "wandb"); `decimals` is the
    precision the numbers were printed with (stdout: 2), None for full precision."""

    step: int
    rows: tuple[Completion, ...]
    origin: str
    decimals: int | None = None

    @property
    def reward_names(self) -> tuple[str, ...]:
        names: dict[str, None] = {}
        for r in self.rows:
            for k, _ in r.rewards:
                names.setdefault(k, None)
        return tuple(names)


def from_records(step: int | None, records: Iterable[Mapping[str, Any]],
                 origin: str) -> CompletionTable | None:
    """A table from TRL's rows (`step`, `prompt`, `completion`, one column per reward
    function, extra columns, `advantage`): numeric columns other than step and
    advantage are the rewards; text columns (log_extra) are left out. `step`
    defaults to the rows' own `step` column. None without rows or a step."""
    records = [r for r in records if isinstance(r, Mapping)]
    if not records:
        return None
    if step is None:
        step = _int(records[0].get("step"))
        if step is None:
            return None
    names = [k for k in records[0] if k not in NOT_REWARDS and _numeric_column(records, k)]
    rows = tuple(
        make_row(r.get("prompt", ""), r.get("completion", ""),
                 {k: r.get(k) for k in names}, r.get("advantage"), r.get("carl"))
        for r in records
    )
    return CompletionTable(step=int(step), rows=rows, origin=origin)


def _numeric_column(records: list[Mapping[str, Any]], key: str) -> bool:
    """Every value of `key` is a number (not a bool) or missing (None, NaN)."""
    for r in records:
        v = r.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            return False
    return True


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    f = finite_number(value)
    return int(f) if f is not None and f.is_integer() and f >= 0 else None
