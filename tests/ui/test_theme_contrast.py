"""Every theme the dashboard accepts draws readable plots: each plot line's colour, as the
rendered plot draws it, is at least 3:1 (WCAG contrast) against the plot's background."""

from __future__ import annotations

import functools

import pytest
from rich.style import Style
from rich.text import Text

from carl_tui.events import RunMeta, RunRef, ScalarBatch
from carl_tui.ui.app import DashboardConfig, Settings, build_app
from carl_tui.ui.themes import theme_names
from carl_tui.ui.widgets.plots import MetricPlot
from tests.conftest import ScriptedSource, spec_trajectory
from tests.conftest import wait_for as pilot_wait

MARKS = {chr(c) for c in range(0x2801, 0x2900)} | {"●"}  # braille dots and the peak


def luminance(rgb) -> float:
    def linear(c: int) -> float:
        v = c / 255
        return v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(c) for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a, b) -> float:
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def drawn_colours(plot: MetricPlot) -> set[tuple[tuple, tuple]]:
    """(line colour, background) of every dot of data the plot draws, from its render."""
    text = plot.render()
    out: set[tuple[tuple, tuple]] = set()
    if not isinstance(text, Text):  # not drawn yet: a line saying what it waits for
        return out
    for span in text.spans:
        style = span.style if isinstance(span.style, Style) else Style.parse(span.style)
        if style.color is None or not MARKS & set(text.plain[span.start:span.end]):
            continue
        assert style.bgcolor is not None, "a plot dot drawn without the plot's background"
        out.add((tuple(style.color.get_truecolor()), tuple(style.bgcolor.get_truecolor())))
    return out


def events(name: str):
    ref = RunRef(source="test", project="proj", run_id=name, name=name)
    return [RunMeta(ref, {"model": "tiny", "vocab_size": 20}),
            ScalarBatch.from_rows(ref, spec_trajectory(), wall_time=1_700_000_000.0)]


wait_for = functools.partial(pilot_wait, timeout=10.0)


async def test_every_theme_draws_every_plot_line_at_3_to_1_or_more():
    src = ScriptedSource()
    src.push(events("run-a") + events("run-b"))
    settings = Settings(refresh_interval=0.05, plot_metrics=["loss"])
    app = build_app(DashboardConfig(sources=[src], settings=settings))
    async with app.run_test(size=(200, 60)) as pilot:
        accepted = sorted(app.available_themes)
        assert accepted == sorted(theme_names())  # what --theme, t and the palette offer
        assert {"textual-light", "solarized-light", "carl-dark"} <= set(accepted)
        await wait_for(pilot, lambda: app.snapshot is not None)
        await pilot.press("o")  # the other run overlaid: the overlay colours are drawn too
        plots = list(app.query(MetricPlot))
        assert len(plots) == 3
        worst = {}
        for name in accepted:
            app.theme = name
            await pilot.pause(0.1)
            await wait_for(pilot, lambda: all(drawn_colours(p) for p in plots))
            drawn = set().union(*(drawn_colours(p) for p in plots))
            # phi, the overlay, sigma, the gate, entropy, its peak, the grid's loss
            assert len({fg for fg, _ in drawn}) >= 5, (name, drawn)
            worst[name] = min(contrast(fg, bg) for fg, bg in drawn)
        assert all(c >= 3.0 for c in worst.values()), {
            k: round(v, 2) for k, v in worst.items() if v < 3.0}


@pytest.mark.parametrize("theme", ["ansi-dark", "ansi-light"])
def test_a_theme_drawn_in_the_terminals_palette_is_refused(theme, capsys):
    from carl_tui.cli import main

    assert main(["--theme", theme]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "terminal's palette" in err and "carl-dark" in err


async def test_a_theme_file_that_paints_its_plots_in_its_background_still_draws_them(
        tmp_path, monkeypatch):
    """A user's theme whose plot colours are its mid-grey surface (1:1): the lines are
    drawn lighter or darker, at 3:1 at least."""
    (tmp_path / "grey.toml").write_text(
        'name = "grey"\ndark = true\nprimary = "#777777"\nbackground = "#777777"\n'
        'surface = "#777777"\nforeground = "#777777"\n[variables]\n'
        + "".join(f'"{v}" = "#787878"\n' for v in (
            "plot-phi", "plot-entropy", "plot-sigma", "plot-gate", "plot-peak", "plot-extra",
            "plot-overlay-0")))
    monkeypatch.setenv("CARL_TUI_THEMES", str(tmp_path))
    src = ScriptedSource()
    src.push(events("run-a"))
    app = build_app(DashboardConfig(sources=[src],
                                    settings=Settings(refresh_interval=0.05, theme="grey")))
    async with app.run_test(size=(160, 45)) as pilot:
        assert app.theme == "grey"
        plots = list(app.query(MetricPlot))
        await wait_for(pilot, lambda: all(drawn_colours(p) for p in plots))
        drawn = set().union(*(drawn_colours(p) for p in plots))
        assert {bg for _, bg in drawn} == {(0x77, 0x77, 0x77)}
        assert min(contrast(fg, bg) for fg, bg in drawn) >= 3.0, drawn


def bar_colours(bar) -> set[tuple]:
    """The colour of every coloured span of the status bar's text."""
    text = bar._shown
    out = set()
    for span in (text.spans if text is not None else []):
        style = span.style if isinstance(span.style, Style) else Style.parse(span.style)
        if style.color is not None:
            out.add(tuple(style.color.get_truecolor()))
    return out


async def test_every_theme_draws_the_status_bars_states_at_4_5_to_1_or_more():
    """live, finished, connecting, retrying and error, the skipped count and a source's
    limitation: in the theme's own colours, readable as text on the bar's background."""
    from carl_tui.events import SourceStatus
    from carl_tui.ui.widgets.status_bar import StatusBar

    src = ScriptedSource()
    src.push(events("run-a") + [
        SourceStatus("aa", "live", limitation="no incremental reads"),
        SourceStatus("bb", "finished"), SourceStatus("cc", "connecting"),
        SourceStatus("dd", "retrying", "refused", last_good=1.0, skipped=2),
        SourceStatus("ee", "error", "gone")])
    app = build_app(DashboardConfig(sources=[src], settings=Settings(refresh_interval=0.05)))
    async with app.run_test(size=(300, 40)) as pilot:
        bar = app.query_one(StatusBar)
        await wait_for(pilot, lambda: "ee error" in (bar._shown or Text()).plain)
        worst, kinds = {}, {}
        for name in sorted(app.available_themes):
            app.theme = name
            await wait_for(pilot, lambda: app.theme_variables["status-bad"] in str(bar._shown
                                                                                 .spans))
            background = tuple(bar.background_colors[1].rgb)
            drawn = bar_colours(bar)
            kinds[name] = len(drawn)
            worst[name] = min(contrast(fg, background) for fg in drawn)
        assert all(n >= 4 for n in kinds.values()), kinds  # good, done, wait, bad
        assert all(c >= 4.5 for c in worst.values()), {
            k: round(v, 2) for k, v in worst.items() if v < 4.5}


def hue_gap(a, b) -> float:
    """Degrees between two colours' hues (0 to 180)."""
    d = abs(a.hsl[0] - b.hsl[0]) * 360
    return min(d, 360 - d)


async def test_every_theme_has_eight_run_colours_of_distinct_hues_at_3_to_1():
    """The run and up to seven compared runs (c): eight colours, no two of a hue closer
    than 25 degrees, each at 3:1 or more against the plot's background."""
    from textual.color import Color

    from carl_tui.ui.screens.dashboard import OVERLAY_COLORS

    assert len(OVERLAY_COLORS) >= 7
    app = build_app(DashboardConfig(sources=[ScriptedSource()],
                                    settings=Settings(refresh_interval=0.05)))
    async with app.run_test(size=(120, 36)) as pilot:
        bad = {}
        for name in sorted(app.available_themes):
            app.theme = name
            await pilot.pause()
            v = app.theme_variables
            surface = Color.parse(v["background"]) + Color.parse(v["surface"])
            runs = [Color.parse(v[k]) for k in ("plot-phi", *OVERLAY_COLORS)]
            gaps = [hue_gap(a, b) for i, a in enumerate(runs) for b in runs[i + 1:]]
            worst = min(contrast(c.rgb, surface.rgb) for c in runs)
            if min(gaps) < 25 or worst < 3.0:
                bad[name] = (round(min(gaps)), round(worst, 2))
        assert not bad, bad
