"""The phases of a run, stage by stage.

The classifier reads a progress metric and the entropy. Which progress metric
depends on what the run is doing at each step: token accuracy while it logs
one (SFT), the task reward while it logs rewards but no accuracy (GRPO, PPO;
never a reward that includes CARL, see `roles`). A run that goes from SFT to
GRPO (the demo, SFT -> GRPO pipelines) therefore has two stages, and each
stage gets its own classifier starting at its first step: GRPO's reward
starts its own baseline instead of being read against SFT's accuracy.

The stage of a row is read from the row itself (which metric it logged), so
it does not depend on markers arriving in order with the metrics.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from carl_tui import metric_names as mn
from carl_tui.coherence.phases import ACCURACY_CEILING, PhaseClassifier, PhaseSettings, Said
from carl_tui.store import roles

ACCURACY_STAGE = "accuracy"
REWARD_STAGE = "reward"
_KIND_CODE = {ACCURACY_STAGE: 1, REWARD_STAGE: 2}


@dataclass
class Stage:
    kind: str  # ACCURACY_STAGE or REWARD_STAGE
    start_step: int
    metric: str  # what the progress metric is, e.g. "mean_token_accuracy"
    classifier: PhaseClassifier = field(default_factory=PhaseClassifier)


class PhaseTrack:
    def __init__(self, gate_metric: str = mn.ACCURACY,
                 settings: PhaseSettings | None = None) -> None:
        self.stages: list[Stage] = []
        self.settings = settings  # its classifiers' (None: the method's own)
        self.gate_metric = gate_metric  # the metric the phase-transition gate reads
        self.vocab_size: int | None = None  # the run's, once known (phi from entropy)

    @property
    def current(self) -> Stage | None:
        return self.stages[-1] if self.stages else None

    def add_batch(
        self, steps: np.ndarray, cols: Mapping[str, np.ndarray], task: np.ndarray,
        gate: tuple[str, int] | None = None,
    ) -> None:
        """Feed a batch; `gate` is (metric, step) once the phase-transition gate fired
        (on this batch's rows or before): the stage whose progress metric the gate reads
        is crystallised or later from that step on."""
        n = steps.shape[0]
        nan = np.full(n, np.nan)
        acc = cols.get(mn.ACCURACY, nan)
        entropy = cols.get(mn.ENTROPY, nan)
        kind = np.where(~np.isnan(acc), 1, np.where(~np.isnan(task), 2, 0))
        progress = np.where(kind == 1, acc, task)
        if not (kind > 0).any() and np.isnan(entropy).all():
            return
        # Carry each row's stage forward over rows that logged neither metric;
        # rows before any stage is known join the first one that follows.
        last = 0 if self.current is None else _KIND_CODE[self.current.kind]
        idx = np.maximum.accumulate(np.where(kind > 0, np.arange(n), -1))
        carried = np.where(idx >= 0, kind[np.maximum(idx, 0)], last)
        if (carried == 0).any():
            known = kind[kind > 0]
            carried[carried == 0] = known[0] if known.size else 1
        cuts = np.flatnonzero(np.diff(np.concatenate([[last], carried])) != 0)
        bounds = sorted({0, n, *cuts.tolist()})
        for a, b in itertools.pairwise(bounds):
            name = ACCURACY_STAGE if carried[a] == 1 else REWARD_STAGE
            if self.current is None or self.current.kind != name:
                if self.current is not None:
                    self.current.classifier.stage_ended()
                ceiling = ACCURACY_CEILING if name == ACCURACY_STAGE else math.inf
                self.stages.append(Stage(name, int(steps[a]), "", PhaseClassifier(
                    self.settings, ceiling=ceiling)))
            st = self.current
            if not st.metric:
                if name == REWARD_STAGE:
                    st.metric = _task_label(cols)
                elif not np.isnan(acc[a:b]).all():
                    st.metric = mn.ACCURACY
            st.classifier.gate_watched = st.metric == self.gate_metric
            st.classifier.vocab_size = self.vocab_size
            if gate is not None and gate[0] == st.metric and gate[1] >= st.start_step:
                st.classifier.gate_fired(gate[1])
            st.classifier.update_many(steps[a:b], progress[a:b], entropy[a:b])

    def training_ended(self) -> None:
        """The run's training ended (its end-of-training summary was read, after its rows):
        the current stage ended with it (`PhaseClassifier.stage_ended`)."""
        if self.current is not None:
            self.current.classifier.stage_ended()

    def said(self) -> list[tuple[str, int, Said]]:
        """(stage kind, stage index, phase as said) over every stage, in order, corrected
        ones too (see `coherence.phases.Said`)."""
        return [(st.kind, i, s) for i, st in enumerate(self.stages) for s in st.classifier.said]

    def dated(self) -> list[tuple[str, int, int, str]]:
        """(phase, first step, the step it was seen at, stage kind) over every stage."""
        out = []
        for st in self.stages:
            out.extend((s.phase.value, s.from_step, s.seen_at, st.kind)
                       for s in st.classifier.said if s.corrected_at is None)
        return out

    def timeline(self) -> list[tuple[str, int, str]]:
        """(phase, first step, stage kind) over every stage, in order."""
        out = []
        for st in self.stages:
            out.extend((p.value, int(s), st.kind) for p, s in st.classifier.timeline)
        return out


def _task_label(cols: Mapping[str, np.ndarray]) -> str:
    return roles.task_metric_label(cols, carl_known=bool(roles.carl_reward_names(cols)))
