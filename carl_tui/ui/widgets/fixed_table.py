"""A DataTable whose columns all have a set width (the fleet table's).

Textual's DataTable (8.2.8) measures every cell of the rows added, and of the cells
updated, to fit its auto-width columns: the fleet table of a thousand runs gives it
17,000 cells at once, 0.15 s of measuring before the first frame, for widths that a
column with a set width never uses (`Column.get_render_width` takes the set width). This
table measures only where a width is used: while every column has a set width, the new
rows it measures are those with a label or an automatic height; otherwise, all of them.
"""

from __future__ import annotations

from collections.abc import Iterable

from textual.widgets.data_table import CellKey, RowKey

from carl_tui.ui.widgets.text_table import TextTable


class FixedWidthTable(TextTable):
    """`DataTable`, without measuring the cells of columns that have a set width."""

    def _widths_set(self) -> bool:
        return all(not column.auto_width for column in self.columns.values())

    def _update_dimensions(self, new_rows: Iterable[RowKey]) -> None:
        if self._widths_set():
            rows = self.rows
            new_rows = [key for key in new_rows if (row := rows.get(key)) is not None
                        and (row.auto_height or row.label is not None)]
        super()._update_dimensions(new_rows)

    def _update_column_widths(self, updated_cells: set[CellKey]) -> None:
        if not self._widths_set():
            super()._update_column_widths(updated_cells)
