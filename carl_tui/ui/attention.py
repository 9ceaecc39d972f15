"""Telling the user when it matters: a notice on screen, the terminal bell, and a
desktop notification through the terminal (OSC 9 and OSC 777, which most
terminals pass on, over SSH too).

Alert kinds: crystallisation (`phase_transition`), the cascade switch
(`cascade`), a NaN or infinite loss (`nan_loss`), a diverging loss
(`diverging`), a job that finishes or fails (`job`), the run's own alerts
(`alert`: `trackio.alert(...)`), each health flag by its name (`truncation`, ...:
store/health.py) and what a guard did (`guard`). Each channel is switched
in the config file (`$CARL_TUI_CONFIG`, else `~/.config/carl-tui/config.toml`):

    [alerts]
    notice = true     # a notice on screen
    bell = true       # the terminal bell
    desktop = true    # OSC 9 / OSC 777 desktop notification
    kinds = ["phase_transition", "cascade", "nan_loss", "diverging", "job", "alert",
             "no_learning_signal", "entropy_collapse", "truncation", "kl_drift",
             "reward_dominance", "loss_spike", "grad_spike", "task_collapse", "stalled",
             "guard"]
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from carl_tui.errors import describe
from carl_tui.metric_names import HEALTH_FLAGS

if TYPE_CHECKING:  # pragma: no cover
    from textual.app import App

    from carl_tui.store import Notice

ALERT_KINDS = ("phase_transition", "cascade", "nan_loss", "diverging", "job", "alert",
               *HEALTH_FLAGS, "guard")
_UNSAFE = re.compile(r"[\x00-\x1f\x7f;]")


@dataclass(frozen=True)
class AlertConfig:
    notice: bool = True
    bell: bool = True
    desktop: bool = True
    kinds: tuple[str, ...] = ALERT_KINDS


def config_path() -> Path:
    env = os.environ.get("CARL_TUI_CONFIG")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "carl-tui" / "config.toml"


def load_alert_config(path: Path | None = None) -> tuple[AlertConfig, str]:
    """The alert settings, and a problem with the file to tell the user ("" when none)."""
    path = path or config_path()
    if not path.exists():
        return AlertConfig(), ""
    try:
        # lazy: textual (themes) only once a screen reads the settings
        from carl_tui.ui.themes import toml_loads

        data = toml_loads(path.read_text(encoding="utf-8")).get("alerts", {})
    except (OSError, ValueError) as exc:
        return AlertConfig(), f"{path}: {describe(exc)}; using the default alerts"
    if not isinstance(data, dict):
        return AlertConfig(), f"{path}: [alerts] must be a table; using the default alerts"
    kinds = data.get("kinds", list(ALERT_KINDS))
    unknown = [k for k in kinds if k not in ALERT_KINDS] if isinstance(kinds, list) else kinds
    if unknown:
        return AlertConfig(), (f"{path}: unknown alert kinds {unknown}; "
                               f"known: {', '.join(ALERT_KINDS)}")
    return AlertConfig(
        notice=bool(data.get("notice", True)),
        bell=bool(data.get("bell", True)),
        desktop=bool(data.get("desktop", True)),
        kinds=tuple(kinds),
    ), ""


def desktop_sequences(title: str, body: str) -> str:
    """OSC 9 (iTerm2, Windows Terminal, WezTerm, kitty) and OSC 777 (rxvt, foot, Ghostty,
    VTE) notifications; control characters and `;` removed so nothing can escape."""
    t = _UNSAFE.sub(" ", title)[:80]
    b = _UNSAFE.sub(" ", body)[:240]
    return f"\x1b]9;{t}: {b}\x07\x1b]777;notify;{t};{b}\x07"


def announce(app: App, notice: Notice, cfg: AlertConfig) -> None:
    """A notice from the store on `app`'s screen; alerts also ring and reach the desktop."""
    alert = notice.kind in cfg.kinds
    if not alert or cfg.notice:
        app.notify(notice.text, title=notice.run.label, severity=notice.severity,  # type: ignore[arg-type]
                   timeout=10 if alert else 5)
    if alert and cfg.bell:
        app.bell()
    if alert and cfg.desktop and not app.is_headless and app._driver is not None:
        app._driver.write(desktop_sequences(f"carl-tui · {notice.run.label}", notice.text))
