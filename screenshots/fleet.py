"""The fleet table of a real sweep: `python screenshots/fleet.py` writes fleet.svg and
fleet-light.svg here (`--out DIR` elsewhere).

The sweep: the `tiny-*` runs of the test corpus (tests/data/real_runs), tiny models
trained by TRL's own SFT and GRPO trainers (make_tiny.py) over learning rates, widths,
depths, batch sizes and lengths. Each is written as the JSONL stream the TRL callback
writes (its config: the run's spec; its logged rows one second apart, the last one
seconds to hours before the screen's clock), and `carl-tui fleet` reads them with a
fixed clock: deterministic.

    python screenshots/fleet.py
    python screenshots/fleet.py --theme carl-light --out /tmp/shots
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from screenshots.make import (
    THEMES,
    settled_screenshot,
    themed_main,
    wait_until,
    write_themes,
)
from tests.real_runs import CORPUS, load_run

NOW = 1_767_225_600.0  # the screen's clock (2026-01-01 00:00 UTC)
SIZE = (200, 20)  # wide enough for the sweep's axes (kind, width, depth, learning rate...)
#: How long before NOW each run logged its last row, in turn: a few are still live.
ENDED_AGO_S = (20.0, 300.0, 1_500.0, 45.0, 3_600.0, 7_200.0)


def sweep_files() -> list[Path]:
    """The corpus's tiny TRL runs, in name order."""
    return sorted(CORPUS.glob("tiny-*.json"))


def write_sweep(folder: Path) -> list[Path]:
    """Each run of the sweep as a JSONL stream in `folder`; the streams' paths."""
    out = []
    for i, path in enumerate(sweep_files()):
        doc = json.loads(path.read_text())
        rows = load_run(path).rows
        source = doc.get("source", {})
        config = dict(source.get("spec") or {})
        last = NOW - ENDED_AGO_S[i % len(ENDED_AGO_S)] - i  # no two at once: one order
        stream = folder / f"{doc['name']}.jsonl"
        with open(stream, "w", encoding="utf-8") as f:
            f.write(json.dumps({"event": "meta", "run_id": doc["name"], "name": doc["name"],
                                "project": "sweep", "config": config}) + "\n")
            f.writelines(json.dumps({"step": step, "time": last - (len(rows) - 1 - j),
                                    **values}) + "\n" for j, (step, values) in enumerate(rows))
        out.append(stream)
    return out


def make_app(paths: list[Path], theme: str):
    from carl_tui.sources.open import open_file
    from carl_tui.ui.app import DashboardConfig, Services, Settings, build_app

    settings = Settings(theme=theme, refresh_interval=0.05, fleet=True)
    return build_app(DashboardConfig(sources=[open_file(p) for p in paths], settings=settings,
                                     services=Services(clock=lambda: NOW)))


def last_steps(paths: list[Path]) -> dict[str, str]:
    """Each run's last logged step, as the table's step column shows it."""
    out = {}
    for path in paths:
        *_, line = path.read_text(encoding="utf-8").splitlines()
        out[path.stem] = str(json.loads(line)["step"])
    return out


async def render_svg(theme: str = "carl-dark") -> str:
    """The SVG of the fleet table once every run is read whole."""
    from carl_tui.ui.screens.fleet_table import FleetScreen

    with tempfile.TemporaryDirectory(prefix="carl-fleet-shot-") as tmp:
        paths = write_sweep(Path(tmp))
        want = last_steps(paths)
        app = make_app(paths, theme)
        async with app.run_test(size=SIZE) as pilot:

            def read_whole() -> bool:
                screen = app.screen
                if not isinstance(screen, FleetScreen) or not screen.is_mounted:
                    return False
                table = screen.table
                shown = {str(n): str(s) for n, s in zip(table.get_column("name"),
                                                        table.get_column("step"), strict=True)}
                return shown == want and not any(r.provisional for r in screen.rows)

            await wait_until(pilot, read_whole, "the sweep read whole")
            app.screen.poll()  # the rows as of now (ages included)
            await pilot.pause(0.3)
            app.clear_notifications()
            return await settled_screenshot(app, pilot)


async def render_all(themes=THEMES, out_dir: Path = HERE) -> list[Path]:
    return await write_themes("fleet", render_svg, themes, out_dir)


def main(argv=None) -> int:
    return themed_main(__doc__, "fleet", render_svg, argv)


if __name__ == "__main__":
    sys.exit(main())
