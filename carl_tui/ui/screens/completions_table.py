"""`a`: what the model said. The completions of the run in view, one logged step at a
time: prompt, completion, each reward, the advantage (and the CARL score from the CARL
stream), coloured by the row's total reward within the step.

`[` `]` step back and forth, home/end the first and latest step, `{` `}` the edges of the
phases (the first completions logged in each phase), `/` search the text (`n` / `N`: the
next / previous step with a match), `s` sort. On the latest step the view follows new
steps as they are logged. Tables are read in a worker thread (a step not in memory is
read back from its file, row or server); the log's lock keeps one reader at a time.
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Input, Static

from carl_tui.completions.log import CompletionLog
from carl_tui.completions.model import CompletionTable
from carl_tui.ui import completions_view as cv
from carl_tui.ui.widgets.key_footer import KeyFooter
from carl_tui.ui.widgets.text_table import TextTable

TEXT_WIDTH = 48  # the widest a prompt or completion cell is drawn (the detail shows all)


class SharedLog:
    """A run's `CompletionLog` and the lock that keeps one thread in it at a time."""

    def __init__(self, log: CompletionLog):
        self.log = log
        self.lock = threading.Lock()

    def close(self, timeout: float = 1.0) -> None:
        """Close the log's readers once no worker is in them (one still reading after
        `timeout`, from a slow server, keeps them: the app is ending)."""
        if self.lock.acquire(timeout=timeout):
            try:
                self.log.close()
            finally:
                self.lock.release()


class CompletionsScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,a,q", "app.pop_screen", "Close", id="completions.close",
                tooltip="Back to the dashboard"),
        Binding("left_square_bracket", "step(-1)", "Prev step", id="completions.prev",
                tooltip="The previous logged step"),
        Binding("right_square_bracket", "step(1)", "Next step", id="completions.next",
                tooltip="The next logged step"),
        Binding("left_curly_bracket", "phase(-1)", "Prev phase", id="completions.prev_phase",
                tooltip="The first completions of the previous phase"),
        Binding("right_curly_bracket", "phase(1)", "Next phase", id="completions.next_phase",
                tooltip="The first completions of the next phase"),
        Binding("home", "first", "First", id="completions.first", show=False, priority=True,
                tooltip="The first logged step"),
        Binding("end", "latest", "Latest", id="completions.latest", show=False, priority=True,
                tooltip="The latest step (and follow new ones)"),
        Binding("slash", "search", "Search", id="completions.search",
                tooltip="Show only completions whose prompt or completion holds a text"),
        Binding("n", "find(1)", "Next match", id="completions.find_next", show=False,
                tooltip="The next step with a match"),
        Binding("N", "find(-1)", "Prev match", id="completions.find_prev", show=False,
                tooltip="The previous step with a match"),
        Binding("s", "sort", "Sort", id="completions.sort",
                tooltip="Order: as logged, by total reward (down, up), by advantage"),
    ]
    DEFAULT_CSS = """
    CompletionsScreen #compl-head { height: auto; padding: 0 1; background: $panel; }
    CompletionsScreen #compl-table { height: 1fr; }
    CompletionsScreen #compl-detail { height: auto; max-height: 12; padding: 0 1;
        border-top: solid $primary; }
    CompletionsScreen #compl-search { dock: bottom; display: none; }
    CompletionsScreen #compl-search.-shown { display: block; }
    """

    def __init__(self, shared: SharedLog, run_label: str, snapshot: Any):
        super().__init__()
        self.shared = shared
        self.run_label = run_label
        self.snapshot = snapshot  # a callable: the run's newest snapshot (phases), or None
        self.steps: list[int] = []
        self.table: CompletionTable | None = None
        self.step: int | None = None
        self.follow = True  # on the latest step: move on as steps are logged
        self.sort = cv.SORTS[0]
        self.search_text = ""
        self.problem = ""
        self.shown_rows: list[int] = []  # positions (as logged) of the rows on screen
        self._asked = 0  # steps asked for by a key so far

    def compose(self) -> ComposeResult:
        yield Static("", id="compl-head")
        yield TextTable(id="compl-table", cursor_type="row", zebra_stripes=True)
        yield Static("", id="compl-detail")
        yield Input(placeholder="search prompts and completions (enter; empty: all)",
                    id="compl-search")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.set_interval(1.0, self._poll)
        self._poll()

    # -- reading (worker threads) -------------------------------------------------------

    # What the screen wants is read here, on its thread, and handed to the worker: a
    # worker's table is shown only if no step was asked for since it began (`_asked`).

    def _poll(self) -> None:
        want = None if self.follow else self.step  # None: the latest
        have, asked = self.table, self._asked
        self.run_worker(lambda: self._poll_work(want, have, asked), thread=True,
                        exclusive=True, group="completions", exit_on_error=False,
                        description="reading completions")

    def _poll_work(self, want: int | None, have: CompletionTable | None, asked: int) -> None:
        with self.shared.lock:
            log = self.shared.log
            changed = log.poll()
            steps = log.steps
            target = steps[-1] if want is None and steps else want
            reload = changed or have is None or target != have.step
            table = log.table(target) if reload and target is not None else None
            errors = [*log.errors, *filter(None, [log.skipped_text()])]
        self.app.call_from_thread(self._arrived, steps, table, errors, asked)

    def _load(self, step: int, *, find: int = 0) -> None:
        """Show `step` (with `find`: the first step from there on, that way, with a match)."""
        self._asked += 1
        asked, query = self._asked, self.search_text
        self.run_worker(lambda: self._load_work(step, find, query, asked), thread=True,
                        exclusive=True, group="completions", exit_on_error=False,
                        description="reading completions")

    def _load_work(self, step: int, find: int, query: str, asked: int) -> None:
        with self.shared.lock:
            log = self.shared.log
            table = log.table(step)
            if find:
                steps = log.steps
                i = steps.index(step) if step in steps else 0
                while table is not None and not cv.ordered(table, "as logged", query):
                    i += find
                    if not 0 <= i < len(steps):
                        table = None
                        break
                    table = log.table(steps[i])
            steps = log.steps
        if table is None and find:
            self.app.call_from_thread(self.notify, f"no other step holds {query!r}",
                                      severity="warning", timeout=3)
            return
        self.app.call_from_thread(self._arrived, steps, table, [], asked)

    # -- showing (UI thread) --------------------------------------------------------------

    def _arrived(self, steps: list[int], table: CompletionTable | None,
                 errors: list[str], asked: int) -> None:
        self.steps = steps
        self.problem = "; ".join(errors)
        if table is not None and asked == self._asked:
            redraw = table is not self.table
            self.table, self.step = table, table.step
            self.follow = bool(steps) and table.step == steps[-1] and self.follow
            if redraw:
                self._fill()
        self._head()

    def _history(self) -> tuple:
        snap = self.snapshot()
        return snap.phase.history if snap is not None else ()

    def _edges(self) -> list[cv.Edge]:
        snap = self.snapshot()
        if snap is None:
            return []
        cascade = snap.cascade.trigger_step if snap.cascade.fired else None
        return cv.edges(snap.phase.history, self.steps, cascade)

    def _head(self) -> None:
        head = Text()
        head.append(f"{self.run_label} · completions", style="bold")
        if self.step is None:
            head.append("\nnone logged yet: TRL's GRPO trainer logs them with "
                        "log_completions=True; the CARL callback writes a sample.")
        else:
            i = self.steps.index(self.step) + 1 if self.step in self.steps else 0
            t = self.table
            head.append(f" · step {self.step} ({i} of {len(self.steps)})")
            head.append(f" · from {t.origin}" if t else "")
            if t is not None and t.decimals is not None:
                head.append(f" (printed to {t.decimals} decimals, TRL's sample)", style="dim")
            head.append(f" · sort: {self.sort}")
            if self.search_text:
                head.append(f" · search: {self.search_text!r}", style="bold yellow")
            if self.follow:
                head.append(" · following", style="green")
            head.append("\n")
            if t is not None and _scored_twice(t):
                head.append(CARL_TWICE + "\n", style="dim")
            self._edges_line(head)
        if self.problem:
            head.append(f"\n{self.problem}", style="red")
        self.query_one("#compl-head", Static).update(head)

    def _edges_line(self, head: Text) -> None:
        history = self._history()
        current = cv.phase_at(history, self.step) if self.step is not None else ""
        head.append("phase: ")
        head.append(current or "–", style="bold")
        edges = self._edges()
        if edges:
            head.append(" · edges ({ }):")
            for i, e in enumerate(edges):
                head.append(" · " if i else " ")
                style = "bold reverse" if e.step == self.step else "underline"
                head.append(f"{e.phase}@{e.step}", style=style)

    def _fill(self) -> None:
        dt = self.query_one("#compl-table", DataTable)
        t = self.table
        dt.clear(columns=True)
        if t is None:
            return
        names = t.reward_names
        carl = any(r.carl is not None for r in t.rows)
        dt.add_columns("#", "prompt", "completion", *names,
                       *(["total"] if len(names) > 1 else []), "advantage",
                       *(["CARL score"] if carl else []))
        lo, hi = cv.total_range(t)
        rows = cv.ordered(t, self.sort, self.search_text)
        self.shown_rows = [i for i, _ in rows]
        for i, r in rows:
            style = cv.reward_style(r.total, lo, hi)
            nums = [Text(cv.fmt(v, t.decimals), style=style, justify="right")
                    for _, v in r.rewards]
            if len(names) > 1:
                nums.append(Text(cv.fmt(r.total, t.decimals), style=f"bold {style}",
                                 justify="right"))
            nums.append(Text(cv.fmt(r.advantage, t.decimals), justify="right"))
            if carl:
                nums.append(Text(cv.fmt(r.carl, 3), justify="right"))
            dt.add_row(str(i + 1), _cell(r.prompt), Text(_cell(r.completion), style=style),
                       *nums)
        self._detail(0)

    def _detail(self, pos: int) -> None:
        out = Text()
        if self.table is not None and 0 <= pos < len(self.shown_rows):
            r = self.table.rows[self.shown_rows[pos]]
            out.append("prompt: ", style="bold")
            out.append(r.prompt + "\n")
            out.append("completion: ", style="bold")
            out.append(r.completion)
        elif self.table is not None and self.search_text:
            out.append(f"no completion of step {self.step} holds {self.search_text!r} "
                       "(n / N: the next / previous step with one)", style="yellow")
        self.query_one("#compl-detail", Static).update(out)

    @on(DataTable.RowHighlighted, "#compl-table")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._detail(event.cursor_row)

    # -- keys --------------------------------------------------------------------------------

    def _go(self, step: int | None) -> None:
        if step is not None:
            self.follow = bool(self.steps) and step == self.steps[-1]
            self._load(step)

    def action_step(self, delta: int) -> None:
        if self.step in self.steps:
            i = self.steps.index(self.step) + delta
            if 0 <= i < len(self.steps):
                self._go(self.steps[i])

    def action_first(self) -> None:
        self._go(self.steps[0] if self.steps else None)

    def action_latest(self) -> None:
        self._go(self.steps[-1] if self.steps else None)

    def action_phase(self, delta: int) -> None:
        edges = self._edges()
        if not edges or self.step is None:
            self.notify("no phase edges with completions yet", severity="warning", timeout=3)
            return
        after = [e.step for e in edges if (e.step > self.step if delta > 0 else e.step < self.step)]
        if after:
            self._go(after[0] if delta > 0 else after[-1])

    def action_sort(self) -> None:
        self.sort = cv.SORTS[(cv.SORTS.index(self.sort) + 1) % len(cv.SORTS)]
        self._fill()
        self._head()

    def action_search(self) -> None:
        box = self.query_one("#compl-search", Input)
        box.add_class("-shown")
        box.value = self.search_text
        box.focus()

    @on(Input.Submitted, "#compl-search")
    def _searched(self, event: Input.Submitted) -> None:
        self.search_text = event.value.strip()
        event.input.remove_class("-shown")
        self.query_one("#compl-table", DataTable).focus()
        self._fill()
        self._head()

    def action_find(self, direction: int) -> None:
        if not self.search_text or self.step not in self.steps:
            return
        i = self.steps.index(self.step) + direction
        if 0 <= i < len(self.steps):
            self.follow = False
            self._load(self.steps[i], find=direction)


def _cell(text: str) -> str:
    one = " ".join(text.split())
    return one if len(one) <= TEXT_WIDTH else one[: TEXT_WIDTH - 1] + "…"


def open_shared_log(logs: dict[str, SharedLog], factory: Any, snap: Any) -> SharedLog | None:
    """The run's log, made on first use from `factory(run, meta)`; None without readers."""
    shared = logs.get(snap.run.key)
    if shared is None:
        readers = factory(snap.run, snap.meta) if factory is not None else []
        if not readers:
            return None
        shared = logs[snap.run.key] = SharedLog(CompletionLog(readers))
    return shared


def open_completions(app: Any, logs: dict[str, SharedLog], factory: Any) -> None:
    """`a`: push the view on the run on screen (a notice when it has no completions);
    `factory(run, meta)` makes the readers of a run's completions."""
    snap = app.snapshot
    if snap is None:
        app.notify("no run yet", severity="warning")
        return
    shared = open_shared_log(logs, factory, snap)
    if shared is None:
        app.notify(f"{snap.run.label}: this source holds no completions", severity="warning")
        return
    key = snap.run.key
    app.push_screen(CompletionsScreen(
        shared, snap.run.label, lambda: app.snapshot if app.current_run == key else None))


#: Why a reward named carl and the CARL score of one completion differ (0.833 beside 0.897).
CARL_TWICE = ("carl: the reward the trainer gave at generation · CARL score: the CARL "
              "composite scored again when the step was logged, after the step's update")


def _scored_twice(table) -> bool:
    """The sample has both a reward named like carl and a CARL score."""
    return (any("carl" in name.lower() for name in table.reward_names)
            and any(r.carl is not None for r in table.rows))
