"""The README's picture of `carl-tui serve`: the dashboard as a browser shows it.

    python screenshots/browser.py [--out screenshots/browser.png] [--chromium PATH]

Serves the recording of a real tiny demo run (read-only, 127.0.0.1, a free port), opens
the printed URL in the system's Chromium through Playwright (extra `dev`), waits for the
dashboard to be drawn and its start-up notices to go, and saves the page as a PNG.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
VIEWPORT = {"width": 1400, "height": 850}
NOTICES_GONE_MS = 12_000  # the start-up notices stay 10 s


def shoot(url: str, chromium: str, out: Path) -> None:
    from playwright.sync_api import sync_playwright

    received: list[str] = []

    def frame(payload) -> None:
        received.append(payload.decode("utf-8", "replace") if isinstance(payload, bytes)
                        else payload)

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport=VIEWPORT)
        page.on("websocket", lambda ws: ws.on("framereceived", frame))
        page.goto(url)
        for _ in range(600):  # the panels, within a minute
            if all(t in "".join(received) for t in ("metrics", "CRYSTALLISED", "Quit")):
                break
            page.wait_for_timeout(100)
        else:
            raise SystemExit("the dashboard was not drawn in the page")
        page.wait_for_timeout(NOTICES_GONE_MS)
        page.screenshot(path=str(out))
        browser.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=HERE / "browser.png")
    p.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = p.parse_args()
    from tests.serving import start_serving

    served = start_serving("--watch", "recordings/tiny-demo.jsonl", plant=False)
    try:
        shoot(served.url, args.chromium, args.out)
    finally:
        served.stop()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
