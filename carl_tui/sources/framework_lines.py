"""The metric lines verl and OpenRLHF print, read from a console log (a file, a job's log).

Both state their step, so every value is placed exactly (no bar is needed, as for the
Trainer's dicts in trainer_log.py, which calls these readers line by line).

- verl: `verl.utils.tracking.Tracking` with the "console" backend prints each step through
  `verl.utils.logger.aggregate_logger.LocalLogger`, whose `concat_dict_to_str` writes
  `step:N - key:value - key:value ...`: the values that are `numbers.Number`, each as
  `pprint.pformat` writes it (`0.5`, `12`, `np.float64(0.5)` under numpy 2, `True`).
  In verl's trainer the line often follows its `Training Progress` tqdm bar on the same
  line (the bar ends no line), and under Ray each line may start with the actor's prefix,
  `(TaskRunner pid=123) `.
- OpenRLHF: `PPOTrainer.fit` logs each step with `logger.info(f"✨ Global step {N}:
  {status}")` (a Python dict, after its logger's `INFO date time file:line] ` prefix),
  and an evaluation with `✨ Evaluation completed in H:MM:SS, global_step N,
  eval_metrics: {...}`. Its tqdm postfixes (`act_loss=..., reward=...` on the
  `Train epoch` bar) are per micro-batch, rounded, and say no step: not read.

The names each framework gives to what the panels and the health flags read are mapped
to the dashboard's in `metric_names.FRAMEWORK_NAMES`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction

VERL_BAR = "Training Progress"  # verl's trainer's tqdm bar: steps done, of the total
# Ray's prefix on the output of an actor or a task: "(TaskRunner pid=2954, ip=10.0.0.3) ".
RAY_PREFIX = re.compile(r"^\([^()\s]+ pid=\d+(?:, ip=[0-9A-Za-z.:-]+)?\) ?")

_VERL_HEAD = re.compile(r"step:(\d+)(?= - |\s*$)")
_OPENRLHF_STEP = re.compile(r"Global step (\d+): (\{.*?)\s*$")
_OPENRLHF_EVAL = re.compile(r"Evaluation completed in [^,]*, global_step (\d+), "
                            r"eval_metrics: (\{.*?)\s*$")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)")
# pformat of numpy's and torch's scalars: np.float64(0.5), numpy.int64(3), np.True_
_WRAPPED = re.compile(r"(?:np\.|numpy\.)?(?:float|int|uint)\d*\((.*)\)")
_SPECIAL = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
_NOT_METRICS = frozenset({"True", "False", "np.True_", "np.False_"})  # Numbers, not metrics


@dataclass(frozen=True, slots=True)
class FrameworkLine:
    """One metric line: its framework, step, values (keys as printed) and the parts
    that could not be read (a damaged line: the caller skips it and says so)."""

    framework: str  # "verl" or "openrlhf"
    step: int
    values: dict[str, float]
    unreadable: str = ""  # the first part not read; "" when the line is whole
    kind: str = "train"  # or "eval" (OpenRLHF's evaluation line)


def strip_ray_prefix(text: str) -> str:
    """The text without Ray's `(Actor pid=N) ` prefix."""
    return RAY_PREFIX.sub("", text, count=1) if text[:1] == "(" else text


def read_line(text: str, parse_dict) -> FrameworkLine | None:
    """A verl or OpenRLHF metric line (`text` stripped, escapes and Ray's prefix gone);
    None for any other text. `parse_dict` reads a printed Python dict (None: unreadable)."""
    if text.startswith("step:"):
        return read_verl(text)
    if "Global step " in text:
        return _read_openrlhf(_OPENRLHF_STEP.search(text), "train", parse_dict)
    if "eval_metrics: {" in text:
        return _read_openrlhf(_OPENRLHF_EVAL.search(text), "eval", parse_dict)
    return None


def read_verl(text: str) -> FrameworkLine | None:
    """`step:3 - actor/entropy:np.float64(1.2) - critic/score/mean:0.4` -> step 3 and its
    values; None unless the text opens with `step:<digits>`."""
    head = _VERL_HEAD.match(text)
    if head is None:
        return None
    values: dict[str, float] = {}
    rest = text[head.end():].strip()
    for part in rest.removeprefix("- ").split(" - ") if rest else ():
        key, colon, raw = part.rpartition(":")
        if not colon or not key.strip():
            return FrameworkLine("verl", int(head.group(1)), {}, part or text)
        value = _verl_value(raw.strip())
        if value is None:
            return FrameworkLine("verl", int(head.group(1)), {}, part)
        if not isinstance(value, bool):
            values[key.strip()] = value
    return FrameworkLine("verl", int(head.group(1)), values)


def _verl_value(raw: str) -> float | bool | None:
    """A number as pformat prints it; True for booleans (numbers, never metrics); None
    for anything else."""
    if raw in _NOT_METRICS:
        return True
    wrapped = _WRAPPED.fullmatch(raw)
    if wrapped is not None:
        raw = wrapped.group(1).strip()
    if raw in _SPECIAL:
        return _SPECIAL[raw]
    if _NUMBER.fullmatch(raw):
        return float(raw)
    if raw.startswith("Fraction(") and raw.endswith(")"):
        try:
            num, den = (int(x) for x in raw[9:-1].split(","))
            return float(Fraction(num, den))
        except (ValueError, ZeroDivisionError):
            return None
    if raw.startswith("Decimal('") and raw.endswith("')"):
        inner = raw[9:-2]
        return _SPECIAL.get(inner.lower(), float(inner) if _NUMBER.fullmatch(inner) else None)
    return None


def _read_openrlhf(match: re.Match[str] | None, kind: str, parse_dict) -> FrameworkLine | None:
    if match is None:
        return None
    step, text = int(match.group(1)), match.group(2)
    values = parse_dict(text)
    if values is None:
        return FrameworkLine("openrlhf", step, {}, text, kind)
    return FrameworkLine("openrlhf", step, values, "", kind)
