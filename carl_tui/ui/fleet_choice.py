"""The fleet table's columns the user hid (`c`), kept between sessions beside the config
file (`$CARL_TUI_CONFIG`'s folder, else `~/.config/carl-tui/`): `fleet-columns.json`,
`{"hidden": [column key, ...]}` (a config key's column: `config:KEY`). A column not
named there is shown, so a new sweep's axes appear."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from carl_tui.ui.attention import config_path


def choice_path() -> Path:
    return config_path().with_name("fleet-columns.json")


def load_hidden(path: Path | None = None) -> set[str]:
    """The hidden columns' keys (none where the file is missing or unreadable)."""
    try:
        data = json.loads((path or choice_path()).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    hidden = data.get("hidden") if isinstance(data, dict) else None
    return {str(k) for k in hidden} if isinstance(hidden, list) else set()


def save_hidden(hidden: set[str], path: Path | None = None) -> str:
    """Keep the choice; "" once written, else why not (said, never raised)."""
    path = path or choice_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"hidden": sorted(hidden)}) + "\n", encoding="utf-8")
    except OSError as exc:
        return f"columns not kept: {exc}"
    return ""


def choose_columns(screen: Any) -> None:
    """`c` in the fleet table (`screen`: the `FleetScreen`): tick the columns shown (the
    run and its state always are); the choice is kept. A column not offered now (another
    sweep's axis) keeps its own."""
    # lazy: the store and numpy off the first frame; the picker's widgets load only when it opens
    from carl_tui.ui.fleet_columns import ALWAYS, columns_for
    from carl_tui.ui.screens.pickers import ColumnPicker

    offered = [c for c in columns_for(screen.config_keys(), screen.rows)
               if c.key not in ALWAYS]
    keys = {c.key for c in offered}

    def chosen(shown: set[str] | None) -> None:
        if shown is None:
            return
        screen.hidden = (screen.hidden - keys) | (keys - shown)
        problem = save_hidden(screen.hidden)
        if problem:
            screen.notify(problem, severity="warning")
        screen.show_rows()

    items = [(c.key, c.label, c.key not in screen.hidden) for c in offered]
    screen.app.push_screen(ColumnPicker(items), chosen)
