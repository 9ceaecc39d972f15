"""The health row on a real run made to fail: `python screenshots/health.py` writes
health.svg and health-light.svg here (`--out DIR` elsewhere).

The run: a real tiny GRPO run of the test corpus (tests/data/real_runs_more), trained by
TRL's own GRPOTrainer with a reward that pays for length and a small
`max_completion_length`, so that its completions run into the length cap (and, later,
its groups stop differing in reward). It is written as the JSONL stream the TRL callback
writes (its rows one second apart, the last one a minute before the screen's clock) and
the dashboard reads it whole with a fixed clock: deterministic.

    python screenshots/health.py
    python screenshots/health.py --theme carl-light --out /tmp/shots
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
from tests.real_runs import load_run

NOW = 1_767_225_600.0  # the screen's clock (2026-01-01 00:00 UTC)
SIZE = (160, 45)
RUN = ROOT / "tests" / "data" / "real_runs_more" / "tiny-grpo-truncation-b.json"
ENDED_AGO_S = 60.0


def write_run(folder: Path) -> tuple[Path, int]:
    """The run as a JSONL stream in `folder`: (its path, its last step)."""
    doc = json.loads(RUN.read_text())
    rows = load_run(RUN).rows
    config = dict(doc.get("source", {}).get("spec") or {})
    stream = folder / f"{doc['name']}.jsonl"
    last = NOW - ENDED_AGO_S
    with open(stream, "w", encoding="utf-8") as f:
        f.write(json.dumps({"event": "meta", "run_id": doc["name"], "name": doc["name"],
                            "project": "health", "config": config}) + "\n")
        f.writelines(json.dumps({"step": step, "time": last - (len(rows) - 1 - j),
                                 **values}) + "\n" for j, (step, values) in enumerate(rows))
    return stream, rows[-1][0]


def make_app(path: Path, theme: str):
    from carl_tui.sources.open import open_file
    from carl_tui.ui.app import DashboardConfig, Services, Settings, build_app

    settings = Settings(theme=theme, refresh_interval=0.05)
    return build_app(DashboardConfig(sources=[open_file(path)], settings=settings,
                                     services=Services(clock=lambda: NOW)))


async def render_svg(theme: str = "carl-dark") -> str:
    """The SVG of the dashboard once the run is read whole."""
    with tempfile.TemporaryDirectory(prefix="carl-health-shot-") as tmp:
        path, last = write_run(Path(tmp))
        app = make_app(path, theme)
        async with app.run_test(size=SIZE) as pilot:

            def read_whole() -> bool:
                snap = app.snapshot
                return (snap is not None and snap.last_step == last and not snap.provisional
                        and app.screen is app.dashboard)

            await wait_until(pilot, read_whole, "the run read whole")
            await pilot.pause(0.3)
            app.clear_notifications()
            return await settled_screenshot(app, pilot)


async def render_all(themes=THEMES, out_dir: Path = HERE) -> list[Path]:
    return await write_themes("health", render_svg, themes, out_dir)


def main(argv=None) -> int:
    return themed_main(__doc__, "health", render_svg, argv)


if __name__ == "__main__":
    sys.exit(main())
