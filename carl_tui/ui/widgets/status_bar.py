"""The status bar: the run, its state (one word, the fleet's: `store.fleet.run_state`) and
its age by its data's own time, skipped lines, and each source's connection word
(`SourceStatus.word`: following, connected, answering slowly...)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich.text import Text
from textual.widgets import Static

from carl_tui.ui.format import STATE_COLORS, age_text

if TYPE_CHECKING:  # pragma: no cover
    from carl_tui.store.snapshot import RunSnapshot, StoreSummary

# Each state's colour: a theme variable (readable on the bar's `panel` in every theme,
# see ui/themes.py), and whether it is bold.
STATE_STYLE = {
    "live": ("status-good", True),
    "finished": ("status-done", True),
    "connecting": ("status-wait", False),
    "retrying": ("status-bad", True),
    "error": ("status-bad", True),
}


class StatusBar(Static):
    DEFAULT_CSS = """
    StatusBar { height: 1; padding: 0 1; background: $panel; }
    """

    _shown: Text | None = None

    def show(
        self, summary: StoreSummary, snap: RunSnapshot | None, now: float | None = None,
        history: str = "",
    ) -> None:
        """Sources in trouble first (what the user must know), then the run, what was
        skipped, and healthy sources last: a narrow terminal cuts the least important."""
        now = time.time() if now is None else now
        colors = getattr(self.app, "theme_variables", {})
        t = Text(no_wrap=True, overflow="ellipsis")
        sources = list(summary.sources.items())
        trouble = [(n, st) for n, st in sources if st.state in ("retrying", "error")]
        for name, st in trouble:
            _source(t, name, st, now, colors)
        if snap is not None:
            # Loaded here: a snapshot means the store is loaded (the first frame is not).
            # lazy: the store and numpy off the first frame
            from carl_tui.store.fleet import run_state

            t.append("run ", style="dim")
            t.append(snap.run.label, style="bold")
            t.append(f" · step {snap.last_step if snap.last_step is not None else '–'}")
            if snap.progress and snap.progress.total:
                t.append(f"/{snap.progress.total}")
            state = run_state(snap, now)
            t.append(" · ")
            t.append(state, style=f"bold {colors.get(STATE_COLORS.get(state, ''), '')}".strip())
            t.append(f" · updated {age_text(snap.updated_at, now)}")
            if history:  # what happened before the dashboard opened: quiet, never rung
                t.append(f" · {history}", style="dim")
            t.append("  │  ", style="dim")
        what = summary.skipped_text(most=2) if summary.skipped else "0"
        t.append(f"skipped {what}",
                 style=colors.get("status-wait", "") if summary.skipped else "dim")
        if summary.skipped:
            t.append(" (k: why)", style="dim")
        for name, st in sources:
            if (name, st) not in trouble:
                t.append("  │  ", style="dim")
                _source(t, name, st, now, colors, sep=False)
        if t != self._shown:  # ages tick every second; an unchanged bar costs nothing
            self._shown = t
            self.update(t, layout=False)  # one row, full width: nothing else moves


def _state_style(state: str, colors: dict[str, str]) -> str:
    var, bold = STATE_STYLE.get(state, ("", False))
    if not var:
        return "dim" if state == "idle" else ""
    return f"{'bold ' if bold else ''}{colors.get(var, '')}".strip()


def _source(t: Text, name: str, st, now: float, colors: dict[str, str],
            sep: bool = True) -> None:
    t.append(f"{name} ", style="bold")
    t.append(st.word, style=_state_style(st.state, colors))
    bad = st.state in ("retrying", "error")
    if st.message:
        t.append(f" ({st.message})", style=colors.get("status-bad", "") if bad else "")
    if st.state == "retrying" and st.retry_in:
        t.append(f" retry in {st.retry_in:.0f}s", style="dim")
    if bad:
        t.append(f" · last good {age_text(st.last_good, now)}", style="dim")
    if st.limitation:
        t.append(f" · {st.limitation}", style=colors.get("status-wait", ""))
    if sep:
        t.append("  │  ", style="dim")
