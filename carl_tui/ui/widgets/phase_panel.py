"""The phase panel: current phase, since when, gate progress, peak entropy."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from carl_tui.store.snapshot import RunSnapshot

PHASE_ORDER = ("baseline", "melting", "transition", "crystallisation", "converged")


def _fmt(v: float | None, digits: int = 3) -> str:
    return "–" if v is None else f"{v:.{digits}g}"


class PhasePanel(Static):
    """Renders the phase and gate state of one run snapshot."""

    DEFAULT_CSS = """
    PhasePanel { height: auto; padding: 0 1; }
    """

    def show(self, snap: RunSnapshot | None) -> None:
        self.update(self._render_snapshot(snap))

    def _color(self, phase: str) -> str:
        return self.app.theme_variables.get(f"phase-{phase}", "") or "bold"

    def _render_snapshot(self, snap: RunSnapshot | None):
        if snap is None:
            return Text("no run yet", style="dim")
        phase, gate = snap.phase, snap.gate
        title = Text()
        if phase.phase:
            title.append(f" {phase.phase.upper()} ", style=f"bold reverse {self._color(phase.phase)}")
            title.append(f"  since step {phase.since_step}", style="dim")
        else:
            title.append("phase: waiting for accuracy/entropy", style="dim")

        # The timeline as one line that wraps only between phases.
        strip = Text()
        seen = dict(phase.timeline)
        for i, name in enumerate(PHASE_ORDER):
            if i:
                strip.append(" → ", style="dim")
            style = self._color(name) if name in seen else "dim"
            mark = "●" if name == phase.phase else ("○" if name in seen else "·")
            at = f"@{seen[name]}" if name in seen else ""
            strip.append(f"{mark}{name}{at}", style=style)

        t = Table.grid(padding=(0, 1))
        t.add_column(style="dim", no_wrap=True)
        t.add_column(no_wrap=True)
        if gate.fired:
            t.add_row("gate", Text(f"CRYSTALLISED at step {gate.trigger_step}", style="bold"))
        elif gate.metric not in snap.series:
            t.add_row("gate", Text(f"{gate.metric} not logged (--gate-metric picks another)",
                                   style="dim"))
        else:
            t.add_row("gate", Text(f"{gate.progress_text} ({gate.metric})"))
        t.add_row(
            "window",
            f"{gate.above}/{gate.window} ≥ {gate.threshold:g}, needs {gate.min_above}",
        )
        if gate.peak_entropy is not None:
            t.add_row("peak entropy", f"{_fmt(gate.peak_entropy)} at step {gate.peak_entropy_step}")
        reported = {m.kind: m.step for m in snap.markers}
        if "phase_transition" in reported and reported["phase_transition"] != gate.trigger_step:
            t.add_row("run's gate", f"fired at step {reported['phase_transition']}")
        cascade = snap.cascade
        if "cascade" in reported:  # the run's own cascade gate decides when CARL is on
            t.add_row("cascade", f"stage B (task + CARL) from step {reported['cascade']}")
        elif cascade.fired:
            t.add_row("cascade", f"stage B (task + CARL) from step {cascade.trigger_step} (estimated)")
        elif "reward" in snap.series:
            t.add_row("cascade", "stage A (task rewards only)")
        t.add_row("driven by", phase.inputs)
        return Group(title, strip, t)
