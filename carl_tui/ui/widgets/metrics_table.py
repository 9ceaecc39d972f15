"""A table of the latest value of every metric, with its trend.

While a long history is still being read after a coarse preview, min and max
are provisional: dimmed and marked "≈" (the latest value is exact).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from rich.text import Text
from textual.widgets import DataTable
from textual.widgets.data_table import CellDoesNotExist

from carl_tui.metric_names import display_order
from carl_tui.ui.format import PROVISIONAL, value_text

if TYPE_CHECKING:  # pragma: no cover
    from carl_tui.store.snapshot import RunSnapshot, SeriesView

COLUMNS = ("metric", "last", "trend", "min", "max", "step")
METRIC_WIDTH = 22


def extreme_text(v: float | None, provisional: bool) -> str | Text:
    """A min or max cell: dimmed and marked "≈" while the history is still read."""
    text = value_text(v)
    if provisional and v is not None:
        return Text(PROVISIONAL + text, style="dim")
    return text


def trend_text(s: SeriesView, trend: float) -> Text:
    """An arrow and the change of the recent values, coloured neutral."""
    scale = max(abs(s.max or 0), abs(s.min or 0), 1e-12)
    rel = trend / scale
    if abs(rel) < 0.005:
        return Text("→", style="dim")
    arrow = "↑" if trend > 0 else "↓"
    return Text(f"{arrow} {trend:+.3g}", style="bold" if abs(rel) > 0.05 else "")


class MetricsTable(DataTable):
    """Rows keyed by metric name; cells update in place so the cursor stays put."""

    DEFAULT_CSS = """
    MetricsTable { height: 1fr; }
    """

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        for col in COLUMNS:
            # Long names (rewards/<f>/mean, train_samples_per_second) are cut, not
            # allowed to push the numbers out of view.
            self.add_column(col, key=col, width=METRIC_WIDTH if col == "metric" else None)

    def show(
        self, snap: RunSnapshot | None, hidden: Collection[str] = (), smoothing: float = 0.0
    ) -> None:
        wanted = {} if snap is None else {
            name: snap.series[name]
            for name in sorted(snap.series, key=display_order)
            if name not in hidden
        }
        if list(wanted) != [k.value for k in self.rows]:
            # A metric appeared (or was shown again): rebuild in display order,
            # keeping the cursor on the metric it was on.
            selected = self.selected_metric
            self.clear()
            for name, s in wanted.items():
                self.add_row(*self._cells(name, s, smoothing), key=name)
            if selected in wanted:
                self.move_cursor(row=list(wanted).index(selected))
            return
        for name, s in wanted.items():
            for col, value in zip(COLUMNS, self._cells(name, s, smoothing)):
                self.update_cell(name, col, value, update_width=True)

    @staticmethod
    def _cells(name: str, s: SeriesView, smoothing: float) -> tuple:
        from carl_tui.ui.chart import trend_value  # numpy: loaded once data has arrived

        label = f"{name} (derived)" if s.derived else name
        if len(label) > METRIC_WIDTH:
            label = label[: METRIC_WIDTH - 1] + "…"
        return (
            label,
            value_text(s.last),
            trend_text(s, trend_value(s, smoothing)),
            extreme_text(s.min, s.provisional),
            extreme_text(s.max, s.provisional),
            "–" if s.last_step is None else str(int(s.last_step)),
        )

    @property
    def selected_metric(self) -> str | None:
        if not self.row_count:
            return None
        try:
            return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except CellDoesNotExist:
            return None
