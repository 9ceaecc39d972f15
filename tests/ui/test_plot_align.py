"""Stacked plots share their x range: in the demo recording phi is logged from the first
step and entropy from the 150th (the warm start logs its own), so each plot fitted to its
own data put the gate (step 287) and the cascade (step 365) at different columns."""

from __future__ import annotations

from pathlib import Path

from rich.style import Style

from carl_tui.sources.replay import ReplaySource
from carl_tui.ui.app import DashboardConfig, Services, Settings, build_app
from carl_tui.ui.widgets.plots import MetricPlot
from tests.conftest import wait_for

RECORDING = Path(__file__).resolve().parents[2] / "recordings" / "tiny-demo.jsonl"


def line_columns(plot: MetricPlot, var: str) -> set[int]:
    """Screen columns where a vertical line of the theme colour `var` is drawn (three rows
    or more of that colour in the column), as rendered."""
    rgb = tuple(plot._rgb(var))
    rows_at: dict[int, int] = {}
    for line in plot.render().split("\n"):
        for span in line.spans:
            style = span.style if isinstance(span.style, Style) else Style.parse(span.style)
            if style.color is not None and tuple(style.color.get_truecolor()) == rgb:
                for col in range(span.start, span.end):
                    rows_at[col] = rows_at.get(col, 0) + 1
    return {plot.region.x + col for col, rows in rows_at.items() if rows >= 3}


async def test_phi_entropy_and_grid_plots_share_x_and_their_markers_line_up():
    source = ReplaySource(RECORDING, speed=float("inf"))
    settings = Settings(refresh_interval=0.05, plot_metrics=("reward",))
    app = build_app(DashboardConfig(sources=[source], settings=settings,
                                    services=Services(clock=lambda: 0.0)))
    async with app.run_test(size=(160, 45)) as pilot:
        phi = app.query_one("#phi-plot", MetricPlot)
        entropy = app.query_one("#entropy-plot", MetricPlot)
        reward = next(p for p in app.query(MetricPlot) if p.metric == "reward")

        def drawn_to_the_end() -> bool:  # the whole recording read and drawn in each plot
            snap = app.snapshot
            return source.finished and snap is not None and snap.last_step is not None and all(
                not p.view.empty and p.view.xlim[1] == snap.last_step
                for p in (phi, entropy, reward))

        await wait_for(pilot, drawn_to_the_end, timeout=10.0, what="the recording drawn")
        await pilot.pause()  # the plots' AxisChanged handled
        snap = app.snapshot
        assert snap.series["phi"].steps.min() < 10
        assert snap.series["entropy"].steps.min() >= 150
        assert phi.view.xlim == entropy.view.xlim == reward.view.xlim
        assert phi.view.xlim == (float(snap.series["phi"].steps.min()), 394.0)
        gate, cascade = snap.gate.trigger_step, snap.cascade.trigger_step
        assert (gate, cascade) == (287, 365)
        for plot in (phi, entropy):
            assert [m.x for m in plot.view.marks if m.kind == "vline"] == [gate, cascade]
        assert phi.region.x == entropy.region.x and phi.region.width == entropy.region.width
        gate_cols = line_columns(phi, "plot-gate")
        assert gate_cols and gate_cols == line_columns(entropy, "plot-gate")
        cascade_cols = line_columns(phi, "plot-peak")
        assert cascade_cols and cascade_cols == line_columns(entropy, "plot-peak")
        assert max(gate_cols) < min(cascade_cols)
        # and their y axes take the same room (the widest tick label of the three)
        widest = max(len(t) for p in (phi, entropy, reward) for t in p.view.yticks[1])
        assert phi.y_label_width == entropy.y_label_width == reward.y_label_width == widest
