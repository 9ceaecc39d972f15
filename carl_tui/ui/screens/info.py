"""A read-only dialog: a title, one scrollable body, closed with esc, q or its own key.
The events (`e`) and skipped-input (`k`) views are two of them."""

from __future__ import annotations

from typing import ClassVar

from rich.console import RenderableType
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from carl_tui.ui.screens.dialog import dialog_css


class InfoScreen(ModalScreen[None]):
    """Subclasses set `BODY_ID` and `render_body()`; `CLOSE_KEYS` adds their own key."""

    CLOSE_KEYS = "escape,q"
    BODY_ID = "info-body"
    BINDINGS: ClassVar[list[BindingType]] = []
    DEFAULT_CSS = dialog_css("InfoScreen", inner="VerticalScroll", width=110, max_width="95%",
                             border="round $primary", padding="1 2", title="")

    def __init_subclass__(cls, **kw) -> None:
        # Before Textual's own hook, which gathers the class's BINDINGS.
        name = cls.__name__.removesuffix("Screen").lower()
        cls.BINDINGS = [Binding(cls.CLOSE_KEYS, "dismiss", "Close", id=f"{name}.close",
                                tooltip="Close")]
        super().__init_subclass__(**kw)

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(self.render_body(), id=self.BODY_ID)

    def render_body(self) -> RenderableType:
        raise NotImplementedError
