"""The fleet's one column table (`store/fleet_columns.py`): a column added there is shown on
the fleet screen, filtered on and listed by `carl-tui fleet`, with no other edit."""

from __future__ import annotations

import pytest

from carl_tui.report.fleet_listing import fleet_table, fleet_text
from carl_tui.store import fleet_columns
from carl_tui.store.fleet import fleet_rows
from carl_tui.store.fleet_columns import FleetColumn
from carl_tui.store.fleet_filter import FilterError, parse_filter
from tests.ui import test_fleet_screen
from tests.ui.test_fleet_screen import NOW, by_name, fleet_app, headers, open_fleet

sweep = test_fleet_screen.sweep  # the fixture: four runs of a sweep, as JSONL streams


def _steps(row) -> int | None:
    return None if row.last_step is None else row.last_step - (row.first_step or 0) + 1


STEPS = FleetColumn("steps", "steps", _steps, align="right", place=2, priority=0, width=6,
                    listed="steps")


async def test_a_column_added_to_the_table_is_shown_filtered_on_and_listed(sweep,
                                                                          monkeypatch):
    assert "steps" not in fleet_columns.filter_fields()
    monkeypatch.setattr(fleet_columns, "COLUMNS", (*fleet_columns.COLUMNS, STEPS))
    app = fleet_app(sweep)
    async with app.run_test(size=(200, 60)) as pilot:
        await open_fleet(pilot, app)
        # on the screen at its place (2, as the step's: after it, in the table's order)
        assert headers(app)[:5] == ["", "run", "state", "step", "steps"]  # "": the mark
        assert by_name(app, "steps") == {"grpo-a": "46", "grpo-b": "30", "sft-c": "20",
                                         "grpo-d": "40"}
        rows = fleet_rows(app.store, now=NOW)

    # the filter knows it
    assert sorted(r.run.label for r in rows if parse_filter("steps>=40").matches(r)) == [
        "grpo-a", "grpo-d"]
    with pytest.raises(FilterError, match=r"known: .*health, steps"):
        parse_filter("colour:red")

    # the listing lists it, after the health (its place in the table), numbers right
    cells = fleet_table(rows, now=NOW)
    at = cells[0].index("steps")
    assert cells[0][at - 1] == "health"
    assert {r[0]: r[at] for r in cells[1:]} == {"grpo-a": "46", "grpo-b": "30",
                                                "sft-c": "20", "grpo-d": "40"}
    header, *lines = fleet_text(rows, now=NOW).splitlines()
    end = header.index("steps") + len("steps")
    line = next(x for x in lines if x.startswith("sft-c"))
    assert line[end - 2:end] == "20" and line[end - 5:end - 2] == "   "
