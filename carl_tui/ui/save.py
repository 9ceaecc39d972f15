"""`ctrl+s`: save what is on screen: the screen as SVG (Textual's own screenshot)
and the data of every plot shown as CSV, one row per point drawn.

CSV columns: `plot, run, x_axis, x, value, smoothed` (`value` is the metric's
value even on a log-scale plot; `smoothed` is empty when smoothing is off).
"""

from __future__ import annotations

import csv
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

from carl_tui.errors import describe

if TYPE_CHECKING:  # pragma: no cover
    from textual.app import App

    from carl_tui.store import RunSnapshot
    from carl_tui.ui.widgets.plots import MetricPlot


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:60] or "run"


def save_screen(app: App, folder: str | Path) -> Path:
    """The screen `app` shows, as an SVG in `folder` (a screen with no plot: the help,
    the fleet table)."""
    folder = Path(folder).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    name = type(app.screen).__name__.removesuffix("Screen").lower() or "screen"
    svg = folder / f"carl-tui-{_slug(name)}-{time.strftime('%Y%m%d-%H%M%S')}.svg"
    app.save_screenshot(filename=svg.name, path=str(folder))
    return svg


def save_view(app: App, snap: RunSnapshot | None, plots: list[MetricPlot],
              folder: str | Path) -> tuple[Path, Path]:
    """The screen `app` shows (an SVG) and the data of the `plots` shown (a CSV), in
    `folder`, named after the run of `snap`."""
    folder = Path(folder).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    label = snap.run.label if snap else "dashboard"
    stem = f"carl-tui-{_slug(label)}-{time.strftime('%Y%m%d-%H%M%S')}"
    svg = folder / f"{stem}.svg"
    app.save_screenshot(filename=svg.name, path=str(folder))
    data = folder / f"{stem}.csv"
    with open(data, "w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["plot", "run", "x_axis", "x", "value", "smoothed"])
        for plot in plots:
            if not plot.display:
                continue
            view = plot.view
            raw = {t.label: t for t in view.traces if t.faint}
            for t in view.traces:
                if t.faint:
                    continue
                base = raw.get(t.label, t)
                values = 10**base.ys if view.log_y else base.ys
                smoothed = (10**t.ys if view.log_y else t.ys) if t.label in raw else None
                for i, (x, v) in enumerate(zip(base.xs.tolist(), values.tolist())):
                    sm = "" if smoothed is None else repr(float(smoothed[i]))
                    w.writerow([view.title, t.label, view.x_label, _num(x), repr(float(v)), sm])
    return svg, data


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


__all__ = ["save_view"]


def save_and_say(app: App, folder: str | Path) -> None:
    """`save_screen`, and where the SVG went (or why not) said on screen."""
    try:
        svg = save_screen(app, folder)
    except OSError as exc:
        app.notify(f"could not save: {describe(exc)}", severity="error")
        return
    app.notify(f"saved the screen to {svg}", timeout=8)


def save_view_and_say(app: App, snap: RunSnapshot | None, plots: list[MetricPlot],
                      folder: str | Path) -> None:
    """`save_view`, and where the files went (or why not) said on screen."""
    try:
        svg, csv_path = save_view(app, snap, plots, folder)
    except OSError as exc:
        app.notify(f"could not save: {describe(exc)}", severity="error")
        return
    app.notify(f"saved the screen to {svg} and the plotted data to {csv_path}", timeout=8)
