"""`k`: why input was skipped, per source: each reason with its count and first example,
and the valid data the dashboard does not plot."""

from __future__ import annotations

from rich.text import Text

from carl_tui.store import StoreSummary
from carl_tui.store.skipped import unit
from carl_tui.ui.screens.info import InfoScreen
from carl_tui.ui.widgets.text_table import PlainTable


class SkippedScreen(InfoScreen):
    CLOSE_KEYS = "escape,q,k"
    BODY_ID = "skipped-body"

    def __init__(self, summary: StoreSummary):
        super().__init__()
        self.summary = summary

    def render_body(self) -> PlainTable | Text:
        sources = self.summary.sources
        if not any(st.skip_reasons or st.not_plotted for st in sources.values()):
            return Text("Nothing was skipped: every line and value was read.")
        table = PlainTable(title=f"skipped input: {self.summary.skipped_text(most=6)}", expand=True,
                      show_edge=False)
        table.add_column("source", style="bold", no_wrap=True)
        table.add_column("reason")
        table.add_column("count", justify="right")
        table.add_column("first example", style="dim", overflow="fold")
        for name, st in sources.items():
            for reason, count, example in st.skip_reasons:
                table.add_row(name, reason, f"{count} {unit(reason)[count != 1]}", example)
            for kind, count in st.not_plotted:
                table.add_row(name, f"{kind} (valid, not plotted)", str(count), "")
        return table
