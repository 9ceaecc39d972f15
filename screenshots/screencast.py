"""Render screenshots/demo.gif: the dashboard watching the recorded demo unfold.

    python screenshots/screencast.py                  # the whole story, about 30 s of GIF
    python screenshots/screencast.py --frames 3       # a quick smoke: 3 moments only
    python screenshots/screencast.py --keep-frames /tmp/frames   # also keep every PNG

The recording of a real tiny demo run (recordings/tiny-demo.jsonl) is played by
`ReplaySource` on a fake clock that this script advances frame by frame, and the
source is polled here, between frames, so every frame is deterministic. The
story: loading, the SFT stage melting and crystallising (the gate's notice), GRPO,
the cascade switching the CARL reward on (its notice), then a few keys (`w`
smoothing, `x` time axis, `?` help). The moments of the gate and of the cascade
are found in the data (the store's own gate and cascade), never hard-coded, so a
new recording works as it is.

Frames are Textual's own screenshots (SVG). Braille plot dots are drawn as
vector dots in their terminal cells (so no font decides their width), the text is
rasterised by resvg (`resvg-py`, self-contained) in Source Code Pro when
`fontpkg-source-code-pro` is installed (a monospace font without ligatures; else
the system's monospace font), and Pillow writes the GIF with one palette for all
frames. Needs the `screencast` extra: resvg-py, Pillow, fontpkg-source-code-pro.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import importlib.util
import math
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _load_make():
    """screenshots/make.py (screenshots/ is no package)."""
    if "carl_screenshots_make" in sys.modules:
        return sys.modules["carl_screenshots_make"]
    spec = importlib.util.spec_from_file_location("carl_screenshots_make", HERE / "make.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = module  # type: ignore[union-attr]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


shots = _load_make()

SIZE = (160, 45)
PLAYBACK_S = 18.0  # GIF seconds the recording's whole span is played in
FPS = 5.0  # frames per GIF second while it plays
LOADING_S = 1.2  # the empty dashboard, connecting
MOMENT_S = 2.5  # the pause on the gate's and on the cascade's notice
END_S = 1.5  # the finished run, before the keys
NOTICE_S = 3.0  # GIF seconds a notice stays up
KEYS: tuple[tuple[str, float], ...] = (("w", 2.5), ("x", 2.5), ("question_mark", 3.0))
WIDTH = 1120  # pixels of the GIF (160 columns: 7 px a cell)
COLORS = 128  # the GIF's palette


# -- the story in the recording ------------------------------------------------------------


class _SimClock:
    """The clock the recording is played on, advanced by the script."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@dataclass(frozen=True)
class Story:
    """When things happen in a recording, in seconds after its first timed line."""

    span: float
    gate_step: int | None = None
    gate_t: float | None = None
    cascade_step: int | None = None
    cascade_t: float | None = None


def _due_times(path: Path) -> list[float]:
    """When `ReplaySource` releases each line, in seconds after the first timed line (a
    line without a time goes with the latest time before it), in order, distinct."""
    import orjson

    from carl_tui.sources.rows import TIME_KEY

    first: float | None = None
    due, out = 0.0, [0.0]
    for raw in path.read_bytes().splitlines():
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        t = obj.get(TIME_KEY) if type(obj) is dict else None
        if type(t) in (int, float) and math.isfinite(t):
            first = t if first is None else first
            due = max(due, t - first)
            if due > out[-1]:
                out.append(due)
    return out


def find_story(path: Path) -> Story:
    """Replay the recording into a store, time by time, and note when the store announces
    its gate firing and the cascade switching (what the dashboard shows as notices)."""
    from carl_tui.sources.replay import ReplaySource
    from carl_tui.store import RunStore

    clock = _SimClock()
    source = ReplaySource(path, speed=1.0, clock=clock, wall_clock=lambda: shots.WALL_START)
    store = RunStore()
    times = _due_times(path)
    seen: dict[str, tuple[int | None, float]] = {}
    for t in times:
        clock.t = t
        store.apply(source.poll())
        for notice in store.take_notices():
            if notice.kind in ("phase_transition", "cascade"):
                seen.setdefault(notice.kind, (notice.step, t))
    gate_step, gate_t = seen.get("phase_transition", (None, None))
    cascade_step, cascade_t = seen.get("cascade", (None, None))
    return Story(times[-1], gate_step, gate_t, cascade_step, cascade_t)


@dataclass(frozen=True)
class Frame:
    """Show the recording up to `t` (None: before the first poll), after pressing `keys`;
    the frame stays `duration` GIF seconds."""

    t: float | None
    duration: float
    keys: tuple[str, ...] = ()
    label: str = ""


def schedule(story: Story, *, playback_s: float = PLAYBACK_S, fps: float = FPS,
             frames: int | None = None) -> list[Frame]:
    """The frames of the GIF. `frames`: only that many evenly spaced moments of the playback
    (a quick smoke), the pauses and the keys kept."""
    span = story.span
    count = frames if frames is not None else max(2, round(playback_s * fps))
    times = {span * i / (count - 1) for i in range(count - 1)} | {span}
    moments = {}
    for t, label in ((story.gate_t, "gate"), (story.cascade_t, "cascade")):
        if t is not None:
            times.add(t)
            moments[t] = label
    ordered = sorted(times)
    per_s = playback_s / span if span else 0.0  # GIF seconds per recorded second
    out = [Frame(None, LOADING_S, label="loading")]
    for i, t in enumerate(ordered):
        if i + 1 == len(ordered):
            duration = END_S
        elif frames is None:
            duration = max(0.05, (ordered[i + 1] - t) * per_s)
        else:
            duration = playback_s / count
        if t in moments:
            duration += MOMENT_S
        out.append(Frame(t, duration, label=moments.get(t, "end" if i + 1 == len(ordered)
                                                        else "")))
    for key, hold in KEYS:
        out.append(Frame(span, hold, (key,), label=f"key {key}"))
    return out


# -- driving the dashboard -----------------------------------------------------------------


@dataclass
class _Notices:
    """Notices stay up NOTICE_S seconds of GIF time, whatever the real time it takes."""

    app: Any
    born: dict[str, float] = field(default_factory=dict)

    def install(self) -> None:
        original = self.app.notify

        def notify(message, *, title: str = "", **kw) -> None:
            kw["timeout"] = 24 * 3600.0  # removed by `expire`, in GIF time
            original(message, title=title, **kw)

        self.app.notify = notify

    def expire(self, now: float) -> None:
        current = list(getattr(self.app, "_notifications", ()))
        for n in current:
            self.born.setdefault(n.identity, now)
        old = [n for n in current if now - self.born[n.identity] >= NOTICE_S]
        if not old:
            return
        unnotify = getattr(self.app, "_unnotify", None)
        for n in old:
            if unnotify is not None:
                unnotify(n, refresh=n is old[-1])
        if unnotify is None:
            self.app.clear_notifications()


async def frames_svg(path: Path, plan: Sequence[Frame], theme: str = "carl-dark",
                     size: tuple[int, int] = SIZE):
    """Yield (frame, SVG) for each frame of `plan`, the recording played on a fake clock."""
    from carl_tui.sources.base import SourceRunner, status_of
    from carl_tui.sources.replay import ReplaySource
    from carl_tui.ui.app import DashboardConfig, Services, Settings, build_app

    clock = _SimClock()
    source = ReplaySource(path, speed=1.0, clock=clock, wall_clock=lambda: shots.WALL_START)
    app = build_app(DashboardConfig(sources=[],
                                    settings=Settings(theme=theme, refresh_interval=0.05),
                                    services=Services(clock=lambda: shots.WALL_START + clock.t)))
    runner = SourceRunner(source, app.store.apply)
    notices = _Notices(app)
    gif_t = 0.0
    async with app.run_test(size=size, notifications=True) as pilot:
        notices.install()
        await pilot.pause(0.1)
        app.store.apply([status_of(source, "connecting")])
        for frame in plan:
            if frame.t is not None:
                clock.t = frame.t
                runner.poll_once()
            app.pull()
            refresh = getattr(app, "_refresh_status", None)
            if refresh is not None:
                refresh()
            for key in frame.keys:
                await pilot.press(key)
            await pilot.pause()
            notices.expire(gif_t)
            await pilot.pause()
            await pilot.pause(0.02)
            yield frame, app.export_screenshot(title="carl-tui")
            gif_t += frame.duration


# -- SVG to PNG ----------------------------------------------------------------------------

_TEXT = re.compile(
    r'<text class="(?P<cls>[^"]+)" x="(?P<x>[\d.]+)" y="(?P<y>[\d.]+)" '
    r'textLength="(?P<len>[\d.]+)" clip-path="url\(#(?P<clip>[^)]+)\)">(?P<body>[^<]*)</text>')
_CLIP = re.compile(r'<clipPath id="(?P<id>[^"]+)">\s*<rect x="[\d.]+" y="(?P<y>[\d.]+)" '
                   r'width="[\d.]+" height="(?P<h>[\d.]+)"\s*/>')
# Braille dot n (bit n-1 of the code point) -> (column, row) in the 2x4 cell.
_DOTS = ((0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (0, 3), (1, 3))


def _is_braille(ch: str) -> bool:
    return 0x2800 <= ord(ch) <= 0x28FF


def braille_as_dots(svg: str) -> str:
    """Draw each braille character of Textual's SVG as dots in its own cell, the way a
    terminal shows them: no font (and no font fallback) decides where the dots fall."""
    clips = {m["id"]: (float(m["y"]), float(m["h"])) for m in _CLIP.finditer(svg)}

    def dots(m: re.Match) -> str:
        text = html.unescape(m["body"])
        if not any(_is_braille(c) for c in text) or m["clip"] not in clips:
            return m[0]
        from rich.cells import cell_len

        if any(cell_len(c) != 1 for c in text):
            return m[0]
        cls, x, width = m["cls"], float(m["x"]), float(m["len"]) / len(text)
        top, height = clips[m["clip"]]
        height = min(height, width * 2.1)
        top += (clips[m["clip"]][1] - height) / 2
        r = width * 0.18
        parts = []
        for i, ch in enumerate(text):
            left = x + i * width
            if not _is_braille(ch):
                if not ch.isspace():
                    parts.append(f'<text class="{cls}" x="{left:.1f}" y="{m["y"]}" '
                                 f'textLength="{width:.1f}" clip-path="url(#{m["clip"]})">'
                                 f"{html.escape(ch)}</text>")
                continue
            bits = ord(ch) - 0x2800
            for n, (col, row) in enumerate(_DOTS):
                if bits >> n & 1:
                    cx = left + width * (0.28 + 0.44 * col)
                    cy = top + height * (0.125 + 0.25 * row)
                    parts.append(f'<circle class="{cls}" cx="{cx:.1f}" cy="{cy:.1f}" '
                                 f'r="{r:.2f}"/>')
        return "".join(parts)

    return _TEXT.sub(dots, svg)


FONT = "Source Code Pro"  # monospace, no ligatures (">=" stays two cells), box drawing
FALLBACK_FONT = "DejaVu Sans Mono"
_FAMILY = re.compile(r"font-family: Fira Code, monospace;")


def _font() -> tuple[str, dict[str, Any]]:
    """The family and resvg's font options: Source Code Pro from `fontpkg-source-code-pro`
    when installed, else the system's monospace font. System fonts stay loaded for the
    few glyphs a font lacks."""
    try:
        import fontpkg

        files = [str(f.path) for f in fontpkg.family(FONT).files]
    except Exception:  # noqa: BLE001  (not installed: the system's fonts)
        return FALLBACK_FONT, {"monospace_family": FALLBACK_FONT, "font_family": FALLBACK_FONT}
    return FONT, {"font_files": files, "monospace_family": FONT, "font_family": FONT}


def svg_to_png(svg: str, width: int = WIDTH) -> bytes:
    """PNG bytes of one of Textual's SVG screenshots, braille as dots."""
    try:
        import resvg_py
    except ImportError:
        raise SystemExit("the screencast needs its extra: pip install resvg-py Pillow "
                         "fontpkg-source-code-pro") from None
    family, options = _font()
    svg = _FAMILY.sub(f"font-family: {family}, monospace;", braille_as_dots(svg))
    return bytes(resvg_py.svg_to_bytes(svg_string=svg, width=width, **options))


# -- the GIF -------------------------------------------------------------------------------


def palette_from(paths: Sequence[Path], colors: int = COLORS):
    """One palette for every frame, made from a sample of them."""
    from PIL import Image

    sample = [Image.open(p).convert("RGB") for p in paths]
    w, h = sample[0].size
    strip = Image.new("RGB", (w, h * len(sample)))
    for i, im in enumerate(sample):
        strip.paste(im, (0, i * h))
    return strip.quantize(colors=colors, method=Image.Quantize.MEDIANCUT,
                          dither=Image.Dither.NONE)


def write_gif(pngs: Sequence[Path], durations: Sequence[float], out: Path,
              colors: int = COLORS, comment: str = "") -> Path:
    """One palette for all frames; after the first, the pixels that did not change are
    transparent (the frame before shows through), which keeps the file small. `comment`:
    the GIF's comment (what it is made from: `make.recording_stamp`)."""
    import numpy as np
    from PIL import Image

    step = max(1, len(pngs) // 16)
    pal = palette_from(list(pngs[::step]) + [pngs[-1]], colors)
    clear = colors  # a palette index no pixel uses
    frames, before = [], None
    for p in pngs:
        index = np.asarray(Image.open(p).convert("RGB").quantize(
            palette=pal, dither=Image.Dither.NONE), dtype=np.uint8)
        shown = index.copy()
        if before is not None:
            shown[index == before] = clear
        before = index
        im = Image.frombytes("P", (shown.shape[1], shown.shape[0]), shown.tobytes())
        im.putpalette(pal.getpalette()[: 3 * colors] + [0, 0, 0])
        frames.append(im)
    frames[0].save(out, save_all=True, append_images=frames[1:], loop=0, optimize=False,
                   duration=[max(20, round(d * 100) * 10) for d in durations], disposal=1,
                   transparency=clear, comment=comment.encode())
    return out


async def render(out: Path, *, frames: int | None = None, theme: str = "carl-dark",
                 width: int = WIDTH, keep: Path | None = None, path: Path | None = None,
                 quiet: bool = False) -> Path:
    """Render the GIF to `out`; with `keep`, leave every frame's PNG (and SVG) there."""
    path = path or shots.recording()
    story = find_story(path)
    plan = schedule(story, frames=frames)
    if not quiet:
        def at(step, t):
            return "none" if t is None else f"step {step} ({t:.1f} s in)"

        print(f"{path.name}: {story.span:.1f} s recorded; gate {at(story.gate_step, story.gate_t)}"
              f", cascade {at(story.cascade_step, story.cascade_t)}; {len(plan)} frames, "
              f"{sum(f.duration for f in plan):.1f} s of GIF", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(keep) if keep else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        pngs, durations = [], []
        t0 = time.perf_counter()
        i = 0
        async for frame, svg in frames_svg(path, plan, theme):
            png = folder / f"frame-{i:04d}.png"
            png.write_bytes(svg_to_png(svg, width))
            if keep:
                (folder / f"frame-{i:04d}.svg").write_text(svg, encoding="utf-8")
            pngs.append(png)
            durations.append(frame.duration)
            i += 1
        write_gif(pngs, durations, out, comment=f"carl-tui screencast "
                  f"{shots.recording_stamp(path)}")
    if not quiet:
        print(f"{out}: {out.stat().st_size / 1e6:.2f} MB, {len(pngs)} frames rendered in "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "demo.gif")
    parser.add_argument("--frames", type=int, default=None,
                        help="render only this many moments of the playback (a quick smoke)")
    parser.add_argument("--theme", default="carl-dark", choices=shots.THEMES)
    parser.add_argument("--width", type=int, default=WIDTH, help="pixels (default %(default)s)")
    parser.add_argument("--keep-frames", type=Path, default=None, metavar="DIR",
                        help="also write every frame as PNG and SVG into DIR")
    args = parser.parse_args(argv)
    if args.frames is not None and args.frames < 1:
        parser.error("--frames must be at least 1")
    asyncio.run(render(args.out, frames=args.frames, theme=args.theme, width=args.width,
                       keep=args.keep_frames))
    return 0


if __name__ == "__main__":
    sys.exit(main())
