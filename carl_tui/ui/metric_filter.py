"""`/` on the dashboard: the metrics whose names match a pattern, in the table and the
picker. The pattern is a regular expression, or, where it is not a valid one, a plain
substring; either way case does not matter."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label

from carl_tui.ui.screens.dialog import dialog_css


def name_matcher(pattern: str) -> Callable[[str], bool]:
    """Whether a metric's name matches `pattern` (empty: every name)."""
    if not pattern:
        return lambda _name: True
    try:
        rx = re.compile(pattern, re.IGNORECASE)
    except re.error:
        low = pattern.lower()
        return lambda name: low in name.lower()
    return lambda name: rx.search(name) is not None


class MetricFilter:
    """The dashboard's filter on metric names: which it leaves out, and asking for it."""

    def __init__(self) -> None:
        self.pattern = ""

    def left_out(self, names: Iterable[str]) -> set[str]:
        match = name_matcher(self.pattern)
        return {n for n in names if not match(n)}

    def kept(self, names: Iterable[str]) -> list[str]:
        match = name_matcher(self.pattern)
        return [n for n in names if match(n)]

    def title(self) -> str:
        """The metrics panel's title: with the filter while one is set."""
        return f"metrics /{self.pattern}" if self.pattern else "metrics"

    def ask(self, app, then: Callable[[], None]) -> None:
        """Ask for a new pattern; `then` runs once it is set (not when cancelled)."""

        def chosen(pattern: str | None) -> None:
            if pattern is not None:
                self.pattern = pattern.strip()
                then()

        app.push_screen(FilterPrompt(self.pattern), chosen)


class FilterPrompt(ModalScreen[str | None]):
    """One line: the pattern; enter applies (empty: every metric), esc cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss(None)", "Cancel", id="metric_filter.cancel"),
    ]
    DEFAULT_CSS = dialog_css("FilterPrompt", width=60)

    def __init__(self, pattern: str = ""):
        super().__init__()
        self._pattern = pattern

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Filter metrics by name: a substring or a regex (empty: all)",
                        classes="title")
            yield Input(self._pattern, placeholder="reward|loss", id="metric-filter")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)
