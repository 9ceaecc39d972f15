"""A yes/no dialog for destructive actions (stop a job, push to the Hub)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from carl_tui.ui.screens.dialog import dialog_css


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,n", "dismiss(False)", "No", id="confirm.no"),
        Binding("y", "dismiss(True)", "Yes", id="confirm.yes"),
    ]
    DEFAULT_CSS = dialog_css("ConfirmScreen", width=64, max_height=None,
                             border="thick $warning", padding="1 2", title="") + """
    ConfirmScreen Horizontal { height: auto; align-horizontal: right; margin-top: 1; }
    ConfirmScreen Button { margin-left: 2; }
    """

    def __init__(self, title: str, body: str, confirm_label: str = "Yes", *,
                 width: int | None = None):
        super().__init__()
        self._title, self._body, self._confirm = title, body, confirm_label
        self._width = width  # None: 64 columns; wider for a body of long lines (a script)

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text(self._title, style="bold"))
            yield Static(Text(self._body))
            with Horizontal():
                yield Button("Cancel (n)", id="no")
                yield Button(f"{self._confirm} (y)", variant="warning", id="yes")

    def on_mount(self) -> None:
        if self._width is not None:
            frame = self.query_one(Vertical)
            frame.styles.width, frame.styles.max_width = self._width, "96%"
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")
