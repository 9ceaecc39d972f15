"""Small pickers: choose a project (`P`), the runs to compare (`c`), the metrics shown (`m`)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Checkbox, Label, OptionList, SelectionList
from textual.widgets.option_list import Option

from carl_tui.ui.format import cut_names
from carl_tui.ui.screens.dialog import dialog_css


def _css(name: str) -> str:
    return dialog_css(name, width=72, max_height="80%", border="round $primary",
                      title="") + f"{name} Label {{ padding: 0 0 1 0; }}\n"


class ListPicker(ModalScreen[str | None]):
    """Choose one item from a list; dismisses with its key, or None."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss(None)", "Cancel", id="picker.cancel"),
    ]
    DEFAULT_CSS = _css("ListPicker")
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
                Option(Text(("● " if key == self._current else "  ") + label), id=key)
                for key, label in self._items
            ]
            yield OptionList(*options)

    def on_mount(self) -> None:
        keys = [key for key, _ in self._items]
        if self._current in keys:
            self.query_one(OptionList).highlighted = keys.index(self._current)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)


class ProjectPicker(ListPicker):
    DEFAULT_CSS = _css("ProjectPicker")
    TITLE = "Open a Trackio project (enter to open, esc to cancel)"


class ChecklistPicker(ModalScreen[set[str] | None]):
    """Tick items on and off; dismisses with the keys ticked, or None when cancelled."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss(None)", "Cancel", id="checklist.cancel"),
        Binding("enter", "apply", "Apply", id="checklist.apply", priority=True),
    ]
    DEFAULT_CSS = _css("ChecklistPicker")
    TITLE = "Choose (space toggles, enter applies, esc cancels)"

    def __init__(self, items: list[tuple[str, str, bool]]):
        """items: (key, label, ticked)."""
        super().__init__()
        self._items = items

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.TITLE)
            yield SelectionList[str](*[(Text(label), key, on) for key, label, on in self._items],
                                     id="checklist")

    def on_mount(self) -> None:
        self.query_one(SelectionList).highlighted = 0
        self.call_after_refresh(self._fit_labels)

    def on_resize(self) -> None:
        self.call_after_refresh(self._fit_labels)

    def _fit_labels(self) -> None:
        """Labels too long for the list are cut in the middle, not at the end: metrics
        named alike (`profiling/Time taken: GRPOTrainer.<function>`) stay apart."""
        checklist = self.query_one(SelectionList)
        gutter = len(Checkbox.BUTTON_LEFT + Checkbox.BUTTON_INNER
                     + Checkbox.BUTTON_RIGHT + " ")
        width = checklist.scrollable_content_region.width - gutter
        if width <= 0:
            return
        labels = cut_names((label for _key, label, _on in self._items), width)
        for i, (_key, label, _on) in enumerate(self._items):
            if str(checklist.get_option_at_index(i).prompt) != labels[label]:
                checklist.replace_option_prompt_at_index(i, Text(labels[label]))

    def action_apply(self) -> None:
        self.dismiss(set(self.query_one(SelectionList).selected))


class MetricPicker(ChecklistPicker):
    TITLE = "Metrics shown in the table (space toggles, enter applies, esc cancels)"


class ColumnPicker(ChecklistPicker):
    TITLE = "Columns of the fleet table (space toggles, enter applies and keeps, esc cancels)"


class ComparePicker(ChecklistPicker):
    TITLE = "Runs to overlay on every plot (space toggles, enter applies, esc cancels)"

