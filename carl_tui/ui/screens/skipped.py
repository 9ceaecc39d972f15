"""`k`: why input was skipped, per source: each reason with its count and first example,
and the valid data the dashboard does not plot."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from carl_tui.store import StoreSummary


class SkippedScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,k", "dismiss", "Close", id="skipped.close", tooltip="Close"),
    ]
    DEFAULT_CSS = """
    SkippedScreen { align: center middle; }
    SkippedScreen > VerticalScroll {
        width: 110; max-width: 95%; height: auto; max-height: 90%;
        border: round $primary; background: $surface; padding: 1 2;
    }
    """

    def __init__(self, summary: StoreSummary):
        super().__init__()
        self.summary = summary

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(self.render_summary(), id="skipped-body")

    def render_summary(self) -> Table | Text:
        sources = self.summary.sources
        if not any(st.skip_reasons or st.not_plotted for st in sources.values()):
            return Text("Nothing was skipped: every line and value was read.")
        table = Table(title=f"skipped input: {self.summary.skipped}", expand=True,
                      show_edge=False)
        table.add_column("source", style="bold", no_wrap=True)
        table.add_column("reason")
        table.add_column("count", justify="right")
        table.add_column("first example", style="dim", overflow="fold")
        for name, st in sources.items():
            for reason, count, example in st.skip_reasons:
                table.add_row(name, reason, str(count), example)
            for kind, count in st.not_plotted:
                table.add_row(name, f"{kind} (valid, not plotted)", str(count), "")
        return table
