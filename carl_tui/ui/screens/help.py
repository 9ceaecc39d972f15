"""`?`: every key of the dashboard, read from the live bindings (so it never drifts)."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark", "dismiss", "Close", id="help.close",
                tooltip="Close help"),
    ]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 90%; max-width: 130; height: auto; max-height: 90%;
        border: round $primary; background: $surface; padding: 1 2;
    }
    """

    def __init__(self, bindings: list[tuple[str, str, str, str]]):
        """bindings: (key display, description, tooltip, id)."""
        super().__init__()
        self._rows = bindings

    def compose(self) -> ComposeResult:
        table = Table(title="carl-tui keys", expand=True, show_edge=False)
        table.add_column("key", style="bold", no_wrap=True)
        table.add_column("action")
        table.add_column("binding id (remappable)", style="dim", no_wrap=True)
        for key, desc, tooltip, bid in self._rows:
            table.add_row(key, f"{desc}: {tooltip}" if tooltip else desc, bid)
        with VerticalScroll():
            yield Static(table)
            yield Static(
                "Every action is also in the command palette (ctrl+p). Remap keys with "
                "--keymap 'binding.id=key,...'.",
                classes="dim",
            )
