"""`M` on the dashboard: every metric of the run at once, small multiples. Each cell is
a block chart of the metric's points over the run, its name in the top border and its
last value in the bottom one; as many cells as the screen holds, paged (`pagedown`,
`pageup`) when there are more. The names follow the dashboard's `/` filter. The grid
reads the run afresh each second while it is open."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid
from textual.screen import Screen
from textual.widgets import Static

from carl_tui.metric_names import display_order
from carl_tui.ui.format import cut_middle, value_text
from carl_tui.ui.widgets.key_footer import KeyFooter

if TYPE_CHECKING:  # pragma: no cover
    from carl_tui.store import RunSnapshot
    from carl_tui.store.snapshot import SeriesView

CELL_WIDTH = 32  # columns a cell needs: a name, a value, a readable chart
CELL_HEIGHT = 7  # rows: its borders and five rows of chart
BLOCKS = " ▁▂▃▄▅▆▇█"


def block_chart(values: Sequence[float], width: int, height: int) -> list[str]:
    """`values` (oldest first) as `height` rows of block characters, `width` columns: each
    column the mean of its share of the points (or the point it falls on), scaled between
    their min and max."""
    vals = [v for v in values if not math.isnan(v)]
    if not vals or width <= 0 or height <= 0:
        return [" " * max(width, 0)] * max(height, 0)
    cols = []
    for i in range(width):  # fewer points than columns: each point over several
        a = i * len(vals) // width
        part = vals[a:max((i + 1) * len(vals) // width, a + 1)]
        cols.append(sum(part) / len(part))
    lo, hi = min(cols), max(cols)
    span = hi - lo
    eighths = [height * 8 if span == 0 else round((c - lo) / span * (height * 8 - 1)) + 1
               for c in cols]
    rows = []
    for r in range(height - 1, -1, -1):  # the top row first
        row = "".join(BLOCKS[max(0, min(8, e - r * 8))] for e in eighths)
        rows.append(row.ljust(width))
    return rows


class MetricCell(Static):
    DEFAULT_CSS = """
    MetricCell { border: round $primary-darken-2; height: 100%; padding: 0 1; }
    """

    def show(self, name: str, s: SeriesView) -> None:
        width = self.size.width or CELL_WIDTH - 4  # (inside its border and padding)
        height = self.size.height or CELL_HEIGHT - 2
        self.border_title = cut_middle(name, max(4, width - 4))
        self.border_subtitle = value_text(s.last)
        rows = block_chart([float(v) for v in s.values], width, height)
        self.update(Text("\n".join(rows), no_wrap=True))


class MetricGridScreen(Screen[None]):
    """`snapshot`: reads the run on screen (the dashboard's latest); `names`: which of its
    metrics to show (the `/` filter)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,M", "app.pop_screen", "Back", id="grid.close"),
        Binding("pagedown,n", "page(1)", "Next page", id="grid.next"),
        Binding("pageup,b", "page(-1)", "Previous page", id="grid.previous"),
    ]
    DEFAULT_CSS = """
    MetricGridScreen Grid { grid-gutter: 0 1; height: 1fr; }
    MetricGridScreen #grid-title { height: 1; text-style: bold; padding: 0 1; }
    """

    def __init__(self, snapshot: Callable[[], RunSnapshot | None],
                 names: Callable[[Sequence[str]], list[str]] = list):
        super().__init__()
        self._snapshot = snapshot
        self._names = names
        self.page = 0
        self._shown: tuple = ()

    def compose(self) -> ComposeResult:
        yield Static(id="grid-title")
        yield Grid(id="metric-grid")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.call_after_refresh(self.refresh_grid)
        self.set_interval(1.0, self.refresh_grid)

    def on_resize(self) -> None:
        self.call_after_refresh(self.refresh_grid)

    def metrics(self) -> list[str]:
        snap = self._snapshot()
        return [] if snap is None else self._names(sorted(snap.series, key=display_order))

    def per_page(self) -> tuple[int, int]:
        """(columns, rows) of cells the screen holds."""
        grid = self.query_one(Grid)
        width = grid.size.width or self.app.size.width
        height = grid.size.height or self.app.size.height - 2
        return max(1, width // CELL_WIDTH), max(1, height // CELL_HEIGHT)

    def pages(self) -> int:
        cols, rows = self.per_page()
        return max(1, -(-len(self.metrics()) // (cols * rows)))

    def action_page(self, delta: int) -> None:
        self.page = (self.page + delta) % self.pages()
        self.refresh_grid()

    def refresh_grid(self) -> None:
        snap = self._snapshot()
        names = self.metrics()
        cols, rows = self.per_page()
        per = cols * rows
        self.page = min(self.page, self.pages() - 1)
        shown = names[self.page * per:(self.page + 1) * per]
        grid = self.query_one(Grid)
        grid.styles.grid_size_columns = cols
        # A page with fewer metrics than room: the rows it needs share the height (taller
        # charts), not a strip at the top of an empty screen.
        grid.styles.grid_size_rows = max(1, min(rows, -(-len(shown) // cols)))
        self.query_one("#grid-title", Static).update(
            f"every metric ({len(names)}) · page {self.page + 1}/{self.pages()} · "
            "pagedown/pageup (n/b): pages · esc: back")
        if tuple(shown) != self._shown:
            self._shown = tuple(shown)
            grid.remove_children()
            grid.mount_all([MetricCell() for _ in shown])
            self.call_after_refresh(self.refresh_grid)
            return
        if snap is None:
            return
        for cell, name in zip(grid.query(MetricCell), shown):
            cell.show(name, snap.series[name])
