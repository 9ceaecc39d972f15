"""Steps of a Trainer log without progress bars (`disable_tqdm`), from its end line.

Without bars nothing in the log says a dict's step while training runs: the dicts
are estimates from the `logging_steps` hint. When the training's summary arrives,
it says how many steps the training took, `train_runtime` x
`train_steps_per_second` (both printed with 4 significant digits: exact to a step
below some thousands of steps), and its `epoch` says how many epochs that was. A
dict's `epoch` is proportional to its step (`global_step / steps per epoch`), so
each dict held since the training began gets `epoch x steps / final epoch`,
snapped to the training's logging cadence when one shows (the differences of the
placed steps agree), and the last dict never passes the final step.

`place` returns the steps (the offset of the trainings before added) or None
when the summary or the epochs cannot say them (the dicts then keep the estimates).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Sequence

from carl_tui.sources.trainer_steps import Held


def training_steps(values: dict[str, float]) -> int | None:
    """Steps of the training whose summary this is (None when it does not say)."""
    runtime = values.get("train_runtime")
    rate = values.get("train_steps_per_second")
    if runtime is None or rate is None or not (runtime > 0 and rate > 0):
        return None
    total = runtime * rate
    return round(total) if math.isfinite(total) and 1 <= total < 2**62 else None


def _cadence(raw: list[float]) -> int | None:
    """The commonest rounded difference between consecutive placed steps, when most
    differences agree with it (None: no cadence shows)."""
    diffs = [round(b - a) for a, b in itertools.pairwise(raw) if b > a]
    if len(diffs) < 2:
        return None
    step, n = Counter(diffs).most_common(1)[0]
    return step if step >= 1 and n * 2 > len(diffs) else None


def place(held: Sequence[Held], offset: int) -> list[int] | None:
    """The steps of `held` (dicts of one training, its summary last)."""
    if not held or held[-1].kind != "summary":
        return None
    end = held[-1]
    total = training_steps(end.values)
    final = end.values.get("epoch")
    if total is None or final is None or not final > 0:
        return None
    per_epoch = total / final
    raw: list[float | None] = [
        None if h.epoch is None else min(h.epoch[0] * per_epoch, total) for h in held[:-1]
    ]
    known = [r for r, h in zip(raw, held) if r is not None and h.kind == "train"]
    cadence = _cadence(known)
    steps: list[int] = []
    last = 0
    for r in raw:
        if r is None:
            steps.append(last)  # no epoch: beside the dict before it
            continue
        step = round(r)
        if cadence is not None and cadence > 1:
            snapped = round(r / cadence) * cadence
            if abs(snapped - r) <= max(1.0, cadence / 4) and snapped >= 1:
                step = min(snapped, total)
        last = max(1, step)
        steps.append(last)
    steps.append(total)
    return [offset + s for s in steps]
