"""`FixedWidthTable`: the fleet table's DataTable, which never measures the cells of
columns that have a set width (Textual measures every cell of the rows added: a thousand
runs' rows, 17,000 cells before the first frame) and draws exactly as DataTable does."""

from __future__ import annotations

import pytest
import textual.widgets._data_table as data_table
from rich.text import Text
from textual.app import App
from textual.widgets import DataTable
from textual.widgets._data_table import Row

from carl_tui.ui.widgets.fixed_table import FixedWidthTable

ROWS = [(Text("grpo [lr=1e-4]"), Text("crystallisation · grpo"), "0.9312"),
        (Text("sft-a-much-longer-name-cut"), Text("melting"), "0.1"),
        (Text("x"), Text("–"), "")]


class Tables(App[None]):
    def compose(self):
        yield FixedWidthTable(id="fixed")
        yield DataTable(id="plain")


def fill(table: DataTable, widths=(12, 16, 6)) -> None:
    for key, width in zip(("name", "phase", "task"), widths, strict=True):
        table.add_column(key, key=key, width=width)
    for i, row in enumerate(ROWS):
        table.add_row(*row, key=f"r{i}")


def lines(table: DataTable) -> list[str]:
    return [table.render_line(y).text for y in range(len(ROWS) + 1)]


@pytest.fixture
def measured(monkeypatch) -> list[object]:
    seen: list[object] = []
    real = data_table.measure
    monkeypatch.setattr(data_table, "measure",
                        lambda console, r, *a, **k: seen.append(r) or real(console, r, *a, **k))
    return seen


async def test_set_widths_are_never_measured_and_draw_as_datatable_does(measured):
    app = Tables()
    async with app.run_test(size=(80, 20)) as pilot:
        fixed, plain = app.query_one("#fixed", DataTable), app.query_one("#plain", DataTable)
        fill(plain)
        await pilot.pause()
        assert len(measured) >= 3 * len(ROWS)  # Textual's own table measures each cell
        measured.clear()
        fill(fixed)
        await pilot.pause()
        assert [str(m) for m in measured] == ["name", "phase", "task"]  # the labels only
        assert lines(fixed) == lines(plain) and fixed.virtual_size == plain.virtual_size
        plain.update_cell("r1", "phase", Text("m"), update_width=True)  # measured there
        await pilot.pause()
        assert measured[3:]
        measured.clear()
        fixed.update_cell("r1", "phase", Text("m"), update_width=True)
        await pilot.pause()
        assert measured == [] and lines(fixed) == lines(plain)


async def test_an_automatic_width_or_height_is_still_measured(measured):
    app = Tables()
    async with app.run_test(size=(80, 20)) as pilot:
        fixed = app.query_one("#fixed", FixedWidthTable)
        fixed.add_column("note", key="note", width=6)
        fixed.add_row(Text("two\nlines"), key="b", height=None)  # its height: measured
        await pilot.pause()
        row: Row = fixed.rows[next(k for k in fixed.rows if k.value == "b")]
        assert row.height == 2
        fixed.add_column("name", key="name")  # no width: fitted to its cells
        fixed.add_row(Text("x"), Text("a-long-run-name"), key="a")
        await pilot.pause()
        name = next(c for c in fixed.columns.values() if c.key.value == "name")
        assert name.content_width == len("a-long-run-name") and measured
