"""The frame every dialog shares, written once: centred on the screen, a box in the
theme's colours around one container, a bold title line. Each dialog (the forms: jobs,
launch, push; the confirmation; the diagnosis; the pickers; the read-only views and the
help) says only its size and, where it differs, its border and padding."""

from __future__ import annotations

TITLE = "text-style: bold; padding: 0 0 1 0;"


def dialog_css(
    name: str,
    *,
    width: int | str,
    max_height: str | None = "90%",
    height: str = "auto",
    max_width: str | None = None,
    border: str = "thick $primary",
    padding: str = "0 1",
    inner: str = "Vertical",
    title: str = TITLE,
) -> str:
    """The frame of the screen class `name` (the `inner` container inside it); the
    screen adds its own rules after it. `title`: the style of its `.title` line."""
    limit = f" max-width: {max_width};" if max_width else ""
    high = f" max-height: {max_height};" if max_height else ""
    title_rule = f"    {name} .title {{ {title} }}\n" if title else ""
    return f"""
    {name} {{ align: center middle; }}
    {name} > {inner} {{
        width: {width};{limit} height: {height};{high}
        border: {border}; background: $surface; padding: {padding};
    }}
{title_rule}    """
