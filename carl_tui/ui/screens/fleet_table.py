"""The fleet table (`r`, `carl-tui fleet`): one row per run of every source, live.

Sort by any column (`o` the next, `O` reverses, or click a header), filter with `/`
(`store/fleet_filter.py`), group by a config key that differs between the runs (`g`),
select runs with space to compare them on the dashboard's plots, `i` for a run's card,
enter opens the run. The rows come from `store.fleet.fleet_rows`, read in a worker thread
whenever the store changed (`RowReader`, a part the screen holds); cursor and selection
follow their runs across updates.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.screen import Screen
from textual.widgets import DataTable, Input, Static

from carl_tui.errors import describe
from carl_tui.store.fleet import FleetRow, needs_prices
from carl_tui.store.fleet_filter import FilterError, FleetFilter, parse_filter
from carl_tui.ui.fleet_choice import load_hidden
from carl_tui.ui.fleet_columns import (
    Column,
    arrange,
    column_width,
    columns_for,
    shown_columns,
)
from carl_tui.ui.keys import FLEET_KEYS
from carl_tui.ui.messages import CompareSelected
from carl_tui.ui.widgets.fixed_table import FixedWidthTable
from carl_tui.ui.widgets.key_footer import KeyFooter

if TYPE_CHECKING:  # pragma: no cover
    from carl_tui.store import RunStore

#: (store, now, prices, first) -> the rows (`fleet.fleet_rows`); `first`: only so many.
RowsOf = Callable[["RunStore", float, "Mapping[str, float] | None", "int | None"],
                  list[FleetRow]]
MARK = "●"


def as_text(cell: str | Text) -> Text:
    return cell if isinstance(cell, Text) else Text(cell)


POLL_S = 0.1  # how often the table looks whether the store changed (a number compared)
#: A fleet of more runs than this, or than the screen has lines, shows the rows a screen
#: holds first (the newest), then every row at once: a thousand runs' rows take a while.
FIRST_ROWS = 64
READ_PACE = 4.0  # the fleet table's reads take at most about a fifth of the time
#: While a history loads after a coarse preview, its rows change little (a run's phase,
#: gate and best are its preview's until the whole history is read): they are read again
#: at most this often (a thousand runs' rows cost a second of the loading each time), a
#: new run at once.
LOADING_READ_S = 30.0


def store_rows() -> RowsOf:
    """The rows of the store, read again and again: each run's snapshot is taken again
    only when the run changed."""
    from carl_tui.store.fleet import RowSnapshots, fleet_rows

    snapshots = RowSnapshots()
    return lambda store, now, prices=None, first=None: fleet_rows(
        store, now=now, prices=prices, snapshots=snapshots, first=first)


class FleetCommands(Provider):
    """The fleet table's keys in the command palette."""

    def _commands(self) -> Iterable[tuple[str, str, str]]:
        return ((b.description, b.tooltip, b.action) for b in FleetScreen.BINDINGS
                if isinstance(b, Binding))

    async def discover(self) -> Hits:
        for name, help_text, action in self._commands():
            yield DiscoveryHit(name, self._runner(action), help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, help_text, action in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), self._runner(action), help=help_text)

    def _runner(self, action: str) -> Callable[[], object]:
        screen = self.screen
        return lambda: screen.run_action(action)


class RowReader:
    """The fleet table's reading of its rows: in a worker thread, when the store changed
    (paced while a long history loads), one read at a time; the rows read go to the
    screen (`FleetScreen.rows`, `show_rows`)."""

    def __init__(self, screen: FleetScreen, store: RunStore, rows_of: RowsOf, *,
                 clock: Callable[[], float], reading_history: Callable[[], bool],
                 prices_of: Callable[[], Mapping[str, float]] | None,
                 painted: Callable[[], object] | None) -> None:
        self.screen, self.store, self.rows_of, self.clock = screen, store, rows_of, clock
        self.reading_history = reading_history
        self.prices_of = prices_of
        self.prices: Mapping[str, float] | None = None  # the Hub's, once asked
        self.painted = painted  # told once every row is on screen
        self.seen = (-1, -1.0)  # (the store's runs_version, time) of the rows read
        self.reading = False  # a read of the rows is under way
        self.read_from = 0.0  # when the read under way began (perf_counter)
        self.next_read = 0.0  # no read before then (perf_counter): see `poll`
        self.said_reading = False  # the title says the history is being read
        self.runs_read = 0  # how many runs the last read counted (its rows: maybe the first)

    def poll(self) -> None:
        """Read the rows again when the store changed (or every few seconds: the ages),
        one read at a time (a thousand runs take a while: reads never pile up)."""
        screen = self.screen
        version, when = self.seen
        loading = self.reading_history()
        if loading != self.said_reading:  # said in the title
            self.said_reading = loading
            screen.show_title()
        more_runs = self.store.run_count != self.runs_read  # a row each, at once
        partial = len(screen.rows) < self.runs_read  # the first screen's rows: the rest now
        if self.reading or (time.perf_counter() < self.next_read and loading
                            and not more_runs and not partial):
            return
        if self.store.runs_version != version or self.clock() - when >= 5 or partial:
            self.reading = True
            self.read_from = time.perf_counter()
            screen.run_worker(self._read_rows, thread=True, exclusive=True,
                              group="fleet-rows", exit_on_error=False,
                              description="reading the fleet")

    def _read_rows(self) -> None:
        now, version = self.clock(), self.store.runs_version
        try:
            self._read(now, version)
        except Exception:
            # Said once (the app's worker-error handler); read again when the store
            # changes or the ages are due, not at every poll (a toast every 0.5 s).
            self.seen = (version, now)
            raise
        finally:
            self.reading = False

    def _first_rows(self) -> int | None:
        """How many rows the first read of a big fleet reads (the newest, a screen's
        worth, shown at once; the next read reads them all); None: every row."""
        screen = self.screen
        if (screen.rows or screen.current is not None or screen.filter
                or screen.sort is not None or screen.group is not None):
            return None
        n = max(FIRST_ROWS, screen.app.size.height)
        return n if self.store.run_count > n else None

    def _read(self, now: float, version: int) -> None:
        first = self._first_rows()
        rows = self.rows_of(self.store, now, self.prices, first)
        runs = self.store.run_count  # counted after its rows (a poll's runs come whole)
        app = self.screen.app
        if self.prices_of is not None and needs_prices(rows):
            ask, self.prices_of = self.prices_of, None  # once
            try:
                self.prices = ask()
            except Exception as exc:  # noqa: BLE001 - a missing price is a missing cost, said
                app.call_from_thread(self.screen.notify, f"job cost unknown: {describe(exc)}",
                                     severity="warning")
            else:
                rows = self.rows_of(self.store, now, self.prices, first)
        app.call_from_thread(self.take, rows, version, now,
                             max(runs, len(rows)) if first else len(rows))

    def take(self, rows: list[FleetRow], version: int, now: float, runs: int) -> None:
        """On the UI thread: the rows read (of `runs` runs: the first screen's, or all)."""
        screen = self.screen
        self.seen = (version, now)
        screen.rows, self.runs_read = rows, runs
        screen.show_rows()
        if len(rows) < runs:  # the first screen's: every row next, once they are drawn
            screen.call_after_refresh(self.poll)
        elif rows and self.painted is not None:  # every row on screen
            screen.call_after_refresh(self.painted)
            self.painted = None
        # While a backlog of history is read (a big project loading: the store changes
        # all the time), the rows are read again once READ_PACE times what this read and
        # its showing took has passed (the table takes a small share of the time, the
        # loading the rest), and not before LOADING_READ_S while they are a preview's;
        # the moment the loading is done, they are read.
        took = time.perf_counter() - self.read_from
        previewed = LOADING_READ_S if any(r.provisional for r in rows) else 0.0
        self.next_read = time.perf_counter() + max(READ_PACE * took, previewed)


class FleetTable(FixedWidthTable):
    """The fleet's table: left and right scroll it sideways a column at a time (the
    columns kept in place, the mark and the run's name, stay)."""

    def action_cursor_right(self) -> None:
        self._scroll_columns(+1)

    def action_cursor_left(self) -> None:
        self._scroll_columns(-1)

    def _scroll_columns(self, direction: int) -> None:
        widths = [c.get_render_width(self) for c in self.ordered_columns]
        fixed = sum(widths[:self.fixed_columns])
        starts = [sum(widths[:i]) - fixed for i in range(self.fixed_columns, len(widths))]
        x = round(self.scroll_x)
        if direction > 0:
            target = next((s for s in starts if s > x), self.max_scroll_x)
        else:
            target = max((s for s in starts if s < x), default=0)
        self.scroll_to(x=min(max(0, target), self.max_scroll_x), animate=False)


class FleetScreen(Screen[str | None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(k.key, k.action, k.description, id=k.id, tooltip=k.tooltip, show=k.show)
        for k in FLEET_KEYS
    ]
    COMMANDS: ClassVar = {FleetCommands}
    DEFAULT_CSS = """
    FleetScreen #fleet-title { height: 1; padding: 0 1; background: $panel; }
    FleetScreen #fleet-filter { height: 3; border: round $primary; }
    FleetScreen #fleet-filter.-hidden { display: none; }
    FleetScreen #fleet-error { height: auto; padding: 0 1; color: $error; }
    FleetScreen #fleet-error.-hidden { display: none; }
    FleetScreen DataTable { height: 1fr; }
    FleetScreen DataTable > .datatable--fixed { background: $surface; }
    """

    def __init__(self, store: RunStore, *, rows_of: RowsOf | None = None,
                 clock: Callable[[], float] = time.time, current: str | None = None,
                 selected: Iterable[str] = (),
                 prices_of: Callable[[], Mapping[str, float]] | None = None,
                 reading_history: Callable[[], bool] = lambda: False,
                 painted: Callable[[], object] | None = None):
        """`prices_of`: each Jobs flavor's price per hour (the Hub's list), asked once, in
        the worker, when a run is a job: its cost is that times the hours it ran.
        `reading_history`: whether a source is reading a backlog of history (the table is read
        less often meanwhile, and at once when it is done). `painted`: called once the first
        rows are on screen (sources hold a long history back until then)."""
        super().__init__()
        self.store = store
        self.clock = clock
        self.reader = RowReader(self, store, rows_of or store_rows(), clock=clock,
                                reading_history=reading_history, prices_of=prices_of,
                                painted=painted)
        self.current = current  # the run on the dashboard: the cursor starts on it
        self.rows: list[FleetRow] = []  # every run, as last read
        self.shown: list[FleetRow] = []  # the rows on screen, in order
        self.filter = FleetFilter("")
        self.sort: str | None = None  # a column key; None: the store's order (newest first)
        self.reverse = False
        self.group: str | None = None  # a config key
        self.selected: list[str] = list(selected)  # run keys, in the order chosen
        self.hidden: set[str] = load_hidden()  # the columns hidden with `c` (kept)
        self._columns: list[Column] = []  # the data columns shown
        self._shown_header: list[tuple[str, str, int]] = []  # (key, label, width) shown
        self._cells: dict[str, tuple] = {}  # run key -> its cells as shown

    def compose(self) -> ComposeResult:
        yield Static(id="fleet-title")
        yield Input(placeholder="phase:crystallisation state:live lr>=1e-4 name~grpo "
                                "(enter applies, esc closes)", id="fleet-filter",
                    classes="-hidden")
        yield Static(id="fleet-error", classes="-hidden")
        # Every column has a set width: its cells are never measured (a thousand rows).
        table = FleetTable(id="fleet-table", cursor_type="row", zebra_stripes=True)
        yield table
        yield KeyFooter()

    @property
    def table(self) -> DataTable:
        return self.query_one("#fleet-table", DataTable)

    def on_mount(self) -> None:
        self.title = "carl-tui · fleet"
        self.table.focus()
        self.show_title()
        self.set_interval(POLL_S, self.poll)
        self.poll()

    def poll(self) -> None:
        """Look whether the store changed (`RowReader.poll`)."""
        self.reader.poll()

    @property
    def prices(self) -> Mapping[str, float] | None:
        return self.reader.prices

    # -- showing -----------------------------------------------------------------

    def config_keys(self) -> list[str]:
        from carl_tui.store.fleet import differing_keys

        return differing_keys(self.rows)

    def show_rows(self) -> None:
        """Lay the rows out: filtered, sorted, grouped; the columns that fit."""
        if not self.is_mounted:
            return
        now = self.clock()
        rows = [r for r in self.rows if self.filter.matches(r)]
        all_columns = columns_for(self.config_keys(), rows or self.rows)
        sort = next((c for c in all_columns if c.key == self.sort), None)
        arranged = arrange(rows, sort, self.reverse, self.group)
        columns = shown_columns(all_columns, rows or self.rows, now, self.hidden)
        # The mark, the group and the run's name stay in place as the table scrolls sideways.
        self.table.fixed_columns = 3 if self.group else 2
        colors = getattr(self.app, "theme_variables", {})
        cells = {r.run.key: self._row_cells(r, label, columns, now, colors)
                 for r, label in arranged}
        order = [r.run.key for r, _ in arranged]
        header = self._header(columns, rows, [label for _, label in arranged], now)
        shown = [r.run.key for r in self.shown]
        if not shown or header != self._shown_header or order[:len(shown)] != shown:
            self._rebuild(columns, header, order, cells)
        else:  # the same rows, maybe more after them (a big fleet's first screen, then all)
            self._update({key: cells[key] for key in shown})
            for key in order[len(shown):]:
                self.table.add_row(*cells[key], key=key)
        self.shown = [r for r, _ in arranged]
        self._cells = cells
        self.table.refresh()
        self.show_title()

    def _row_cells(self, row: FleetRow, label: str, columns: list[Column], now: float,
                   colors) -> tuple:
        mark = Text(MARK, style="bold") if row.run.key in self.selected else Text(" ")
        group = (label,) if self.group else ()
        cells = (c.cell(row, now, colors) for c in columns)
        # Text, never markup: a run named `grpo [REDACTED]` keeps its brackets.
        return (mark, *map(as_text, group), *map(as_text, cells))

    def _header(self, columns: list[Column], rows: list[FleetRow], groups: list[str],
                now: float) -> list[tuple[str, str, int]]:
        """(key, label, width) of each column shown: the selection mark, the group, the
        data; widths from the rows shown (the same rows: the same layout)."""
        out = [("mark", " ", 1)]
        if self.group:
            label = f"{self.group} (group)"
            out.append(("group", label, max(len(g) for g in [label, *groups])))
        for c in columns:
            label = self._label(c)
            out.append((c.key, label, max(len(label), column_width(c, rows, now))))
        return out

    def _rebuild(self, columns: list[Column], header: list[tuple[str, str, int]],
                 order: list[str], cells: dict) -> None:
        table = self.table
        cursor = self.cursor_run() or self.current
        if header != self._shown_header:
            table.clear(columns=True)
            self._columns, self._shown_header = columns, header
            for key, label, width in header:
                table.add_column(label, key=key, width=width)
        else:
            table.clear()
        for key in order:
            table.add_row(*cells[key], key=key)
        if cursor in order:
            table.move_cursor(row=order.index(cursor), animate=False)

    def _update(self, cells: dict) -> None:
        keys = [key for key, _, _ in self._shown_header]
        for run_key, row in cells.items():
            old = self._cells.get(run_key, ())
            for i, (col, value) in enumerate(zip(keys, row, strict=True)):
                if i >= len(old) or str(old[i]) != str(value):
                    self.table.update_cell(run_key, col, value)

    def _label(self, column: Column) -> str:
        if column.key != self.sort:
            return column.label
        return f"{column.label} {'▼' if self.reverse else '▲'}"

    def show_title(self) -> None:
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append("fleet", style="bold")
        n, shown = self.reader.runs_read, len(self.shown)
        t.append(f" · {n} run{'s' if n != 1 else ''}" if n else " · no runs yet")
        if self.reader.said_reading:
            t.append(" · reading their history", style="italic")
            if any(r.provisional for r in self.rows):
                t.append(" (≈: the preview's values meanwhile)", style="italic")
        if self.filter:
            t.append(f" · {shown} shown · filter: {self.filter.text}")
        if self.sort:
            t.append(f" · sorted by {self.sort.removeprefix('config:')}"
                     f"{' (reversed)' if self.reverse else ''}")
        if self.group:
            t.append(f" · grouped by {self.group}")
        if self.selected:
            t.append(f" · {len(self.selected)} selected (compared on the plots)")
        self.query_one("#fleet-title", Static).update(t)

    def on_resize(self) -> None:
        self.show_rows()

    def cursor_run(self) -> str | None:
        table = self.table
        if not table.row_count:
            return None
        key, _ = table.coordinate_to_cell_key(table.cursor_coordinate)
        return key.value

    # -- keys ----------------------------------------------------------------------

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.row_key.value:
            self.open_run(event.row_key.value)

    def action_open_run(self) -> None:
        key = self.cursor_run()
        if key:
            self.open_run(key)

    def open_run(self, key: str) -> None:
        """Show the run on the dashboard, the selected runs compared with it: the table
        closes with the run's key, which the app switches to."""
        self.dismiss(key)

    def action_filter(self) -> None:
        """`/`: the filter box over the table."""
        box = self.query_one("#fleet-filter", Input)
        box.remove_class("-hidden")
        box.value = self.filter.text
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """A bad filter says why under the box, and the last good one stays."""
        event.stop()
        keys = {k for r in self.rows for k in r.config}
        error = self.query_one("#fleet-error", Static)
        try:
            self.filter = parse_filter(event.value, keys)
        except FilterError as exc:
            error.update(Text(f"{exc} (the filter stays: {self.filter.text or 'none'})"))
            error.remove_class("-hidden")
            return
        error.add_class("-hidden")
        self._close_filter()
        self.show_rows()

    def _close_filter(self) -> None:
        self.query_one("#fleet-filter", Input).add_class("-hidden")
        self.query_one("#fleet-error", Static).add_class("-hidden")
        self.table.focus()

    def action_close(self) -> None:
        if not self.query_one("#fleet-filter", Input).has_class("-hidden"):
            self._close_filter()
            return
        self.dismiss(None)

    def action_toggle_select(self) -> None:
        key = self.cursor_run()
        if key is None:
            return
        if key in self.selected:
            self.selected.remove(key)
        else:
            self.selected.append(key)
        # overlaid on every plot of the run shown
        self.post_message(CompareSelected(tuple(self.selected)))
        self.show_rows()

    def action_card(self) -> None:
        from carl_tui.ui.screens.run_card import RunCardScreen

        key = self.cursor_run()
        if key is None:
            self.notify("no run here", severity="warning")
            return
        compared = [k for k in self.selected if k != key]
        self.app.push_screen(RunCardScreen(self.store, key, compared, now=self.clock(),
                                           prices=self.prices))

    def action_cycle_sort(self) -> None:
        keys = [None, *(c.key for c in self._columns)]
        i = keys.index(self.sort) if self.sort in keys else 0
        self.sort, self.reverse = keys[(i + 1) % len(keys)], False
        self.show_rows()

    def action_reverse_sort(self) -> None:
        self.reverse = not self.reverse
        self.show_rows()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        key = event.column_key.value
        if key in ("mark", "group"):
            return
        self.reverse = not self.reverse if key == self.sort else False
        self.sort = key
        self.show_rows()

    def action_choose_columns(self) -> None:
        from carl_tui.ui.fleet_choice import choose_columns

        choose_columns(self)

    def action_cycle_group(self) -> None:
        keys = [None, *self.config_keys()]
        if len(keys) == 1:
            self.notify("no config key differs between the runs: nothing to group by",
                        severity="warning")
            return
        i = keys.index(self.group) if self.group in keys else 0
        self.group = keys[(i + 1) % len(keys)]
        self.show_rows()


def screen_keys(screen) -> list[Binding]:
    """The keys of the screen in view, for the help: the fleet table's, or none."""
    if isinstance(screen, FleetScreen):
        return [b for b in FleetScreen.BINDINGS if isinstance(b, Binding)]
    return []
