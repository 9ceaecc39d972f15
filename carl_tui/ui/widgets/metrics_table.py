"""A table of the latest value of every metric, with its trend.

While a long history is still being read after a coarse preview, min and max
are provisional: dimmed and marked "≈" (the latest value is exact).

Each column is as wide as its widest cell, set before the cells are written.
(Textual's DataTable measures auto-width columns when it is next idle, after a
frame may already have drawn the new cells at the old widths; a finished run
then kept numbers cut short: "0.93" for 0.9378.)
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from rich.cells import cell_len
from rich.text import Text
from textual.widgets.data_table import CellDoesNotExist

from carl_tui.metric_names import display_order
from carl_tui.ui.format import PROVISIONAL, cut_names, value_text
from carl_tui.ui.widgets.text_table import TextTable

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


def _width(cell: str | Text) -> int:
    return cell.cell_len if isinstance(cell, Text) else cell_len(cell)


def trend_text(s: SeriesView, trend: float) -> Text:
    """An arrow and the change of the recent values, coloured neutral."""
    scale = max(abs(s.max or 0), abs(s.min or 0), 1e-12)
    rel = trend / scale
    if abs(rel) < 0.005:
        return Text("→", style="dim")
    arrow = "↑" if trend > 0 else "↓"
    return Text(f"{arrow} {trend:+.3g}", style="bold" if abs(rel) > 0.05 else "")


def _label(name: str, s: SeriesView) -> str:
    return f"{name} (derived)" if s.derived else name


class MetricsTable(TextTable):
    """Rows keyed by metric name; cells update in place so the cursor stays put."""

    DEFAULT_CSS = """
    MetricsTable { height: 1fr; }
    """

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        for col in COLUMNS:
            # Long names (rewards/<f>/mean, train_samples_per_second) are cut in the
            # middle (names that differ keep their distinct ends), not allowed to push
            # the numbers out of view.
            self.add_column(col, key=col, width=METRIC_WIDTH if col == "metric" else None)

    def show(
        self, snap: RunSnapshot | None, hidden: Collection[str] = (), smoothing: float = 0.0
    ) -> None:
        wanted = {} if snap is None else {
            name: snap.series[name]
            for name in sorted(snap.series, key=display_order)
            if name not in hidden
        }
        labels = cut_names((_label(name, s) for name, s in wanted.items()), METRIC_WIDTH)
        rows = {name: self._cells(labels[_label(name, s)], s, smoothing)
                for name, s in wanted.items()}
        self._fit_columns(rows.values())
        if list(rows) != [k.value for k in self.rows]:
            # A metric appeared (or was shown again): rebuild in display order,
            # keeping the cursor on the metric it was on.
            selected = self.selected_metric
            self.clear()
            for name, cells in rows.items():
                self.add_row(*cells, key=name)
            if selected in rows:
                self.move_cursor(row=list(rows).index(selected))
            return
        for name, cells in rows.items():
            for col, value in zip(COLUMNS, cells):
                self.update_cell(name, col, value)

    def _fit_columns(self, rows) -> None:
        """Every column but the metric's as wide as its label or widest cell."""
        widths = [cell_len(c) for c in COLUMNS]
        for cells in rows:
            widths = [max(w, _width(c)) for w, c in zip(widths, cells)]
        for col, width in zip(COLUMNS[1:], widths[1:]):
            column = self.columns[col]  # type: ignore[index]
            column.width, column.auto_width = width, False

    @staticmethod
    def _cells(label: str, s: SeriesView, smoothing: float) -> tuple:
        # lazy: the store and numpy off the first frame
        from carl_tui.ui.chart import trend_value  # numpy: loaded once data has arrived

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
