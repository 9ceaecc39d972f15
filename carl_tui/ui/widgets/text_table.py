"""The tables of the app: a DataTable and a Rich table whose strings are text, never
Rich markup.

Textual's DataTable reads a `str` cell, column label or row label as markup: a
prompt holding Llama-2's `[/INST]`, or a metric named `[/oops]`, ended the app with
`MarkupError`, and `[bold red]` was drawn styled instead of shown. Every table of
the app is a `TextTable` or a `PlainTable` (a test holds to it), so a string reaches the screen as
the characters it holds; a cell meant to be styled is given as a `rich.text.Text`.
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table
from rich.text import Text
from textual.widgets import DataTable


def as_text(value: Any) -> Any:
    """A string as plain `Text` (its brackets shown, not parsed); anything else as is."""
    return Text(value, end="") if isinstance(value, str) else value


class TextTable(DataTable):
    """`DataTable` with every string cell and label taken as text."""

    def add_column(self, label: Any, *, width: int | None = None, key: str | None = None,
                   default: Any = None):
        return super().add_column(as_text(label), width=width, key=key,
                                  default=as_text(default))

    def add_row(self, *cells: Any, height: int | None = 1, key: str | None = None,
                label: Any = None):
        return super().add_row(*map(as_text, cells), height=height, key=key,
                               label=as_text(label))

    def update_cell(self, row_key: Any, column_key: Any, value: Any, *,
                    update_width: bool = False) -> None:
        super().update_cell(row_key, column_key, as_text(value), update_width=update_width)

    def update_cell_at(self, coordinate: Any, value: Any, *, update_width: bool = False) -> None:
        super().update_cell_at(coordinate, as_text(value), update_width=update_width)


def _text(value: Any) -> Any:
    """A string for a Rich table with its brackets escaped: drawn as it was written, and
    through Rich's own path for strings (a title's style, highlighting), as before."""
    if not isinstance(value, str):
        return value
    # escape() doubles a final backslash (it would escape what follows): Text keeps it.
    return Text(value) if value.endswith("\\") else escape(value)


class PlainTable(Table):
    """Rich's `Table` (the cards, the help, the skipped input), its strings (title,
    caption, headers, cells) taken as text, never markup."""

    def __init__(self, *headers: Any, title: Any = None, caption: Any = None, **kw: Any):
        super().__init__(*map(_text, headers), title=_text(title),
                         caption=_text(caption), **kw)

    def add_column(self, header: Any = "", footer: Any = "", **kw: Any) -> None:
        super().add_column(_text(header), _text(footer), **kw)

    def add_row(self, *renderables: Any, **kw: Any) -> None:
        super().add_row(*map(_text, renderables), **kw)
