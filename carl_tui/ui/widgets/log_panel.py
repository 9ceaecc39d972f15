"""The run's raw log lines, scrollable, with follow mode."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.widgets import Log

if TYPE_CHECKING:  # pragma: no cover
    from carl_tui.store.snapshot import RunSnapshot


class LogPanel(Log):
    """Appends only the lines it has not shown yet; follow mode keeps the end in view."""

    DEFAULT_CSS = """
    LogPanel { height: 12; overflow: auto; }
    """

    def __init__(self, **kw):
        super().__init__(max_lines=5000, auto_scroll=True, **kw)
        self._run_key: str | None = None
        self._shown_total = 0
        self._at_end = True  # the view shows the newest line (or will, once it can scroll)

    @property
    def follow(self) -> bool:
        return self.auto_scroll

    def set_follow(self, on: bool) -> None:
        self.auto_scroll = on
        if on:
            self._at_end = True
            self.scroll_end(animate=False)
        self.border_subtitle = "follow" if on else "paused (F to follow)"

    def watch_virtual_size(self) -> None:
        # New lines, or their width worked out (Textual's Log does that in a worker): in
        # follow mode a panel at its end shows the new end, once the refresh has given
        # it a scrollbar (a panel whose lines fitted, showing another run, has none yet).
        if self.auto_scroll and self._at_end:
            self.call_after_refresh(self._follow_end)

    def _follow_end(self) -> None:
        if self.auto_scroll and self._at_end:  # still: the user may have scrolled since
            self.scroll_end(animate=False, x_axis=False, immediate=True)

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        # Scrolled back by the user: new lines no longer move the view (until the user
        # scrolls to the end again, or presses F).
        self._at_end = new >= self.max_scroll_y

    def on_resize(self) -> None:
        # Lines written while the panel was hidden (no size yet) scrolled nowhere: once
        # it has a size, follow mode shows the newest lines (after the refresh that lays
        # them out: before it, the end may still be the top).
        if self.auto_scroll:
            self.scroll_end(animate=False, x_axis=False)

    def show(self, snap: RunSnapshot | None) -> None:
        if snap is None:
            return
        if snap.run.key != self._run_key:
            self._at_end = True  # another run: its newest lines
            self.clear()
            self._run_key = snap.run.key
            self._shown_total = 0
        new = snap.log_total - self._shown_total
        if new <= 0:
            return
        lines = snap.log_tail[-min(new, len(snap.log_tail)) :]
        self.write_lines(lines)
        self._shown_total = snap.log_total
