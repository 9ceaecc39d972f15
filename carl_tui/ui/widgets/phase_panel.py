"""The phase panel: current phase, where it began and when it was seen, gate progress,
peak entropy; `h` adds why the phase holds (its evidence in numbers)."""

from __future__ import annotations

import time
from itertools import pairwise
from typing import TYPE_CHECKING

from rich.console import Group
from rich.text import Text
from textual.widgets import Static

from carl_tui.ui.format import PROVISIONAL, short_value
from carl_tui.ui.widgets.text_table import PlainTable

if TYPE_CHECKING:  # pragma: no cover
    from carl_tui.store.snapshot import RunSnapshot

#: The phases in the order a run meets them; a plateau stands where crystallisation would.
PHASE_ORDER = ("baseline", "melting", "transition", "plateau", "crystallisation", "converged")


def _history_text(snap: RunSnapshot) -> str:
    """How much of a long history is read, while the phase is provisional."""
    if snap.history_read is None:
        return "reading the history"
    return f"history {int(100 * snap.history_read)}% read"


class PhasePanel(Static):
    """Renders the phase and gate state of one run snapshot."""

    DEFAULT_CSS = """
    PhasePanel { height: auto; padding: 0 1; }
    """

    evidence = False  # `h`: show why the phase holds
    now: float | None = None  # the clock the health row reads (`stalled`); None: time.time()

    def show(self, snap: RunSnapshot | None, now: float | None = None) -> None:
        self._snap = snap
        self.now = now
        self.update(self._render_snapshot(snap))

    def toggle_evidence(self) -> None:
        self.evidence = not self.evidence
        self.show(getattr(self, "_snap", None), self.now)

    def _color(self, phase: str) -> str:
        return self.app.theme_variables.get(f"phase-{phase}", "") or "bold"

    def _severity_color(self, severity: str) -> str:
        """A flag's colour by its severity (the status bar's: readable in every theme)."""
        var = HEALTH_COLORS.get(severity, "status-wait")
        try:
            variables = self.app.theme_variables
        except RuntimeError:  # drawn outside an app (a test, a report): no theme
            variables = {}
        return variables.get(var, "") or SEVERITY_FALLBACK.get(severity, "")

    def _render_snapshot(self, snap: RunSnapshot | None):
        if snap is None:
            return Text("no run yet", style="dim")
        return Group(self._title(snap), self._strip(snap.phase), self._rows(snap))

    def _title(self, snap: RunSnapshot) -> Text:
        """The phase now, where it began and when it was seen; the stage that ended."""
        phase = snap.phase
        title = Text()
        if phase.phase and phase.too_few and phase.phase == "baseline":
            title.append(f"phase: {phase.values} value{'s' if phase.values != 1 else ''}, "
                         "too few to tell", style="dim")
        elif phase.phase:
            style = f"bold reverse {self._color(phase.phase)}"
            title.append(f" {phase.phase.upper()} ", style=style)
            if phase.since_step is not None:
                title.append(f"  since step {phase.since_step}", style="dim")
            if phase.seen_at is not None and phase.seen_at != phase.since_step:
                title.append(f" · seen at step {phase.seen_at}", style="dim")
            ended = _last_ended_stage(phase)
            if ended:  # the stage before keeps its last phase beside this one's
                kind, last, since = ended
                title.append(f"  · {phase.stage} · {kind} ended ", style="dim")
                title.append(f"{last.upper()}@{since}", style=f"bold {self._color(last)}")
        elif phase.provisional:  # the preview's sample of this run is too thin for one
            title.append("phase: once more of the history is read", style="dim")
        else:
            title.append("phase: waiting for accuracy/entropy", style="dim")
        if phase.provisional:
            title.append(f"  {PROVISIONAL} provisional: {_history_text(snap)}", style="dim italic")
        return title

    def _strip(self, phase) -> Text:
        """The timeline as one line that wraps only between phases. A phase after the
        current one that was reached before is one the run went back from (the climb
        resumed): "↺", dim, at the step it was reached."""
        strip = Text()
        seen = dict(phase.timeline)
        now = PHASE_ORDER.index(phase.phase) if phase.phase in PHASE_ORDER else -1
        for i, name in enumerate(PHASE_ORDER):
            if i:
                strip.append(" → ", style="dim")
            left = name in seen and now >= 0 and i > now
            style = self._color(name) if name in seen and not left else "dim"
            mark = ("●" if name == phase.phase else "↺" if left
                    else "○" if name in seen else "·")
            at = f"@{seen[name]}" if name in seen else ""
            strip.append(f"{mark}{name}{at}", style=style)
        return strip

    def _rows(self, snap: RunSnapshot):
        """The gate, the peak entropy, the cascade, the inputs and (`h`) the evidence."""
        phase, gate = snap.phase, snap.gate
        t = PlainTable.grid(padding=(0, 1))
        t.add_column(style="dim", no_wrap=True, min_width=12)  # labels never squeezed
        t.add_column(overflow="fold")
        clock = self.now if self.now is not None else time.time()
        for label, text in health_rows(snap, clock, self._severity_color):
            t.add_row(label, text)
        for label, text, style in _gate_rows(snap):
            if gate.provisional and label == "gate":
                text, style = f"{PROVISIONAL} {text}", "dim"
            t.add_row(label, Text(text, style=style))
        if gate.peak_entropy is not None:
            t.add_row("peak entropy",
                      short_value(gate.peak_entropy) + _at_step(gate.peak_entropy_step))
        reported = {m.kind: m.step for m in snap.markers}
        if "phase_transition" in reported and reported["phase_transition"] != gate.trigger_step:
            t.add_row("run's gate", "fired" + _at_step(reported["phase_transition"]))
        cascade = _cascade_text(snap)
        if cascade:
            t.add_row("cascade", cascade)
        t.add_row("driven by", phase.inputs or "–")
        if self.evidence:
            t.add_row("why", Text(phase.evidence or "no reading yet"))
        return t


#: A flag's severity -> the theme variable it is drawn in ("ok": no flag stands).
HEALTH_COLORS = {"error": "status-bad", "warning": "status-wait",
                 "information": "status-done", "ok": "status-good"}
SEVERITY_FALLBACK = {"error": "bold red", "warning": "yellow", "information": "cyan",
                     "ok": "green"}


def health_rows(snap: RunSnapshot, now: float, color=SEVERITY_FALLBACK.get
                ) -> list[tuple[str, Text]]:
    """The health row, one or two lines at 80 columns: the worst flag standing, where its
    trouble began and was seen, and its evidence in short (one line, cut with an
    ellipsis); then the other flags by name and step, worst first, and the reward
    ceiling's forecast where the fit is good enough to state; "healthy" when no flag
    stands. `color`: a severity's style."""
    # here, not at the top: the first frame loads no store (tests/house/test_layers.py)
    # lazy: the store and numpy off the first frame
    from carl_tui.store.health import flag_line, standing

    flags = standing(snap.health_at(now))
    mark = f"{PROVISIONAL} " if snap.provisional else ""
    if flags:
        worst = flags[0]
        first = Text(mark + flag_line(worst), style=f"bold {color(worst.severity)}".strip(),
                     no_wrap=True, overflow="ellipsis")
    else:
        first = Text(mark + "healthy", style=color("ok") or "", no_wrap=True)
    rows = [("health", first)]
    more = Text(no_wrap=True, overflow="ellipsis")
    for f in flags[1:]:
        if more:
            more.append(" · ", style="dim")
        more.append(f"{f.flag}", style=color(f.severity) or "")
        more.append(f" since {f.from_step}", style="dim")
    fit = snap.reward_ceiling
    if fit is not None and fit.stated:
        if more:
            more.append(" · ", style="dim")
        more.append(f"task reward ceiling {fit.ceiling:.3g} ± {fit.ceiling_se:.2g}")
        more.append(f" at zero entropy (R² {fit.r2:.2f})", style="dim")  # n: `h`, summary
    if more:
        rows.append(("", more))
    else:  # nothing else to say: the worst flag's line may take the second line
        first.no_wrap = False
    return rows


def _at_step(step: int | None) -> str:
    """" at step N", or nothing when the step is not known (never "None")."""
    return "" if step is None else f" at step {step}"


def _last_ended_stage(phase) -> tuple[str, str, int] | None:
    """(kind, last phase, its first step) of the latest stage that ended before the
    current one: a stage that ended keeps its last phase on screen."""
    history = list(phase.history)
    ends = [(kind, name, step) for (name, step, kind), nxt in pairwise(history)
            if nxt[2] != kind]
    return ends[-1] if ends else None


def _gate_rows(snap: RunSnapshot) -> list[tuple[str, str, str]]:
    """The gate's state, and why it may disagree with the phase."""
    gate, phase = snap.gate, snap.phase.phase
    if gate.fired:
        fired = "CRYSTALLISED" + _at_step(gate.trigger_step)
        start = snap.phase.stage_start
        if phase in ("crystallisation", "converged"):
            return [("gate", fired, "bold")]
        if start is not None and (gate.trigger_step is None or gate.trigger_step < start):
            # why this stage's phase may read earlier than the gate: it is a later stage
            stage = f"{snap.phase.stage} stage from {start}"
            return [("gate", f"{fired}, in the stage before ({stage})", "bold")]
        return [("gate", fired, "bold"),
                ("why", (f"the gate reads {gate.metric}; the phases read "
                 f"{snap.phase.inputs or 'another metric'}"), "dim")]
    if gate.metric not in snap.series:
        return [("gate", f"{gate.metric} not logged (--gate-metric picks another)", "dim")]
    last = gate.window_values[-1] if gate.window_values else None
    rows = [("gate", f"not fired: {gate.above}/{gate.window} of {gate.metric} ≥ "
             f"{gate.threshold:g}, needs {gate.min_above}"
             + (f" (last {short_value(last, 4)})" if last is not None else ""), "")]
    if phase in ("crystallisation", "converged"):
        rows.append(("why", (f"the phase reads trends against this run's own scale; the gate "
                     f"waits for {gate.metric} ≥ {gate.threshold:g}"), "dim"))
    return rows


def _cascade_text(snap: RunSnapshot) -> str:
    c = snap.cascade
    if c.trigger_step is not None:
        how = "" if c.source == "run" else f" (derived: {c.basis})"
        return f"stage B (task + CARL) from step {c.trigger_step}{how}"
    if c.has_carl:
        return f"stage A (task rewards only){': ' + c.waiting_for if c.waiting_for else ''}"
    return c.basis
