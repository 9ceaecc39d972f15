"""Regenerate the SVG screenshots the README shows: `python screenshots/make.py`.

Every screen is rendered in both themes: the dashboard, the launch form (`l`),
the jobs list (`j`), the diagnosis (`d`, an answer streamed by a fake of
Claude), the help (`?`), the skipped-input view (`k`) and the 80x24 layout.
The dark theme's file is `NAME.svg`, the light one's `NAME-light.svg`.

Deterministic: the recording of a real tiny demo run (recordings/tiny-demo.jsonl)
is played back at once with fixed clocks, and the Hub and Claude are loopback
fakes (tests/fakes) started here: nothing goes to the network and no real token
is read or sent.

    python screenshots/make.py                       # every screen, both themes
    python screenshots/make.py --only dashboard help --theme carl-light --out /tmp/shots
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import html
import json
import os
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SIZE = (160, 45)
THEMES = ("carl-dark", "carl-light")
# The recording is replayed as if it had started at this wall time (2026-01-01 00:00 UTC),
# and the screen's clock reads a few seconds after its last line.
WALL_START = 1_767_225_600.0
AFTER_END_S = 3.0
SETTLE_TRIES = 400  # x 0.05 s: how long a screen may take to load before giving up


def recording() -> Path:
    real = ROOT / "recordings" / "tiny-demo.jsonl"
    return real if real.exists() else ROOT / "carl_tui" / "data" / "demo_recording.jsonl"


def recording_stamp(path: Path | None = None) -> str:
    """What a published picture is made from: the recording (its SHA-256), its last step,
    and where its gate and cascade fired. Written into every SVG and into the GIF; a
    test compares it with the current recording, so a picture that falls behind says so."""
    import hashlib

    from carl_tui.sources.replay import ReplaySource
    from carl_tui.store import RunStore

    path = path or recording()
    store = RunStore()
    store.apply(ReplaySource(path, speed=0).poll())
    (run,) = store.runs()
    snap = store.snapshot(run.key)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return (f"made from {path.name} (sha256 {digest}): last step {snap.last_step}, "
            f"crystallised at {snap.gate.trigger_step}, CARL on at "
            f"{snap.cascade.trigger_step}")


def stamped(svg: str, stamp: str) -> str:
    """The SVG with `stamp` in a comment just inside its root element."""
    at = svg.index(">", svg.index("<svg")) + 1
    return f"{svg[:at]}\n<!-- carl-tui screenshot {html.escape(stamp)} -->{svg[at:]}"


def svg_stamp(svg: str) -> str | None:
    """The stamp written by `stamped`, if any."""
    found = re.search(r"<!-- carl-tui screenshot (.*?) -->", svg)
    return html.unescape(found[1]) if found else None


def recording_span(path: Path) -> float:
    """Seconds between the first and the last timed line of a recording."""
    from carl_tui.sources.replay import ReplaySource

    source = ReplaySource(path, speed=0)
    source._load()
    return source._due[-1] if source._due else 0.0


_TEXT = re.compile(r'<text [^>]*?x="(?P<x>[\d.]+)"[^>]*?textLength="(?P<len>[\d.]+)"[^>]*?'
                   r'clip-path="url\(#[^)]*-line-(?P<line>\d+)\)"[^>]*>(?P<body>[^<]*)</text>')


def svg_lines(svg: str) -> list[str]:
    """The terminal's text in one of Textual's SVG screenshots, line by line (what a reader
    of the picture sees, for checks)."""
    texts = [(float(m["x"]), float(m["len"]), int(m["line"]),
              html.unescape(m["body"]).replace("\xa0", " ")) for m in _TEXT.finditer(svg)]
    widths = Counter(round(n / len(b), 3) for _, n, _, b in texts if b and b.isascii())
    cell = widths.most_common(1)[0][0] if widths else 1.0
    rows: dict[int, dict[int, str]] = {}
    for x, _, line, body in texts:
        row = rows.setdefault(line, {})
        for i, ch in enumerate(body, start=round(x / cell)):
            row[i] = ch
    out = []
    for n in range(max(rows, default=-1) + 1):
        row = rows.get(n, {})
        out.append("".join(row.get(c, " ") for c in range(max(row, default=-1) + 1)).rstrip())
    return out


def file_name(name: str, theme: str) -> str:
    """`dashboard.svg` for the dark theme (the README's), `dashboard-light.svg` for the light."""
    return f"{name}.svg" if theme == "carl-dark" else f"{name}-{theme.removeprefix('carl-')}.svg"


def damaged_copy(path: Path, folder: Path) -> Path:
    """The recording with a few lines damaged the ways real streams are (a line cut short
    by a crash, a print between the JSON lines, a value written as "nan", a step that is
    not an integer), for the skipped-input view. Same file name, in `folder`."""
    lines = path.read_bytes().splitlines()
    rows = [i for i, raw in enumerate(lines) if raw.startswith(b'{"step"')]
    if len(rows) < 8:
        return path
    cut, printed, nan, bad_step = (rows[len(rows) * k // 8] for k in (1, 3, 5, 7))
    fixed: dict[int, list[bytes]] = {}
    fixed[cut] = [lines[cut][: len(lines[cut]) * 3 // 5], lines[cut]]
    step = json.loads(lines[printed])["step"]
    fixed[printed] = [lines[printed], f"Saving model checkpoint to out/checkpoint-{step}".encode()]
    obj = json.loads(lines[nan])
    key = next((k for k in ("grad_norm", "loss") if k in obj), None)
    if key is not None:
        obj[key] = "nan"
    fixed[nan] = [json.dumps(obj).encode()]
    obj = json.loads(lines[bad_step])
    obj["step"] = obj["step"] + 0.5
    fixed[bad_step] = [json.dumps(obj).encode()]
    out = Path(folder) / path.name
    out.write_bytes(b"\n".join(x for i, raw in enumerate(lines) for x in fixed.get(i, [raw]))
                    + b"\n")
    return out


# -- the loopback fakes --------------------------------------------------------------------


@dataclass
class Fakes:
    """A fake Hub (jobs, hardware, whoami) and a fake Claude on one loopback server."""

    url: str
    jobs: Any  # tests.fakes.hub_jobs.JobsState
    claude: Any  # tests.fakes.anthropic_api.AnthropicState


def _example_jobs(state) -> None:
    now = time.time()
    state.add_job("68f2a1c9e4b07d3a", flavor="a10g-small", stage="RUNNING",
                  labels={"app": "carl-tui", "run": "tiny-reverse-seed1"}, created_at=now - 660,
                  started_at=now - 600)
    state.add_job("68f1d07b2c9e5a14", flavor="a10g-largex4", stage="COMPLETED",
                  labels={"app": "carl-tui", "run": "qwen-grpo-gsm8k"},
                  created_at=now - 5.2 * 3600, started_at=now - 5.1 * 3600,
                  finished_at=now - 2.3 * 3600)
    state.add_job("68f0c3e15d7a9b02", flavor="t4-small", stage="ERROR",
                  message="CUDA out of memory", created_at=now - 26 * 3600,
                  command=["python", "train.py", "--max-steps", "400", "--carl"])
    state.add_job("68ef9b44a1c2e8f0", flavor="a100-large", stage="CANCELED",
                  labels={"app": "carl-tui"}, created_at=now - 3 * 86400)


def diagnosis_answer(snap) -> str:
    """What the fake Claude answers: a diagnosis made from the run's own numbers."""
    from carl_tui.ui.format import short_value

    gate, cascade = snap.gate, snap.cascade
    lines = ["**Verdict:** the run is healthy and has done what the demo sets out to show.", ""]
    if gate.fired:
        peak = ""
        if gate.peak_entropy is not None:
            peak = (f" after entropy peaked at {short_value(gate.peak_entropy)} "
                    f"(step {gate.peak_entropy_step})")
        lines.append(f"- **SFT crystallised:** `{gate.metric}` held above "
                     f"{short_value(gate.threshold)} and the gate fired at step "
                     f"{gate.trigger_step}{peak}.")
    if cascade.fired:
        lines.append(f"- **Cascade:** the CARL reward joined the task reward at step "
                     f"{cascade.trigger_step} (stage {cascade.stage}).")
    reward = snap.series.get("reward")
    if reward is not None and reward.last is not None:
        lines.append(f"- **GRPO:** reward is {short_value(reward.last)} at step {snap.last_step} "
                     f"(from {short_value(reward.min)}).")
    phi = snap.series.get("phi")
    if phi is not None and phi.last is not None:
        stage = f" of the {snap.phase.stage} stage" if snap.phase.stage else ""
        lines.append(f"- **Order parameter:** phi is {short_value(phi.last)}, in the "
                     f"**{snap.phase.phase or 'unknown'}** phase{stage}.")
    lines += ["", ("**Next:** nothing to fix. To go further, run more GRPO steps with the "
                   "CARL reward on, or push this checkpoint (`p`).")]
    return "\n".join(lines)


@contextlib.contextmanager
def _environ(**values: str) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def fakes() -> Iterator[Fakes]:
    """Start the loopback fakes and point the Hub and Claude clients at them (tokens are the
    fakes' own), for the duration of the `with`."""
    import huggingface_hub.constants as hc

    from tests.fakes.anthropic_api import TEST_KEY, AnthropicState, install_messages_routes
    from tests.fakes.hub_jobs import JobsState, install_jobs_routes
    from tests.fakes.hub_repos import (
        TEST_TOKEN,
        HubState,
        install_job_launch_routes,
        install_repo_routes,
    )
    from tests.fakes.server import FakeServer

    with FakeServer() as srv:
        jobs, claude = JobsState(token=TEST_TOKEN), AnthropicState()
        install_repo_routes(srv, HubState())
        install_jobs_routes(srv, jobs, whoami=False)
        install_job_launch_routes(srv, jobs)
        install_messages_routes(srv, claude)
        _example_jobs(jobs)
        old_endpoint = hc.ENDPOINT
        hc.ENDPOINT = srv.url
        try:
            with _environ(HF_TOKEN=TEST_TOKEN, HF_ENDPOINT=srv.url, ANTHROPIC_API_KEY=TEST_KEY,
                          ANTHROPIC_BASE_URL=srv.url):
                yield Fakes(srv.url, jobs, claude)
        finally:
            hc.ENDPOINT = old_endpoint


# -- the screens ---------------------------------------------------------------------------


def _has(attr: str) -> Callable[[Any], bool]:
    return lambda app: bool(getattr(app.screen, attr, None))


def _diagnosed(app) -> bool:
    screen = app.screen
    return bool(getattr(screen, "history", None)) and not getattr(screen, "busy", True)


@dataclass(frozen=True)
class Shot:
    """One screen: the keys that open it, the terminal size, and what must be on it before
    the picture is taken."""

    name: str
    keys: tuple[str, ...] = ()
    size: tuple[int, int] = SIZE
    ready: Callable[[Any], bool] | None = None
    plot_metrics: tuple[str, ...] = ()
    damaged: bool = False  # play a damaged copy of the recording (see damaged_copy)


SHOTS: dict[str, Shot] = {s.name: s for s in (
    Shot("dashboard"),
    Shot("launch", ("l",), ready=_has("_flavors")),
    Shot("jobs", ("j",), ready=_has("rows")),
    Shot("diagnosis", ("d",), ready=_diagnosed),
    Shot("help", ("question_mark",)),
    Shot("skipped", ("k",), damaged=True),
    Shot("dashboard-80x24", size=(80, 24)),
)}


def make_app(theme: str = "carl-dark", *, hub_endpoint: str | None = None,
             plot_metrics: Sequence[str] = (), path: Path | None = None):
    """The dashboard on the recording, played at once, with fixed clocks."""
    from carl_tui.actions.diagnosis import Diagnoser
    from carl_tui.sources.replay import ReplaySource
    from carl_tui.ui.app import DashboardConfig, Services, Settings, build_app

    path = path or recording()
    now = WALL_START + recording_span(path) + AFTER_END_S
    source = ReplaySource(path, speed=float("inf"), wall_clock=lambda: WALL_START)
    settings = Settings(theme=theme, refresh_interval=0.05, plot_metrics=tuple(plot_metrics))
    services = Services(clock=lambda: now, hub_endpoint=hub_endpoint,
                        diagnoser_factory=lambda: Diagnoser(max_retries=0, timeout=20.0))
    app = build_app(DashboardConfig(sources=[source], settings=settings, services=services))
    return app, source


async def wait_until(pilot, predicate: Callable[[], bool], what: str) -> None:
    """Wait until `predicate()`, up to SETTLE_TRIES x 0.05 s (then TimeoutError)."""
    for _ in range(SETTLE_TRIES):
        if predicate():
            return
        await pilot.pause(0.05)
    raise TimeoutError(f"screenshot: {what} did not happen in time")


async def render_svg(shot: Shot, theme: str = "carl-dark", fake: Fakes | None = None,
                     path: Path | None = None) -> str:
    """The SVG of one screen (the dashboard with `shot.keys` pressed)."""
    path = path or recording()
    if shot.damaged:
        with tempfile.TemporaryDirectory() as tmp:
            return await _render_svg(shot, theme, fake, damaged_copy(path, Path(tmp)))
    return await _render_svg(shot, theme, fake, path)


async def _render_svg(shot: Shot, theme: str, fake: Fakes | None, path: Path) -> str:
    app, source = make_app(theme, hub_endpoint=fake.url if fake else None,
                           plot_metrics=shot.plot_metrics, path=path)
    async with app.run_test(size=shot.size) as pilot:
        await wait_until(pilot, lambda: source.finished and app.snapshot is not None
                    and app.snapshot.last_step is not None, "loading the recording")
        await wait_until(pilot, lambda: app.snapshot.version == app.store.run_version(
            app.current_run), "showing the whole recording")
        if fake is not None:
            fake.claude.replies = [diagnosis_answer(app.snapshot)]
        await pilot.pause(0.2)
        app.clear_notifications()
        for key in shot.keys:
            await pilot.press(key)
        if shot.ready is not None:
            await wait_until(pilot, lambda: shot.ready(app), f"{shot.name} being ready")
        await pilot.pause(0.3)
        app.clear_notifications()
        return await settled_screenshot(app, pilot)


async def settled_screenshot(app, pilot, tries: int = 40) -> str:
    """The screen once it stops changing: cursors do not blink (a blink would make two
    pictures of the same screen differ) and two exports in a row are the same."""
    for widget in app.screen.query("*"):
        if getattr(widget, "cursor_blink", False):
            widget.cursor_blink = False
    await pilot.pause(0.05)
    last = app.export_screenshot(title="carl-tui")
    for _ in range(tries):
        await pilot.pause(0.1)
        svg = app.export_screenshot(title="carl-tui")
        if svg == last:
            return svg
        last = svg
    raise TimeoutError("screenshot: the screen kept changing")


async def shoot(shot: Shot, theme: str = "carl-dark", out_dir: Path = HERE,
                fake: Fakes | None = None) -> Path:
    out = Path(out_dir) / file_name(shot.name, theme)
    svg = stamped(await render_svg(shot, theme, fake), recording_stamp())
    out.write_text(svg, encoding="utf-8")
    return out


async def write_themes(name: str, render: Callable[[str], Awaitable[str]],
                       themes: Sequence[str] = THEMES, out_dir: Path = HERE) -> list[Path]:
    """One screen's SVG in each theme: `render(theme)` draws it."""
    written = []
    for theme in themes:
        out = Path(out_dir) / file_name(name, theme)
        out.write_text(await render(theme), encoding="utf-8")
        print(out, flush=True)
        written.append(out)
    return written


def themed_main(doc: str, name: str, render: Callable[[str], Awaitable[str]],
                argv: Sequence[str] | None = None) -> int:
    """The command line of a script that draws one screen in each theme."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--theme", nargs="+", default=list(THEMES), choices=THEMES)
    parser.add_argument("--out", type=Path, default=HERE, help="folder (default: screenshots/)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    asyncio.run(write_themes(name, render, args.theme, args.out))
    return 0


async def render_all(names: Sequence[str] = (), themes: Sequence[str] = THEMES,
                     out_dir: Path = HERE) -> list[Path]:
    """Write the SVG of every screen in `names` (all when empty) in every theme."""
    unknown = [n for n in names if n not in SHOTS]
    if unknown:
        raise SystemExit(f"unknown screen(s) {', '.join(unknown)}; known: {', '.join(SHOTS)}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with fakes() as fake:
        for name in names or list(SHOTS):
            for theme in themes:
                written.append(await shoot(SHOTS[name], theme, out_dir, fake))
                print(written[-1], flush=True)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", default=[], metavar="NAME",
                        help=f"screens to render (default: all): {', '.join(SHOTS)}")
    parser.add_argument("--theme", nargs="+", default=list(THEMES), choices=THEMES)
    parser.add_argument("--out", type=Path, default=HERE, help="folder (default: screenshots/)")
    args = parser.parse_args(argv)
    asyncio.run(render_all(args.only, args.theme, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
