"""The fleet table (`r`, `carl-tui fleet`) and the run card (`i`), driven with Textual's
pilot on a store fed by real files: JSONL streams a sweep wrote, a Trackio project written
by trackio itself. Asserts on what is on screen: the cells, their order after a sort, the
rows a filter leaves, its error, the card's content."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from textual.app import App
from textual.widgets import DataTable, Input, Static

from carl_tui.sources.open import open_file
from carl_tui.ui.app import build_app
from carl_tui.ui.screens import fleet_table
from carl_tui.ui.screens.fleet_table import MARK, FleetScreen
from carl_tui.ui.screens.run_card import RunCardScreen
from tests.conftest import dashboard_config, notices_said, plain_text, spec_trajectory, wait_for
from tests.store.test_fleet import hub  # noqa: F401  (the loopback Hub, a fixture)

NOW = 1_800_000_000.0
# The sweep: (run name, learning rate, seed, steps, crystallises); the model is the same.
SWEEP = (("grpo-a", 1e-4, 1, 46, True), ("grpo-b", 3e-4, 2, 30, False),
         ("sft-c", 1e-5, 3, 20, False), ("grpo-d", 1e-4, 4, 40, True))


def write_run(path: Path, name: str, lr: float, seed: int, steps: int, ago: float = 60.0):
    """A run of the sweep as a JSONL stream: its meta (config), `steps` rows one second
    apart, the last `ago` seconds before NOW."""
    with open(path, "w") as f:
        f.write(json.dumps({"event": "meta", "run_id": name, "name": name, "project": "sweep",
                            "vocab_size": 151936, "config": {"lr": lr, "seed": seed,
                                                             "model": "tiny"}}) + "\n")
    append_rows(path, seed, range(steps), steps, ago)


def append_rows(path: Path, seed: int, steps, last: int, ago: float = 60.0) -> None:
    rows = spec_trajectory(n=max(46, last), seed=seed)
    with open(path, "a") as f:
        for step in steps:
            t = NOW - ago - (last - 1 - step)
            f.write(json.dumps({"step": step, "time": t, **rows[step][1]}) + "\n")


@pytest.fixture
def sweep(tmp_path) -> list[Path]:
    paths = []
    for name, lr, seed, steps, _ in SWEEP:
        path = tmp_path / f"{name}.jsonl"
        write_run(path, name, lr, seed, steps)
        paths.append(path)
    return paths


def fleet_app(paths, **kw):
    return build_app(dashboard_config([open_file(p) for p in paths], run="grpo-a",
                                      refresh_interval=0.05, clock=lambda: NOW, **kw))


def table(app) -> DataTable:
    return app.screen.query_one("#fleet-table", DataTable)


def row_count(app) -> int:
    """The fleet table's rows (-1 while it is not on screen)."""
    found = app.screen.query("#fleet-table") if isinstance(app.screen, FleetScreen) else []
    return found[0].row_count if found else -1


def column(app, key: str) -> list[str]:
    """The text of column `key`, top to bottom, as on screen."""
    t = table(app)
    return [str(getattr(c, "plain", c)) for c in t.get_column(key)]


def headers(app) -> list[str]:
    return [str(c.label.plain).split(" ")[0] for c in table(app).columns.values()]


async def open_fleet(pilot, app, runs: int = len(SWEEP)) -> FleetScreen:
    await wait_for(pilot, lambda: app.snapshot is not None and len(app.store.runs()) == runs,
                   timeout=20, what="every run read")
    await wait_for(pilot, lambda: all(
        app.store.snapshot(r.key) and app.store.snapshot(r.key).last_step is not None
        for r in app.store.runs()), timeout=20, what="every run's rows")
    await pilot.press("r")
    await wait_for(pilot, lambda: row_count(app) == runs, timeout=10, what="the fleet table")
    return app.screen


async def choose_run(pilot, app, key: str) -> None:
    """`r`, then the run `key` chosen with the arrow keys and enter."""
    await pilot.press("r")
    await wait_for(pilot, lambda: row_count(app) == len(app.store.runs()),
                   what="the fleet table")
    order = [r.run.key for r in app.screen.shown]
    delta = order.index(key) - table(app).cursor_row
    await pilot.press(*(["down"] * delta if delta > 0 else ["up"] * -delta), "enter")
    await wait_for(pilot, lambda: app.current_run == key and app.screen is app.dashboard,
                   what=f"the dashboard on {key}")


class Host(App[None]):
    """An app that shows one screen (the fleet table alone, on a store of the test's)."""

    def __init__(self, screen) -> None:
        super().__init__()
        self.shown_screen = screen

    def on_mount(self) -> None:
        self.push_screen(self.shown_screen)


def by_name(app, key: str) -> dict[str, str]:
    """Column `key` of each run, by the run's name."""
    return dict(zip(column(app, "name"), column(app, key), strict=True))


async def test_r_shows_every_run_of_the_sweep_with_its_cells(sweep):
    app = fleet_app(sweep)
    async with app.run_test(size=(200, 60)) as pilot:
        fleet = await open_fleet(pilot, app)
        assert sorted(column(app, "name")) == sorted(name for name, *_ in SWEEP)
        assert by_name(app, "step") == {"grpo-a": "45", "grpo-b": "29", "sft-c": "19",
                                        "grpo-d": "39"}
        assert set(column(app, "updated")) == {"1m ago"}
        # the gate fired at step 27 in the runs that reached it; sft-c is still melting
        assert by_name(app, "gate") == {"grpo-a": "27", "grpo-b": "27", "sft-c": "–",
                                        "grpo-d": "27"}
        assert by_name(app, "phase")["sft-c"].startswith("melting")
        assert by_name(app, "phase")["grpo-a"].startswith("converged")
        assert by_name(app, "task")["sft-c"] == "0.0800"
        assert by_name(app, "loss")["grpo-a"] == "0.0310"
        assert all(set(t) <= set("▁▂▃▄▅▆▇█") and t for t in column(app, "trend"))
        # the sweep's axes, and not the model every run shares
        assert by_name(app, "config:lr") == {"grpo-a": "0.0001", "grpo-b": "0.0003",
                                             "sft-c": "1e-05", "grpo-d": "0.0001"}
        assert by_name(app, "config:seed")["sft-c"] == "3"
        assert "model" not in headers(app)
        assert by_name(app, "health") == dict.fromkeys(by_name(app, "step"), "ok")
        # (no run is a job: no gpu, flavor or cost column)
        assert headers(app)[1:] == ["run", "state", "step", "updated", "accuracy", "phase",
                                    "health", "gate", "best", "trend", "loss", "source", "lr",
                                    "seed"]
        assert "fleet · 4 runs" in str(fleet.query_one("#fleet-title").render())


def drawn_header(app) -> list[str]:
    """The fleet table's header as drawn on screen: its words."""
    from tests.store.test_run_age import screen_lines

    lines = screen_lines(app)
    return next(line.split() for line in lines if line.split()[:1] == ["run"])


@pytest.mark.parametrize("size", [(80, 24), (120, 36), (160, 45)])
async def test_a_narrow_terminal_shows_the_essentials_and_scrolls_sideways(sweep, size):
    """At 80, 120 and 160 columns the drawn table starts with the run, its state, step,
    age and task metric (named: every run's is accuracy), and right arrows scroll it
    sideways to the sweep's axes, the run's name staying in place."""
    app = fleet_app(sweep)
    async with app.run_test(size=size) as pilot:
        await open_fleet(pilot, app)
        await pilot.pause(0.1)
        assert drawn_header(app)[:5] == ["run", "state", "step", "updated", "accuracy"]
        for _ in range(20):
            if {"lr", "seed"} <= set(drawn_header(app)):
                break
            await pilot.press("right")
            await pilot.pause(0.01)
        header = drawn_header(app)
        assert "lr" in header and "seed" in header and header[0] == "run", header


async def test_the_columns_chosen_are_kept(sweep):
    """`c` chooses the columns: the ones unticked leave the drawn table, and stay hidden
    in the next session; the run and its state cannot be hidden."""
    from carl_tui.ui.screens.pickers import ColumnPicker

    app = fleet_app(sweep)
    async with app.run_test(size=(200, 40)) as pilot:
        await open_fleet(pilot, app)
        assert "source" in drawn_header(app) and "loss" in drawn_header(app)
        await pilot.press("c")
        await wait_for(pilot, lambda: isinstance(app.screen, ColumnPicker))
        offered = [str(o.prompt) for o in app.screen.query_one("#checklist")._options]
        assert "run" not in offered and "state" not in offered and "lr" in offered
        for label in ("loss", "source"):  # untick them
            await pilot.press(*["down"] * (offered.index(label) - app.screen.query_one(
                "#checklist").highlighted), "space")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, FleetScreen))
        await pilot.pause(0.1)
        header = drawn_header(app)
        assert "source" not in header and "loss" not in header and "lr" in header, header
    again = fleet_app(sweep)
    async with again.run_test(size=(200, 40)) as pilot:
        await open_fleet(pilot, again)
        await pilot.pause(0.1)
        header = drawn_header(again)
        assert "source" not in header and "loss" not in header and "state" in header


async def test_sort_by_a_column_reverse_and_click_a_header(sweep):
    app = fleet_app(sweep)
    async with app.run_test(size=(120, 36)) as pilot:
        fleet = await open_fleet(pilot, app)
        for _ in range(3):  # o: the next column (run, state, step)
            await pilot.press("o")
        assert fleet.sort == "step"
        await wait_for(pilot, lambda: column(app, "name") == ["sft-c", "grpo-b", "grpo-d",
                                                              "grpo-a"], what="by step")
        assert "step ▲" in [str(c.label) for c in table(app).columns.values()]
        await pilot.press("O")
        await wait_for(pilot, lambda: column(app, "name") == ["grpo-a", "grpo-d", "grpo-b",
                                                              "sft-c"], what="reversed")
        # a click on the header of the run's name sorts by it
        t = table(app)
        keys = [k.value for k in t.columns]
        x = sum(t.columns[k].get_render_width(t) for k in t.columns
                if keys.index(k.value) < keys.index("name"))
        await pilot.click("#fleet-table", offset=(x + 2, 0))
        await wait_for(pilot, lambda: column(app, "name") == ["grpo-a", "grpo-b", "grpo-d",
                                                              "sft-c"], what="by name")
        assert fleet.sort == "name" and not fleet.reverse


async def filter_with(pilot, app, text: str) -> None:
    await pilot.press("slash")
    box = app.screen.query_one("#fleet-filter", Input)
    await wait_for(pilot, lambda: box.has_focus, what="the filter box")
    box.value = ""
    await pilot.press(*text, "enter")


def error_text(app) -> str:
    error = app.screen.query_one("#fleet-error", Static)
    return "" if not error.display else str(error.render())


async def test_filter_rows_and_a_bad_filter_says_why_and_keeps_the_last(sweep):
    app = fleet_app(sweep)
    async with app.run_test(size=(120, 36)) as pilot:
        await open_fleet(pilot, app)
        await filter_with(pilot, app, "lr>=1e-4 name~grpo")
        await wait_for(pilot, lambda: sorted(column(app, "name")) == ["grpo-a", "grpo-b",
                                                                      "grpo-d"])
        assert error_text(app) == ""
        await filter_with(pilot, app, "phase:converged seed<4")
        await wait_for(pilot, lambda: column(app, "name") == ["grpo-a"], what="one run")
        await filter_with(pilot, app, "lr>>1")
        await wait_for(pilot, lambda: error_text(app), what="the error")
        assert "'lr>>1': > compares numbers, and '>1' is not one" in error_text(app)
        assert "the filter stays: phase:converged seed<4" in error_text(app)
        assert column(app, "name") == ["grpo-a"]
        app.screen.query_one("#fleet-filter", Input).value = ""
        await pilot.press(*"colour:red", "enter")
        await wait_for(pilot, lambda: "unknown key 'colour'" in error_text(app))
        assert "lr" in error_text(app) and "seed" in error_text(app)  # the known keys
        await pilot.press("escape")  # closes the box; the last good filter stays
        await wait_for(pilot, lambda: table(app).has_focus)
        assert column(app, "name") == ["grpo-a"]
        await filter_with(pilot, app, "")
        await wait_for(pilot, lambda: table(app).row_count == 4, what="every run again")


async def test_group_by_a_config_key_that_differs(sweep):
    app = fleet_app(sweep)
    async with app.run_test(size=(120, 36)) as pilot:
        fleet = await open_fleet(pilot, app)
        await pilot.press("g")
        await wait_for(pilot, lambda: "group" in [k.value for k in table(app).columns])
        assert fleet.group == "lr"
        groups = column(app, "group")
        names = column(app, "name")
        assert groups[0] == "lr=1e-05 (1)" and names[0] == "sft-c"
        assert groups[1] == "lr=0.0001 (2)" and groups[2] == ""
        assert sorted(names[1:3]) == ["grpo-a", "grpo-d"]
        assert groups[3] == "lr=0.0003 (1)" and names[3] == "grpo-b"
        await pilot.press("g")
        await wait_for(pilot, lambda: fleet.group == "seed" and column(app, "group")[0]
                       == "seed=1 (1)")
        await pilot.press("g")  # no grouping again
        await wait_for(pilot, lambda: "group" not in [k.value for k in table(app).columns])


async def move_to(pilot, app, name: str) -> None:
    delta = column(app, "name").index(name) - table(app).cursor_row
    await pilot.press(*(["down"] * delta if delta > 0 else ["up"] * -delta))
    await wait_for(pilot, lambda: app.screen.cursor_run() == f"jsonl:sweep:{name}")


async def test_space_selects_runs_to_compare_and_enter_opens_one(sweep):
    app = fleet_app(sweep)
    async with app.run_test(size=(120, 36)) as pilot:
        await open_fleet(pilot, app)
        for name in ("grpo-b", "sft-c"):
            await move_to(pilot, app, name)
            await pilot.press("space")
        await wait_for(pilot, lambda: by_name(app, "mark")["sft-c"] == "●")
        assert by_name(app, "mark") == {"grpo-a": " ", "grpo-b": "●", "sft-c": "●",
                                        "grpo-d": " "}
        assert app.dashboard.compare == ["jsonl:sweep:grpo-b", "jsonl:sweep:sft-c"]
        await move_to(pilot, app, "grpo-d")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.screen is app.dashboard
                       and app.snapshot.run.name == "grpo-d", what="grpo-d on the dashboard")
        plot = app.dashboard.phi
        await wait_for(pilot, lambda: sorted(plot.lines) == ["grpo-b", "grpo-d", "sft-c"],
                       what="the selected runs overlaid")
        # r again: the selection is still there, the cursor on the run shown
        await pilot.press("r")
        await wait_for(pilot, lambda: row_count(app) == 4)
        assert by_name(app, "mark")["grpo-b"] == "●"
        assert app.screen.cursor_run() == "jsonl:sweep:grpo-d"


async def test_rows_stay_live_keeping_cursor_and_selection(sweep):
    app = fleet_app(sweep)
    async with app.run_test(size=(120, 36)) as pilot:
        await open_fleet(pilot, app)
        await move_to(pilot, app, "sft-c")
        await pilot.press("space")
        await move_to(pilot, app, "grpo-b")
        append_rows(sweep[2], 3, range(20, 30), 30)  # sft-c goes on to step 29
        await wait_for(pilot, lambda: by_name(app, "step")["sft-c"] == "29", timeout=10,
                       what="the new rows on screen")
        assert by_name(app, "gate")["sft-c"] == "27"  # it crystallised meanwhile
        assert by_name(app, "mark")["sft-c"] == "●"
        assert app.screen.cursor_run() == "jsonl:sweep:grpo-b"



def card_text(app) -> str:
    return plain_text(app.screen.query_one("#run-card-body"), 160)


async def test_the_run_card_shows_config_summary_events_and_the_differing_config(sweep):
    end = {"step": 45, "train_runtime": 12.5, "train_loss": 0.31, "total_flos": 1e9}
    sweep[0].write_text(sweep[0].read_text() + json.dumps(end) + "\n")  # the Trainer's end
    app = fleet_app(sweep)
    async with app.run_test(size=(160, 45)) as pilot:
        await open_fleet(pilot, app)
        await wait_for(pilot, lambda: "train_summary" in app.store.snapshot(
            "jsonl:sweep:grpo-a").meta, what="the summary read")
        await move_to(pilot, app, "sft-c")
        await pilot.press("space")
        await move_to(pilot, app, "grpo-a")
        await pilot.press("i")
        await wait_for(pilot, lambda: isinstance(app.screen, RunCardScreen))
        text = card_text(app)
        assert "grpo-a  [jsonl: sweep]" in text and "step 45" in text
        lines = [" ".join(line.split()) for line in text.splitlines()]
        for line in ("lr 0.0001", "model tiny", "seed 1",  # its config
                     "train_runtime 12.5", "train_loss 0.31"):  # its summary-only values
            assert line in lines, (line, text)
        assert "Crystallised: mean_token_accuracy held >= 0.99" in text  # its events
        assert "27 phase transition" in " ".join(text.split())
        # the run selected to compare: the keys that differ, side by side
        assert "config that differs" in text
        assert "lr 0.0001 1e-05" in lines and "seed 1 3" in lines
        assert "model tiny tiny" not in lines
        await pilot.press("escape", "escape")
        # i on the dashboard: the card of the run on screen
        await wait_for(pilot, lambda: app.screen is app.dashboard)
        await pilot.press("i")
        await wait_for(pilot, lambda: isinstance(app.screen, RunCardScreen))
        assert app.screen.key == app.current_run  # (grpo-a, or the newest if read first)
        compared = app.current_run != "jsonl:sweep:sft-c"  # sft-c is still selected
        assert ("config that differs" in card_text(app)) == compared


async def test_the_differing_config_is_on_screen_above_a_long_config(tmp_path):
    """An SFT and a GRPO run, each with 170 config keys (and a tracker's `_` keys): with
    one selected, `i` on the other shows "config that differs" on the drawn screen (it
    was under some 170 rows), the shared keys with different values only; no `_` key."""
    from tests.store.test_run_age import screen_lines

    paths = []
    for name, kind, lr in (("grpo-a", "grpo", 1e-6), ("sft-c", "sft", 2e-5)):
        path = tmp_path / f"{name}.jsonl"
        config = {f"{kind}_key_{i:03d}": i for i in range(170)}
        config |= {"lr": lr, "model": "tiny", "_Username": "someone", "_Group": "g"}
        path.write_text(json.dumps({"event": "meta", "run_id": name, "name": name,
                                    "project": "sweep", "config": config}) + "\n")
        append_rows(path, 0, range(10), 10)
        paths.append(path)
    app = fleet_app(paths)
    async with app.run_test(size=(160, 45)) as pilot:
        await open_fleet(pilot, app, runs=2)
        await move_to(pilot, app, "sft-c")
        await pilot.press("space")
        await move_to(pilot, app, "grpo-a")
        await pilot.press("i")
        await wait_for(pilot, lambda: isinstance(app.screen, RunCardScreen))
        await pilot.pause(0.2)
        drawn = [" ".join(line.replace("│", " ").split()) for line in screen_lines(app)]
        at = next(i for i, line in enumerate(drawn) if "config that differs" in line)
        assert "lr 1e-06 2e-05" in drawn[at + 1:at + 4], drawn
        assert not any("key_" in line for line in drawn[at + 1:at + 4])
        assert "_Username" not in card_text(app) and "_Group" not in card_text(app)


async def test_other_runs_crystallising_are_one_notice_not_one_each(tmp_path):
    """Six runs of a sweep crystallise, read by six sources' threads: one notice says how
    many did (never a toast each), beside grpo-0's own when it was on screen by then; the
    events view lists each run told as a count."""
    paths = []
    for i in range(6):
        path = tmp_path / f"grpo-{i}.jsonl"
        write_run(path, f"grpo-{i}", 1e-4 * (i + 1), i, 46)
        paths.append(path)
    app = build_app(dashboard_config([open_file(p) for p in paths], run="grpo-0",
                                     refresh_interval=0.05, clock=lambda: NOW))
    # The burst's window runs on a clock of the test's: it ends once every run was read,
    # however loaded the machine (one burst, one group).
    now = [0.0]
    app.follower.grouper.clock = lambda: now[0]
    # Open since before these rows were written: news, not history (test_history.py)
    app.follower.opened_at = NOW - 3600
    said = notices_said(app)
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: len(app.store.runs()) == 6 and all(
            app.store.snapshot(r.key).last_step == 45 for r in app.store.runs()),
            timeout=20, what="every run read")
        await wait_for(pilot, lambda: app.follower._seen_store_version == app.store.version,
                       what="the last reads' notices taken (held)")
        now[0] += 60.0
        await wait_for(pilot, lambda: any("runs crystallised" in t for t in said)
                       and not app.follower.grouper.holding, what="the grouped notice")
        crystallised = [t for t in said if "rystallised" in t]
        own = "Crystallised: mean_token_accuracy held >= 0.99 (3/5 >= 0.99) at step 27"
        owns = crystallised.count(own)
        shown = [n.message for n in app._notifications]
        assert sum("rystallised" in m for m in shown) == len(crystallised)
        await pilot.press("e")  # the events view lists each of them, with its run
        await wait_for(pilot, lambda: type(app.screen).__name__ == "EventsScreen")
        lines = [" ".join(x.split()) for x in
                 plain_text(app.screen.query_one("#events-body"), 160).splitlines()]
        assert "other runs (told as a count)" in lines
        told = lines[lines.index("other runs (told as a count)"):]
        counted = [i for i in range(6) if f"grpo-{i} │ 27 │ {own}" in told]
        # Every run is told once: as the run on screen when it crystallised, or in the
        # count. On screen: grpo-0, and on a loaded machine the run shown before grpo-0
        # was read (the screen moves to grpo-0 once it is): at most two.
        assert owns <= 2 and owns + len(counted) == 6, (crystallised, told)
        names = ", ".join(f"grpo-{i}" for i in counted[:3])
        group = (f"{len(counted)} runs crystallised: {names} and {len(counted) - 3} more "
                 "(e lists each; r: the fleet table)")
        assert crystallised == [own] * owns + [group]


async def test_carl_tui_fleet_in_a_terminal_opens_the_fleet_table(sweep, monkeypatch):
    from carl_tui import cli
    from carl_tui.ui.screens.dashboard import DashboardScreen

    configs = []
    monkeypatch.setattr(cli, "interactive", lambda: True)
    monkeypatch.setattr(cli, "_run_app", lambda config: configs.append(config) or 0)
    assert cli.main(["fleet", str(sweep[0]), "--theme", "carl-light"]) == 0
    (config,) = configs
    assert config.settings.fleet and config.settings.theme == "carl-light"
    shown_status = []
    status = DashboardScreen.show_status
    monkeypatch.setattr(DashboardScreen, "show_status",
                        lambda self, *a: shown_status.append(a) or status(self, *a))
    app = build_app(config)
    started: list[str] = []  # the reading starts with the table, not after the dashboard
    ready, dashboard_ready = type(app).screen_ready, type(app).on_dashboard_ready
    monkeypatch.setattr(type(app), "screen_ready",
                        lambda self: started.append("reading") or ready(self))
    monkeypatch.setattr(type(app), "on_dashboard_ready",
                        lambda self, m: started.append("dashboard") or dashboard_ready(self, m))
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(pilot, lambda: row_count(app) == 1, timeout=10, what="the fleet table")
        assert started[0] == "reading" and started.count("reading") == 1
        assert column(app, "name") == ["grpo-a"] and column(app, "step") == ["45"]
        # the sources held back by a preview read on once the rows are on screen
        await wait_for(pilot, app.follower.first_snapshot_shown.is_set, what="the first rows shown")
        await pilot.pause(1.5)  # the status ticks every second
        # The dashboard under the table is not drawn meanwhile: no snapshot, no status
        # (anything drawn there has Textual draw the whole table again).
        assert app.snapshot is None and shown_status == []
        await pilot.press("escape")  # the dashboard under it, on that run
        await wait_for(pilot, lambda: app.screen is app.dashboard and app.snapshot is not None
                       and app.snapshot.run.name == "grpo-a" and shown_status != [])
        await pilot.pause(0.3)
        assert started.count("reading") == 1  # its first frame then starts nothing again


async def test_the_fleet_keys_are_in_the_footer_the_help_and_the_palette(sweep):
    from textual.widgets import Footer

    from carl_tui.ui.keys import FLEET_KEYS, check_keymap
    from carl_tui.ui.screens.help import HelpScreen

    app = fleet_app(sweep)
    async with app.run_test(size=(160, 45)) as pilot:
        fleet = await open_fleet(pilot, app)
        footer = fleet.query_one(Footer)
        await wait_for(pilot, lambda: {"Select", "Card", "Filter", "Sort", "Group", "Back"}
                       <= {getattr(w, "description", "") for w in footer.children})
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        help_text = plain_text(app.screen.query_one("VerticalScroll > Static"), 200)
        for k in FLEET_KEYS:
            assert k.id in help_text and k.description in help_text, k.id
        await pilot.press("escape")
        await pilot.press("ctrl+p")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "CommandPalette")
        await pilot.press(*"Group")
        await wait_for(pilot, lambda: "Group" in str(app.screen.query_one("CommandList")
                                                       .get_option_at_index(0).prompt))
        await pilot.press("enter")
        await wait_for(pilot, lambda: fleet.group == "lr", what="grouped from the palette")
    # each id can be remapped; a key is refused only where it is taken on the same screen
    assert check_keymap({"fleet.sort": "x"}) is None  # x: the dashboard's, not the table's
    assert "bound to both actions.stop and fleet.sort" in check_keymap({"fleet.sort": "s"})


@pytest.fixture
def loopback_hub(request):
    """The Hub's fake on loopback, with one user's jobs (`test_fleet.hub`)."""
    return request.getfixturevalue("hub")


@pytest.mark.timeout(120)
async def test_a_jobs_row_and_card_show_its_flavor_and_cost_from_the_hubs_prices(
        loopback_hub, monkeypatch):
    from carl_tui import cli

    srv, jobs = loopback_hub
    now = time.time()
    jobs.add_job("job-failed", flavor="a10g-small", stage="ERROR", message="out of memory",
                 created_at=now - 4000, started_at=now - 3600, finished_at=now - 1800,
                 command=["python", "train.py", "--hub_token", jobs.token])
    configs = []
    monkeypatch.setattr(cli, "interactive", lambda: True)
    monkeypatch.setattr(cli, "_run_app", lambda config: configs.append(config) or 0)
    assert cli.main(["fleet", "--job", "job-failed", "--namespace", "alice"]) == 0
    app = build_app(configs[0])
    async with app.run_test(size=(200, 60)) as pilot:
        await wait_for(pilot, lambda: row_count(app) == 1 and column(app, "cost") != ["–"],
                       timeout=20, what="the job's row with its cost")
        assert column(app, "state") == ["failed"] and column(app, "flavor") == ["a10g-small"]
        assert column(app, "cost") == ["$0.50"]  # $1.00/h for the 30 minutes it ran
        await pilot.press("i")
        await wait_for(pilot, lambda: isinstance(app.screen, RunCardScreen))
        lines = [" ".join(x.split()) for x in card_text(app).splitlines()]
        for line in ("job job-failed", "stage ERROR", "message out of memory",
                     "flavor a10g-small", "command python train.py --hub_token [REDACTED]",
                     "cost so far $0.50"):
            assert line in lines, (line, lines)
        assert jobs.token not in card_text(app)
    assert len(srv.requests_to("GET", r"^/api/jobs/hardware$")) == 1  # asked once


@pytest.mark.timeout(120)
async def test_the_dashboards_card_of_a_job_shows_its_cost_too(loopback_hub, monkeypatch):
    """`i` on the dashboard (the fleet table never opened): the card asks the Hub's prices
    once, as the table's does, and shows the job's cost."""
    from carl_tui import cli

    srv, jobs = loopback_hub
    now = time.time()
    jobs.add_job("job-done", flavor="a10g-small", stage="COMPLETED", created_at=now - 4000,
                 started_at=now - 3600, finished_at=now - 1800, command=["python", "t.py"])
    configs = []
    monkeypatch.setattr(cli, "interactive", lambda: True)
    monkeypatch.setattr(cli, "_run_app", lambda config: configs.append(config) or 0)
    assert cli.main(["--job", "job-done", "--namespace", "alice"]) == 0
    app = build_app(configs[0])
    async with app.run_test(size=(200, 60)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None and app.snapshot.job is not None,
                       timeout=20, what="the job on the dashboard")
        await pilot.press("i")
        await wait_for(pilot, lambda: isinstance(app.screen, RunCardScreen), timeout=10,
                       what="the card")
        lines = [" ".join(x.split()) for x in card_text(app).splitlines()]
        assert "flavor a10g-small" in lines and "cost so far $0.50" in lines, lines
        await pilot.press("escape", "i")  # again: the prices are known, not asked again
        await wait_for(pilot, lambda: isinstance(app.screen, RunCardScreen), what="the card")
    assert len(srv.requests_to("GET", r"^/api/jobs/hardware$")) == 1


async def test_rows_that_fail_to_read_are_said_once_not_read_again_at_every_poll():
    """A read of the rows that fails (a bug in one row) is one notice; the table reads
    again when the store changes, not at every half-second poll (a toast each time)."""

    from carl_tui.events import RunRef, ScalarBatch
    from carl_tui.store import RunStore

    calls: list[int] = []

    def broken(store, now, prices, first):
        calls.append(store.version)
        raise RuntimeError("a row that cannot be read")

    store = RunStore()
    screen = FleetScreen(store, rows_of=broken, clock=lambda: NOW)

    app = Host(screen)
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_for(pilot, lambda: calls and not screen.reader.reading, what="the failed read")
        for _ in range(3):
            screen.poll()
            assert not screen.reader.reading
        assert calls == [store.version]
        run = RunRef("test", "p", "r1", "r1")
        store.apply([ScalarBatch.from_rows(run, [(0, {"entropy": 1.0})])])
        await wait_for(pilot, lambda: len(calls) == 2, what="a read after the store changed")
        assert calls[-1] == store.version


async def test_a_run_of_this_machine_does_not_ask_the_hub_for_prices():
    """A local run's flavor (`local`) has no price: the table asks the Hub nothing (offline,
    no "job cost unknown" warning)."""

    from carl_tui.events import Job, RunRef, ScalarBatch
    from carl_tui.store import RunStore

    asked: list[int] = []
    run = RunRef("local", "this machine", "r1", "r1")
    store = RunStore()
    store.apply([ScalarBatch.from_rows(run, [(0, {"entropy": 1.0})]),
                 Job(run, "local-1", "RUNNING", flavor="local", started_at=NOW - 60)])
    screen = FleetScreen(store, clock=lambda: NOW,
                         prices_of=lambda: asked.append(1) or {"local": 1.0})

    async with Host(screen).run_test(size=(160, 30)) as pilot:
        await wait_for(pilot, lambda: len(screen.rows) == 1 and not screen.reader.reading,
                       what="the local run's row")
        assert screen.rows[0].flavor == "local" and screen.rows[0].cost_usd is None
    assert asked == []


async def test_while_a_history_loads_the_table_is_read_paced_and_at_once_when_done(sweep):
    """While a source reads a backlog (a big project loading), the table reads its rows
    again only after a pause that keeps its share of the time small; once the loading
    is done, at once."""
    import time as clock

    from carl_tui.events import RunRef, ScalarBatch

    app = fleet_app(sweep)
    async with app.run_test(size=(160, 45)) as pilot:
        fleet = await open_fleet(pilot, app)
        loading = [True]
        fleet.reader.reading_history = lambda: loading[0]
        fleet.reader.next_read = clock.perf_counter() + 3600  # the pause after a long read
        run = next(r for r in app.store.runs() if r.name == "grpo-b")
        before = by_name(app, "step")["grpo-b"]
        app.store.apply([ScalarBatch.from_rows(run, [(46, {"loss": 0.5})])])
        await pilot.pause(0.5)
        assert before != "46" and by_name(app, "step")["grpo-b"] == before  # not read yet
        title = lambda: str(fleet.query_one("#fleet-title", Static).render())
        await wait_for(pilot, lambda: "reading their history" in title(),
                       what="the title saying the history is being read")
        loading[0] = False
        await wait_for(pilot, lambda: by_name(app, "step")["grpo-b"] == "46",
                       what="the rows read at once when the loading is done")
        await wait_for(pilot, lambda: "reading" not in title() and "fleet · 4 runs" in title(),
                       what="the title once the history is read")
        # loading again, in a pause: a new run is a row at once (it has no row to wait in)
        loading[0] = True
        await pilot.pause(0.3)
        fleet.reader.next_read = clock.perf_counter() + 3600
        new = RunRef("jsonl", "sweep", "grpo-e", "grpo-e")
        app.store.apply([ScalarBatch.from_rows(new, [(3, {"loss": 0.7})])])
        await wait_for(pilot, lambda: row_count(app) == len(SWEEP) + 1,
                       what="the new run's row")
        assert by_name(app, "step")["grpo-e"] == "3"

async def test_the_table_looks_at_the_store_as_soon_as_it_changes(sweep, monkeypatch):
    """A change of the store reaches the open table at once, not at its next poll."""
    from carl_tui.events import RunRef, ScalarBatch
    from carl_tui.ui.screens import fleet_table

    monkeypatch.setattr(fleet_table, "POLL_S", 3600.0)  # no poll of its own after the first
    app = fleet_app(sweep)
    async with app.run_test(size=(160, 45)) as pilot:
        await open_fleet(pilot, app)
        new = RunRef("jsonl", "sweep", "grpo-f", "grpo-f")
        app.follower.emit([ScalarBatch.from_rows(new, [(5, {"loss": 0.4})])])
        await wait_for(pilot, lambda: row_count(app) == len(SWEEP) + 1,
                       what="the new run's row, without a poll of the table's own")
        assert by_name(app, "step")["grpo-f"] == "5"


async def test_a_previews_rows_wait_longer_for_their_next_read_than_exact_ones(sweep):
    """While a history loads after a coarse preview, its rows are the preview's until the
    end: they are read again after LOADING_READ_S; exact rows only after what their read
    cost (READ_PACE times)."""
    from dataclasses import replace

    from carl_tui.ui.screens import fleet_table

    app = fleet_app(sweep)
    async with app.run_test(size=(160, 45)) as pilot:
        fleet = await open_fleet(pilot, app)
        rows = list(fleet.rows)
        for provisional in (False, True):
            fleet.reader.read_from = time.perf_counter()
            fleet.reader.take([replace(r, provisional=provisional) for r in rows],
                              fleet.reader.seen[0], NOW, len(rows))
            wait = fleet.reader.next_read - time.perf_counter()
            assert (wait > fleet_table.LOADING_READ_S - 1) is provisional, wait


def title_of(screen) -> str:
    return plain_text(screen.query_one("#fleet-title", Static))


async def test_a_big_fleet_shows_a_screen_of_rows_at_once_then_every_row(monkeypatch):
    """100 runs: the first read takes the rows a screen holds (the newest, FIRST_ROWS),
    the title counts every run; the next read, once they are drawn, adds the others after
    them (the rows shown stay as they are: no rebuild); then the sources' held history is
    released (`on_all_rows_shown`)."""
    from carl_tui.store.fleet import fleet_rows
    from carl_tui.ui.screens.fleet_table import store_rows
    from tests.ui.test_first_rows import sweep_store

    store, read, asked, taken, shown = sweep_store(100), store_rows(), [], [], []

    every = threading.Event()  # the read of every row waits for the test

    def rows_of(store, now, prices, first):
        asked.append(first)
        if first is None:
            every.wait(10)
        return read(store, now, prices, first)

    screen = FleetScreen(store, rows_of=rows_of, clock=lambda: NOW,
                         on_all_rows_shown=lambda: shown.append(screen.table.row_count))
    take = screen.reader.take

    def spy(rows, *args):
        take(rows, *args)
        taken.append((screen.table.row_count, title_of(screen), list(screen.table.rows)))
    monkeypatch.setattr(screen.reader, "take", spy)
    async with Host(screen).run_test(size=(160, 30)) as pilot:
        await wait_for(pilot, lambda: taken, what="the first screen's rows")
        await pilot.pause(0.3)
        assert not shown and asked == [fleet_table.FIRST_ROWS, None]  # the next read
        every.set()
        await wait_for(pilot, lambda: screen.table.row_count == 100, what="every row")
        await wait_for(pilot, lambda: shown, what="the sources told")
    assert shown == [100]  # their history waits for every row, not the first screen's
    assert asked[:2] == [fleet_table.FIRST_ROWS, None]
    (first, title, keys), (every, _, all_keys) = taken[:2]
    assert (first, every) == (fleet_table.FIRST_ROWS, 100)
    assert title.startswith("fleet · 100 runs")
    assert [k.value for k in all_keys] == [r.run.key for r in fleet_rows(store, now=NOW)]
    assert all(a is b for a, b in zip(keys, all_keys[:first], strict=True))  # kept


async def test_carl_tui_fleet_reads_its_sources_at_once_and_its_rows_are_the_stores(sweep):
    """No rows come from anywhere but the one poller: the sources start as the table
    opens (nothing held back waiting for rows read elsewhere), and each row shown is the
    store's own."""
    app = fleet_app(sweep, fleet=True)
    follower, started = app.follower, []
    start = follower.start
    follower.start = lambda: started.append(row_count(app)) or start()
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: started, what="the sources started")
        assert started[0] <= 0  # before any row: the table was not open, or empty
        await wait_for(pilot, lambda: row_count(app) == len(sweep) and all(
            c != "–" for c in column(app, "step")), timeout=20, what="the sources' rows")
        assert sorted(column(app, "step")) == ["19", "29", "39", "45"]
        assert sorted(r.run.key for r in app.screen.rows) == sorted(
            r.key for r in app.store.runs())
    assert len(started) == 1


def test_the_task_column_names_its_metric():
    """Every run's task metric the same: it is the header ("reward"); mixed (GRPO and SFT
    runs): each cell says which (reward 1.87 beside accuracy 0.9994, unnamed before)."""
    from carl_tui.events import RunRef
    from carl_tui.store.fleet import FleetRow
    from carl_tui.ui.fleet_columns import columns_for, plain

    def row(name, metric, value):
        return FleetRow(run=RunRef("jsonl", "p", name, name), source="jsonl",
                        state="finished", task_metric=metric, task_last=value)

    grpo, sft = row("g", "reward", 1.87), row("s", "mean_token_accuracy", 0.9994)
    (task,) = [c for c in columns_for([], [grpo]) if c.key == "task"]
    assert task.label == "reward"
    (task,) = [c for c in columns_for([], [grpo, sft]) if c.key == "task"]
    assert task.label == "task"
    assert plain(task.cell(grpo, NOW, {})) == "1.8700 reward"
    assert plain(task.cell(sft, NOW, {})) == "0.9994 accuracy"
    grpo = row("g", "rewards/reverse_reward/mean", 0.096)
    assert plain(task.cell(grpo, NOW, {})) == "0.0960 reverse_reward"


async def test_grouped_rows_keep_their_selection_marks(sweep):
    """`g` groups the rows by a config key: the runs selected to compare keep their mark
    on the drawn screen, beside their group (the marks were hidden when grouped)."""
    from tests.store.test_run_age import screen_lines

    app = fleet_app(sweep)
    async with app.run_test(size=(120, 30)) as pilot:
        await open_fleet(pilot, app)
        for name in ("sft-c", "grpo-a"):
            await move_to(pilot, app, name)
            await pilot.press("space")
        await pilot.press("g")
        await wait_for(pilot, lambda: app.screen.group == "lr")
        await pilot.pause(0.2)
        drawn = screen_lines(app)
        marked = {name for name in ("sft-c", "grpo-a", "grpo-b", "grpo-d")
                  for line in drawn if f" {name} " in line and line.lstrip().startswith(MARK)}
        assert marked == {"sft-c", "grpo-a"}, "\n".join(drawn[:8])
        assert any("(group)" in line for line in drawn)
