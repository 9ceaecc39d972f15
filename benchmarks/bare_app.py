"""The reference of the startup benchmark: a bare Textual app (one line of text).

    python -m benchmarks.bare_app
"""

from textual.app import App
from textual.widgets import Static

READY = "bare textual app ready"


class BareApp(App[None]):
    def compose(self):
        yield Static(READY)


if __name__ == "__main__":
    BareApp().run()
