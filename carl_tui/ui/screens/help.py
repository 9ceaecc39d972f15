"""`?`: every key of the dashboard, read from the live bindings (so it never drifts);
and `KeyHelp`, the part of the app that lists them in the help and the command palette."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

from carl_tui.ui.keys import hidden_actions, why_hidden
from carl_tui.ui.screens.dashboard import DashboardScreen
from carl_tui.ui.screens.dialog import dialog_css
from carl_tui.ui.settings import Settings
from carl_tui.ui.widgets.text_table import PlainTable


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark", "dismiss", "Close", id="help.close",
                tooltip="Close help"),
        # A modal screen hides the app's keys: its ctrl+s is asked for here.
        Binding("ctrl+s", "app.save_screen", "Save", id="help.save", show=False,
                tooltip="Save the screen as SVG"),
    ]
    DEFAULT_CSS = dialog_css("HelpScreen", inner="VerticalScroll", width="90%", max_width="130",
                             border="round $primary", padding="1 2", title="")

    def __init__(self, bindings: list[tuple[str, str, str, str]]):
        """bindings: (key display, description, tooltip, id)."""
        super().__init__()
        self._rows = bindings

    def compose(self) -> ComposeResult:
        table = PlainTable(title="carl-tui keys", expand=True, show_edge=False)
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


class KeyHelp:
    """The app's keys, the dashboard's and the actions' as the help (`?`) and the command
    palette list them (a part the app holds: `CarlApp.keys`)."""

    def __init__(self, app: App, settings: Settings, keymap: dict[str, str]) -> None:
        self.app, self.settings = app, settings
        self.keymap = keymap  # binding id -> key(s), the user's

    def allowed(self, action: str) -> bool:
        """Whether `action` is offered: read-only, none that acts; a replay, the demo, none
        that cannot act there (`keys.hidden_actions`)."""
        s = self.settings
        return action not in hidden_actions(read_only=s.read_only, recording=s.recording,
                                            demo=s.demo)

    def refusal(self, action: object) -> str | None:
        """Why a key left out of a replay's or the demo's footer does nothing (None: it
        acts)."""
        if not isinstance(action, str):
            return None
        return why_hidden(action.removeprefix("app."), recording=self.settings.recording,
                          demo=self.settings.demo)

    def rows(self) -> list[tuple[str, str, str, str]]:
        """(key, description, tooltip, id) of every dashboard binding and of the screen on
        top's own keys (the fleet table's), the user's keymap applied."""
        # lazy: the store and numpy off the first frame
        from carl_tui.ui.screens.fleet_table import screen_keys

        app, keymap = self.app, self.keymap
        rows = []
        for b in (*self.bindings(), *screen_keys(app.screen)):
            if b.id:
                key = keymap.get(b.id, b.key)
                display = ", ".join(app.get_key_display(b.with_key(k)) for k in key.split(","))
                rows.append((display, b.description, b.tooltip, b.id))
        rows.append(("ctrl+p", "Commands", "Command palette: every action", "app.command_palette"))
        return rows

    def bindings(self) -> list[Binding]:
        """The app's keys, the dashboard's and the actions' (less those hidden here:
        read-only, a replay, the demo)."""
        hidden = hidden_actions(read_only=self.settings.read_only,
                                recording=self.settings.recording, demo=self.settings.demo)
        return [b for b in (*self.app.BINDINGS, *DashboardScreen.BINDINGS)
                if isinstance(b, Binding) and b.action not in hidden
                and b.id != "app.save_screen"]  # the dashboard's ctrl+s, listed, says it

    def commands(self, dashboard: Screen) -> Iterable[SystemCommand]:
        """Every dashboard action, for the command palette."""
        for b in self.bindings():
            if b.id and b.action not in ("quit", "help"):
                target = dashboard if b in DashboardScreen.BINDINGS else self.app
                yield SystemCommand(b.description, b.tooltip,
                                    lambda a=b.action, t=target: t.run_action(a))
        yield SystemCommand("Help", "List every key",
                            lambda: self.app.push_screen(HelpScreen(self.rows())))
