"""The frame the form dialogs share (jobs, launch, push): centred, a thick border
in the theme's primary colour, a bold title line."""

from __future__ import annotations


def dialog_css(name: str, *, width: int, max_height: str) -> str:
    """The frame of the screen class `name` (a `Vertical` inside it); the screen adds
    its own rules after it."""
    return f"""
    {name} {{ align: center middle; }}
    {name} > Vertical {{
        width: {width}; height: auto; max-height: {max_height};
        border: thick $primary; background: $surface; padding: 0 1;
    }}
    {name} .title {{ text-style: bold; padding: 0 0 1 0; }}
    """
