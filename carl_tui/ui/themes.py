"""Load the app's colour themes from the `themes/` folder (TOML files)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from textual.theme import Theme

if TYPE_CHECKING:  # pragma: no cover
    from textual.app import App

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

_THEME_KEYS = (
    "primary", "secondary", "accent", "foreground", "background",
    "surface", "panel", "success", "warning", "error", "dark",
)


def themes_dir() -> Path:
    """`$CARL_TUI_THEMES`, else the themes shipped with the package (the project's
    top-level `themes/` folder, installed as `carl_tui.themes`)."""
    env = os.environ.get("CARL_TUI_THEMES")
    if env:
        return Path(env)
    shipped = Path(__file__).resolve().parents[1] / "themes"  # installed: carl_tui/themes
    if any(shipped.glob("*.toml")):
        return shipped
    return Path(__file__).resolve().parents[2] / "themes"  # a source checkout


def toml_loads(text: str) -> dict:
    """TOML text -> dict (ValueError on bad TOML, as `tomllib` raises)."""
    return tomllib.loads(text)


def load_theme(path: Path) -> Theme:
    data = toml_loads(path.read_text(encoding="utf-8"))
    kwargs = {k: data[k] for k in _THEME_KEYS if k in data}
    return Theme(name=data.get("name", path.stem), variables=data.get("variables", {}), **kwargs)


def theme_names(folder: Path | None = None) -> list[str]:
    """Names of the themes the app can use: its own, then Textual's built-in ones."""
    from textual.theme import BUILTIN_THEMES

    return [t.name for t in load_themes(folder)] + sorted(BUILTIN_THEMES)


def load_themes(folder: Path | None = None) -> list[Theme]:
    """Every `*.toml` theme in the folder, sorted by name. A broken file is skipped."""
    folder = folder or themes_dir()
    out = []
    for path in sorted(folder.glob("*.toml")):
        try:
            out.append(load_theme(path))
        except (OSError, ValueError, TypeError, KeyError):
            continue
    return out


def install_themes(app: App, wanted: str, default: str) -> tuple[list[str], str]:
    """Register the themes with `app` and choose `wanted` (else `default`): the names
    registered, and what went wrong (to say once the app runs)."""
    names = []
    for theme in load_themes():
        app.register_theme(theme)
        names.append(theme.name)
    problem = ""
    if wanted not in app.available_themes:
        problem = f"unknown theme {wanted!r}; using {default}"
        wanted = default if default in app.available_themes else "textual-dark"
    app.theme = wanted
    return names, problem
