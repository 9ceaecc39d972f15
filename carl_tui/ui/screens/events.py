"""`e`: the run's story on one timeline: the phases, the crystallisation gate, the cascade
switch, alerts (the run's own, e.g. `trackio.alert`, and the dashboard's: NaN or diverging
loss), job states; in step order."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from carl_tui.store import RunSnapshot
from carl_tui.ui.screens.info import InfoScreen

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "information": ""}


class EventsScreen(InfoScreen):
    CLOSE_KEYS = "escape,q,e"
    BODY_ID = "events-body"

    def __init__(self, snap: RunSnapshot):
        super().__init__()
        self.snap = snap

    def render_body(self) -> Table | Text:
        events = sorted(self.snap.events, key=lambda e: -1 if e.step is None else e.step)
        if not events:
            return Text(f"{self.snap.run.label}: nothing to report yet.")
        table = Table(title=f"{self.snap.run.label}: events", expand=True, show_edge=False)
        table.add_column("step", justify="right", no_wrap=True)
        table.add_column("what", no_wrap=True)
        table.add_column("", overflow="fold")
        for e in events:
            table.add_row("–" if e.step is None else str(e.step), e.kind.replace("_", " "),
                          Text(e.text, style=SEVERITY_STYLE.get(e.severity, "")))
        return table
