"""A run's judgements: what the dashboard reads from its metrics, in order (the
phase-transition gate, the cascade, the phases, the alerts and the health flags), and
the events they record. Each event is kept (`summary --json` prints them) and told to
the user; a health flag is an event of its flag's kind (`truncation`, ...), and the
alerts' NaN and divergence are kept as flags too (`health.flags`)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np

from carl_tui import metric_names as mn
from carl_tui.coherence.gates import PhaseTransitionGate
from carl_tui.coherence.phases import Phase, Said
from carl_tui.events import Marker
from carl_tui.store import roles
from carl_tui.store.alerts import AlertWatch
from carl_tui.store.cascade import CascadeTracker
from carl_tui.store.health import ALERT_FLAGS, HealthWatch
from carl_tui.store.phases import PhaseTrack
from carl_tui.store.snapshot import RunEvent

MAX_EVENTS = 1000

#: (kind, step, text, severity) -> None: how an event is told to the user.
Tell = Callable[[str, "int | None", str, str], None]

_ALERT_SEVERITY = {"info": "information", "warn": "warning", "warning": "warning",
                   "error": "error"}


class RunJudgements:
    """The gate, cascade, phases and alerts of one run, fed its metrics in order, and
    the events they record (`events`; each one is also passed to `tell`)."""

    def __init__(self, gate_metric: str, tell: Tell) -> None:
        self.gate = PhaseTransitionGate(metric=gate_metric)
        self.cascade = CascadeTracker()
        self.phases = PhaseTrack(gate_metric)
        self.events: deque[RunEvent] = deque(maxlen=MAX_EVENTS)
        self.alerts = AlertWatch(self._alert)
        self.health = HealthWatch()
        self._tell = tell
        self._said_told: dict[tuple[int, int], bool] = {}  # (stage, index) -> corrected told
        self._phases_told: set[tuple[int, Phase, int]] = set()  # (stage, phase, seen at)
        self._cascade_announced = False

    def record(self, kind: str, step: int | None, text: str, severity: str) -> None:
        """Something the run's judgements record (summary --json) and the user is told."""
        self.note(kind, step, text, severity)
        self._tell(kind, step, text, severity)

    def _alert(self, kind: str, step: int | None, text: str, severity: str) -> None:
        """An alert: recorded, told, and kept as a flag when it is one (NaN, divergence)."""
        self.record(kind, step, text, severity)
        if kind in ALERT_FLAGS:
            self.health.add_alert(kind, step, text)

    def note(self, kind: str, step: int | None, text: str, severity: str) -> None:
        """Something the run's judgements record (summary --json, the events view) that is
        not news to announce."""
        self.events.append(RunEvent(kind, step, text, severity))

    def feed(self, steps: np.ndarray, cols: dict[str, np.ndarray], nonfinite: tuple = ()
             ) -> None:
        """A batch of the run's metrics (steps in order), through every reader."""
        nan = np.full(steps.shape[0], np.nan)
        entropy = cols.get(mn.ENTROPY, nan)
        gate_values = cols.get(self.gate.metric, nan)
        was_fired = self.gate.fired
        window_before = self.gate.window_values
        self.gate.update_many(steps, gate_values, entropy)
        if self.gate.fired and not was_fired:
            g = self.gate
            self.record(
                "phase_transition",
                g.trigger_step,
                f"Crystallised: {g.metric} held >= {g.threshold:g} "
                f"({_above_at_trigger(g, window_before, gate_values)}/{g.window} >= "
                f"{g.threshold:g}) at step {g.trigger_step}",
                "warning",
            )
        self.alerts.feed(steps, cols, nonfinite)
        self.cascade.add_batch(steps, cols)
        self._announce_cascade()
        task = roles.task_reward(cols, steps.shape[0], carl_known=self.cascade.has_carl)
        gate = (self.gate.metric, self.gate.trigger_step) if self.gate.fired else None
        self.phases.add_batch(steps, cols, task, gate)
        self._announce_phases()
        for flag in self.health.feed(steps, cols, task):
            self.record(flag.flag, flag.seen_at, flag.evidence.text, flag.severity)

    def cascade_marker(self, step: int) -> None:
        """The run says it switched the CARL reward on at `step`."""
        self.cascade.add_marker(step)
        self._announce_cascade()

    def run_alert(self, marker: Marker) -> None:
        """The run's own alert (trackio.alert(...))."""
        d = marker.detail
        sev = _ALERT_SEVERITY.get(str(d.get("level", "")).lower(), "warning")
        title, text = str(d.get("title", "") or ""), str(d.get("text", "") or "")
        words = ": ".join(x for x in (title, text) if x) or "alert"
        self.record("alert", marker.step, f"{words} (step {marker.step})", sev)

    def _announce_phases(self) -> None:
        """Each phase said, once, at the step it was seen, with the step it is dated from
        (a run's first baseline goes without saying); and each correction of one. A phase
        re-dated (the same phase said again from another step) is not news: its new date
        is said, not the correction."""
        said = self.phases.said()
        many = len(self.phases.stages) > 1
        counts: dict[int, int] = {}
        for kind, stage, s in said:
            i = counts[stage] = counts.get(stage, -1) + 1
            key = (stage, i)
            where = f" ({kind} stage)" if many else ""
            same = (stage, s.phase, s.seen_at)
            if key not in self._said_told:
                self._said_told[key] = s.corrected_at is not None
                if (i or stage) and same not in self._phases_told:
                    self.record("phase", s.seen_at, phase_words(s, where), "information")
                self._phases_told.add(same)
                if s.corrected_at is None:
                    continue
            elif self._said_told[key] or s.corrected_at is None:
                continue
            self._said_told[key] = True
            # the same phase said again in the reading that corrected it (dated elsewhere
            # now): not news, and the new date is said (a rule of the said entries alone,
            # so the events are the same however the rows are batched)
            redated = any(o.phase is s.phase and o is not s
                          and s.corrected_at in (o.seen_at, o.from_step)
                          or (o.phase is s.phase and o is not s and o.seen_at == s.seen_at)
                          for _kind, st2, o in said if st2 == stage)
            if s.phase is Phase.BASELINE or redated:  # no news
                continue
            self.note("phase", s.corrected_at,
                      f"Phase{where}: {s.phase.value} from step {s.from_step} corrected at "
                      f"step {s.corrected_at}: the curve reads otherwise now", "information")

    def _announce_cascade(self) -> None:
        state = self.cascade.state()
        if state.switched_at is None or self._cascade_announced:
            return
        self._cascade_announced = True
        how = " (derived from the task reward)" if state.source == "derived" else ""
        self.record(
            "cascade", state.switched_at,
            f"Cascade: CARL reward on from step {state.switched_at}{how}", "information",
        )


def phase_words(s: Said, where: str = "") -> str:
    """"Phase: transition since step 5 (seen at step 12)"."""
    seen = "" if s.seen_at == s.from_step else f" (seen at step {s.seen_at})"
    return f"Phase{where}: {s.phase.value} since step {s.from_step}{seen}"


def _above_at_trigger(gate: PhaseTransitionGate, before: list[float],
                      values: np.ndarray) -> int:
    """How many of the gate's window were above its threshold at the value that fired it
    (not at the end of the batch: the judgements read the same however rows were batched)."""
    v = np.asarray(values, dtype=np.float64)
    allv = np.concatenate([np.asarray(before, dtype=np.float64), v[np.isfinite(v)]])
    cs = np.concatenate([[0], np.cumsum(allv >= gate.threshold)])
    end = np.arange(len(before) + 1, allv.size + 1)
    count = cs[end] - cs[np.maximum(end - gate.window, 0)]
    hits = np.flatnonzero(count >= gate.min_above)
    return int(count[hits[0]]) if hits.size else gate.above
