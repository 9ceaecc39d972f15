"""Small pickers: choose a run, choose which metrics are shown."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList, SelectionList
from textual.widgets.option_list import Option

_CSS = """
{name} {{ align: center middle; }}
{name} > Vertical {{
    width: 72; height: auto; max-height: 80%;
    border: round $primary; background: $surface; padding: 0 1;
}}
{name} Label {{ padding: 0 0 1 0; }}
"""


class ListPicker(ModalScreen[str | None]):
    """Choose one item from a list; dismisses with its key, or None."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss(None)", "Cancel", id="picker.cancel")]
    DEFAULT_CSS = _CSS.format(name="ListPicker")
    TITLE = "Choose (enter to choose, esc to cancel)"

    def __init__(self, items: list[tuple[str, str]], current: str | None = None):
        """items: (key, label)."""
        super().__init__()
        self._items = items
        self._current = current

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.TITLE)
            options = [
                Option(("● " if key == self._current else "  ") + label, id=key)
                for key, label in self._items
            ]
            yield OptionList(*options)

    def on_mount(self) -> None:
        keys = [key for key, _ in self._items]
        if self._current in keys:
            self.query_one(OptionList).highlighted = keys.index(self._current)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)


class RunPicker(ListPicker):
    DEFAULT_CSS = _CSS.format(name="RunPicker")
    TITLE = "Switch run (enter to choose, esc to cancel)"


class ProjectPicker(ListPicker):
    DEFAULT_CSS = _CSS.format(name="ProjectPicker")
    TITLE = "Open a Trackio project (enter to open, esc to cancel)"


class MetricPicker(ModalScreen[set[str] | None]):
    """Dismisses with the set of metrics to hide, or None when cancelled."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss(None)", "Cancel", id="metrics.cancel"),
        Binding("enter", "apply", "Apply", id="metrics.apply", priority=True),
    ]
    DEFAULT_CSS = _CSS.format(name="MetricPicker")

    def __init__(self, metrics: list[str], hidden: set[str]):
        super().__init__()
        self._metrics = metrics
        self._hidden = hidden

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Metrics shown (space toggles, enter applies, esc cancels)")
            yield SelectionList[str](
                *[(m, m, m not in self._hidden) for m in self._metrics], id="metrics"
            )

    def on_mount(self) -> None:
        self.query_one(SelectionList).highlighted = 0

    def action_apply(self) -> None:
        shown = set(self.query_one(SelectionList).selected)
        self.dismiss({m for m in self._metrics if m not in shown})
