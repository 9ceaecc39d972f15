"""`e`: the run's story on one timeline: the phases, the crystallisation gate, the cascade
switch, alerts (the run's own, e.g. `trackio.alert`, and the dashboard's: NaN or diverging
loss), job states; in step order."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from carl_tui.store import RunSnapshot

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "information": ""}


class EventsScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,e", "dismiss", "Close", id="events.close", tooltip="Close"),
    ]
    DEFAULT_CSS = """
    EventsScreen { align: center middle; }
    EventsScreen > VerticalScroll {
        width: 110; max-width: 95%; height: auto; max-height: 90%;
        border: round $primary; background: $surface; padding: 1 2;
    }
    """

    def __init__(self, snap: RunSnapshot):
        super().__init__()
        self.snap = snap

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(self.render_events(), id="events-body")

    def render_events(self) -> Table | Text:
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
