"""Load the app's colour themes from the `themes/` folder (TOML files), and keep every
theme's plots readable: each plot colour (the theme's own `plot-*` variable, else the
theme colour it derives from) is at least 3:1 (WCAG contrast) against the plot's
background, its lightness moved until it is (`plot_variables`, `with_status_colors`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual.color import Color, ColorParseError
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
    """Names of the themes the app can use: its own, then Textual's built-in ones whose
    colours are colours (not the terminal's ANSI palette: how readable a plot drawn in
    those is depends on the terminal, which cannot be checked)."""
    from textual.theme import BUILTIN_THEMES

    return [t.name for t in load_themes(folder)] + sorted(
        name for name, theme in BUILTIN_THEMES.items() if not _ansi(theme))


def _ansi(theme: Theme) -> bool:
    return any(isinstance(c, str) and c.startswith("ansi_")
               for c in (theme.primary, theme.background, theme.surface))


# -- readable plots ------------------------------------------------------------------

MIN_PLOT_CONTRAST = 3.0  # WCAG's floor for graphics (1.4.11)

# Each plot colour, and the theme colour it derives from when the theme does not set it.
PLOT_COLORS = {
    "plot-phi": "primary", "plot-entropy": "accent", "plot-sigma": "error",
    "plot-gate": "success", "plot-peak": "warning", "plot-extra": "secondary",
}
# A compared run's colour, where the theme sets none: the primary colour's hue turned by
# these degrees (themes often repeat one colour as accent and warning, or secondary).
# Eight, for up to seven compared runs and the run itself (the primary colour, at 0):
# nine hues at least 30 degrees apart.
OVERLAY_TURNS = (150, 60, 240, 300, 105, 195, 30, 330)
# The status bar's state colours (read as `status-*`), and the theme colour each derives
# from when the theme does not set it (`status_defaults`); drawn on the `panel` colour,
# as text: at least 4.5:1 (WCAG AA).
STATUS_COLORS = {
    "status-good": "success", "status-done": "primary", "status-wait": "warning",
    "status-bad": "error",
}
MIN_TEXT_CONTRAST = 4.5


def luminance(color: Color) -> float:
    """WCAG relative luminance of an opaque colour."""
    def linear(c: int) -> float:
        v = c / 255
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(c) for c in color.rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: Color, b: Color) -> float:
    """WCAG contrast ratio, 1 to 21."""
    la, lb = sorted((luminance(a), luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def readable(color: Color, background: Color, floor: float = MIN_PLOT_CONTRAST) -> Color:
    """`color`, its lightness moved away from the background's until the contrast is at
    least `floor` (always possible for floor <= 4.5: black or white reaches it)."""
    if contrast(color, background) >= floor:
        return color
    h, s, lightness = color.hsl
    darker = contrast(Color(0, 0, 0), background) >= contrast(Color(255, 255, 255), background)
    step = -0.01 if darker else 0.01
    while 0.0 < lightness < 1.0:
        lightness = min(1.0, max(0.0, lightness + step))
        out = Color.from_hsl(h, s, lightness)
        if contrast(out, background) >= floor:
            return out
    return Color(0, 0, 0) if darker else Color(255, 255, 255)


def _parse(value: str | None, fallback: Color) -> Color:
    try:
        return Color.parse(value) if value else fallback
    except ColorParseError:
        return fallback


def plot_variables(variables: dict[str, str]) -> dict[str, str]:
    """The theme's CSS variables with every plot colour readable on the plot's background
    (the `surface` the plots paint their canvas with)."""
    background = _parse(variables.get("background"), Color(0, 0, 0))
    surface = background + _parse(variables.get("surface"), background)  # over its backdrop
    foreground = _parse(variables.get("foreground"), Color(255, 255, 255))
    out = dict(variables)
    primary = _parse(variables.get("primary"), foreground)
    for var, base in PLOT_COLORS.items():
        color = _parse(variables.get(var) or variables.get(base), foreground)
        out[var] = readable(background + color, surface).hex
    for i, turn in enumerate(OVERLAY_TURNS):
        var = f"plot-overlay-{i}"
        color = _parse(variables.get(var), _turned(primary, turn))
        out[var] = readable(background + color, surface).hex
    panel = background + _parse(variables.get("panel"), background)
    for var, base in STATUS_COLORS.items():
        color = _parse(variables.get(var) or variables.get(base), foreground)
        out[var] = readable(background + color, panel, MIN_TEXT_CONTRAST).hex
    return out


def _turned(color: Color, degrees: float) -> Color:
    h, s, lightness = color.hsl
    return Color.from_hsl((h + degrees / 360) % 1.0, max(s, 0.5), lightness)


def with_status_colors(theme: Any, defaults: dict[str, str]) -> dict[str, str]:
    """The app's theme variable defaults, where a theme without `status-*` colours
    (Textual's own) gets its own success, primary, warning and error colours (what
    `App.get_theme_variable_defaults` returns)."""
    out = dict(defaults)
    for var, base in STATUS_COLORS.items():
        color = getattr(theme, base, None)
        if isinstance(color, str) and color:
            out.setdefault(var, color)
    return out


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
    for name, theme in list(app.available_themes.items()):
        if _ansi(theme):  # not offered by the palette's theme picker either
            app.unregister_theme(name)
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


def cycle_theme(app: App, names: list[str]) -> None:
    """The next of the themes `names` (Textual's dark and light where none), said."""
    names = names or ["textual-dark", "textual-light"]
    i = names.index(app.theme) if app.theme in names else -1
    app.theme = names[(i + 1) % len(names)]
    app.notify(f"theme: {app.theme}", timeout=2)
