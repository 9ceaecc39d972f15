"""`e`: the run's story on one timeline: the phases, the crystallisation gate, the cascade
switch, alerts (the run's own, e.g. `trackio.alert`, and the dashboard's: NaN or diverging
loss), job states; in step order. After them, the notices of other runs that were told
as a count ("12 runs crystallised"), each with its run."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.text import Text

from carl_tui.store import Notice, RunSnapshot
from carl_tui.ui.screens.info import InfoScreen
from carl_tui.ui.widgets.text_table import PlainTable

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "information": ""}


class EventsScreen(InfoScreen):
    CLOSE_KEYS = "escape,q,e"
    BODY_ID = "events-body"

    def __init__(self, snap: RunSnapshot, others: Sequence[Notice] = ()):
        """`others`: other runs' notices told as a count ("12 runs crystallised"), each
        listed here after the run's own events."""
        super().__init__()
        self.snap = snap
        self.others = list(others)

    def render_body(self) -> RenderableType:
        own = self.own_events()
        if not self.others:
            return own
        table = PlainTable(title="other runs (told as a count)", expand=True, show_edge=False)
        table.add_column("run", no_wrap=True)
        table.add_column("step", justify="right", no_wrap=True)
        table.add_column("", overflow="fold")
        for n in self.others:
            table.add_row(n.run.label, "–" if n.step is None else str(n.step),
                          Text(n.text, style=SEVERITY_STYLE.get(n.severity, "")))
        return Group(own, Text(), table)

    def own_events(self) -> PlainTable | Text:
        events = sorted(self.snap.events, key=lambda e: -1 if e.step is None else e.step)
        if not events:
            return Text(f"{self.snap.run.label}: nothing to report yet.")
        table = PlainTable(title=f"{self.snap.run.label}: events", expand=True, show_edge=False)
        table.add_column("step", justify="right", no_wrap=True)
        table.add_column("what", no_wrap=True)
        table.add_column("", overflow="fold")
        for e in events:
            table.add_row("–" if e.step is None else str(e.step), e.kind.replace("_", " "),
                          Text(e.text, style=SEVERITY_STYLE.get(e.severity, "")))
        return table
