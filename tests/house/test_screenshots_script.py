"""The screenshot script (screenshots/make.py) and the screencast's plan
(screenshots/screencast.py) keep working: one screen is rendered for real and its
SVG must show what the dashboard shows for the recording; the GIF's story is
found in the recording's own data. The GIF itself is not made here (slow)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from carl_tui.sources.replay import ReplaySource
from carl_tui.store import RunStore
from carl_tui.ui.keys import ALL_KEYS

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "screenshots"


def load(name: str, module: str):
    if module in sys.modules:
        return sys.modules[module]
    spec = importlib.util.spec_from_file_location(module, SCRIPTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def make():
    return load("make", "carl_screenshots_make")


@pytest.fixture(scope="module")
def cast(make):
    return load("screencast", "carl_screenshots_screencast")


@pytest.fixture(scope="module")
def recorded(make):
    """The snapshot of the whole recording, read by the store directly (not by the UI)."""
    path = make.recording()
    store = RunStore()
    store.apply(ReplaySource(path, speed=0).poll())
    (run,) = store.runs()
    return path, store.snapshot(run.key)


async def test_dashboard_svg_shows_the_run_its_phase_and_the_keys(make, recorded, tmp_path):
    _, snap = recorded
    out = await make.shoot(make.SHOTS["dashboard"], "carl-light", tmp_path)
    assert out.name == "dashboard-light.svg"
    svg = out.read_text(encoding="utf-8")
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    lines = make.svg_lines(svg)
    assert len(lines) == make.SIZE[1]
    text = "\n".join(lines)
    # the run's name in the title and the status bar, with its last step
    assert snap.run.label in lines[0]
    assert re.search(rf"run {re.escape(snap.run.label)} · step {snap.last_step}\b", lines[-2])
    # the phase the store is in, and the gate where it fired
    assert snap.phase.phase and snap.phase.phase.upper() in text
    if snap.gate.fired:
        assert f"step {snap.gate.trigger_step}" in text
    # the footer's keys: each key shown there with its description
    footer = lines[-1]
    for key in ALL_KEYS:
        if key.show and key.id in ("app.help", "app.quit", "actions.diagnose"):
            assert key.description in footer, (key, footer)
    # every metric the table can show fits on screen: at least phi and entropy rows
    for metric in ("phi", "entropy"):
        value = snap.series[metric].last
        assert re.search(rf"\b{metric}\s+{value:.4f}\b", text), metric


def test_file_names_keep_the_dark_theme_unsuffixed(make):
    assert make.file_name("dashboard", "carl-dark") == "dashboard.svg"
    assert make.file_name("dashboard-80x24", "carl-light") == "dashboard-80x24-light.svg"
    names = {make.file_name(n, t) for n in make.SHOTS for t in make.THEMES}
    assert len(names) == len(make.SHOTS) * len(make.THEMES)
    for wanted in ("dashboard", "launch", "jobs", "diagnosis", "help", "skipped",
                   "dashboard-80x24"):
        assert wanted in make.SHOTS


def test_braille_becomes_dots_in_its_own_cell(cast):
    cell, line = 12.2, 24.4
    svg = ('<clipPath id="t-line-3">\n    <rect x="0" y="74.7" width="1952" height="24.65"/>'
           '\n            </clipPath>'
           f'<text class="t-r5" x="{10 * cell:.1f}" y="93.2" textLength="{3 * cell:.1f}" '
           'clip-path="url(#t-line-3)">\u28ff&#160;\u2801</text>'
           '<text class="t-r2" x="0" y="93.2" textLength="24.4" '
           'clip-path="url(#t-line-3)">ab</text>')
    out = cast.braille_as_dots(svg)
    circles = re.findall(r'<circle class="t-r5" cx="([\d.]+)" cy="([\d.]+)"', out)
    assert len(circles) == 8 + 1  # all eight dots of U+28FF, dot 1 of U+2801
    xs = [float(x) for x, _ in circles]
    ys = [float(y) for _, y in circles]
    assert all(10 * cell < x < 11 * cell for x in xs[:8])  # inside the first cell
    assert 12 * cell < xs[8] < 12.5 * cell  # dot 1 is in the left half of the third cell
    assert min(ys) > 74.7 and max(ys) < 74.7 + line + 0.3
    assert ys[8] == min(ys)  # dot 1 is in the top row
    assert ">ab</text>" in out  # plain text is left alone
    assert "\u28ff" not in out and "\u2801" not in out


def test_screencast_story_is_found_in_the_recording(cast, recorded):
    path, snap = recorded
    story = cast.find_story(path)
    assert story.gate_step == (snap.gate.trigger_step if snap.gate.fired else None)
    assert story.cascade_step == (snap.cascade.trigger_step if snap.cascade.fired else None)
    assert story.gate_t is not None and story.cascade_t is not None
    assert 0 < story.gate_t < story.cascade_t <= story.span
    plan = cast.schedule(story)
    labels = [f.label for f in plan]
    assert labels[0] == "loading" and plan[0].t is None
    gate = plan[labels.index("gate")]
    cascade = plan[labels.index("cascade")]
    assert gate.t == story.gate_t and cascade.t == story.cascade_t
    assert gate.duration > cast.MOMENT_S and cascade.duration > cast.MOMENT_S
    times = [f.t for f in plan[1:]]
    assert times == sorted(times) and times[-1] == story.span
    assert [f.keys for f in plan if f.keys] == [(k,) for k, _ in cast.KEYS]
    total = sum(f.duration for f in plan)
    assert 20 <= total <= 40, total
    quick = cast.schedule(story, frames=3)
    assert len([f for f in quick if f.t is not None and not f.keys]) == 3 + 2



def gif_comments(path: Path) -> list[str]:
    """The comment extensions of a GIF, read block by block (no image library needed)."""
    data = path.read_bytes()
    assert data[:6] in (b"GIF87a", b"GIF89a")

    def table(packed: int) -> int:  # the size of a colour table, if the flag says one follows
        return 3 << ((packed & 7) + 1) if packed & 0x80 else 0

    def sub_blocks(at: int) -> tuple[bytes, int]:
        out = b""
        while data[at]:
            out += data[at + 1 : at + 1 + data[at]]
            at += 1 + data[at]
        return out, at + 1

    pos, comments = 13 + table(data[10]), []
    while data[pos] != 0x3B:  # the trailer
        if data[pos] == 0x21:  # an extension: its label, then its sub-blocks
            label = data[pos + 1]
            body, pos = sub_blocks(pos + 2)
            if label == 0xFE:
                comments.append(body.decode())
        else:  # an image: its descriptor, a local colour table, the LZW code size, data
            assert data[pos] == 0x2C
            _, pos = sub_blocks(pos + 10 + table(data[pos + 9]) + 1)
    return comments


def test_published_pictures_are_made_from_the_current_recording(make):
    """The README's animation and the screenshots say what they were made from (the
    recording's hash, last step, gate and cascade steps): when the recording changes,
    this fails until they are made again (make screenshots screencast)."""
    stamp = make.recording_stamp()
    snap_words = re.search(r"last step (\d+), crystallised at (\d+), CARL on at (\d+)", stamp)
    assert snap_words, stamp
    svgs = sorted(p for p in SCRIPTS.glob("*.svg") if p.name not in FROM_CORPUS)
    assert len(svgs) >= 14
    stale = [p.name for p in svgs if make.svg_stamp(p.read_text(encoding="utf-8")) != stamp]
    assert stale == [], f"made from another recording: {stale}; now {stamp}"
    assert gif_comments(SCRIPTS / "demo.gif") == [f"carl-tui screencast {stamp}"]


PHASES_FIGURE = "phases-real-runs.svg"  # drawn from the corpus of real runs, not the recording
# The fleet table of the corpus's real sweep (screenshots/fleet.py), not the recording.
FLEET_SHOTS = ("fleet.svg", "fleet-light.svg")
# The health row on a real run of the corpus made to fail (screenshots/health.py).
HEALTH_SHOTS = ("health.svg", "health-light.svg")
FROM_CORPUS = {PHASES_FIGURE, *FLEET_SHOTS, *HEALTH_SHOTS}


def test_the_phases_figure_is_what_the_current_phase_model_draws():
    """The README's picture of real curves and their phases (screenshots/phases_figure.py):
    when the phase model or the corpus changes, this fails until it is drawn again."""
    figure = load("phases_figure", "carl_screenshots_phases_figure")
    drawn = figure.figure()
    assert drawn.count("<svg") == 1 and "transition" in drawn and "plateau" in drawn
    assert drawn == (SCRIPTS / PHASES_FIGURE).read_text(encoding="utf-8"), (
        "screenshots/phases-real-runs.svg is stale: python screenshots/phases_figure.py")


def test_a_stamp_is_read_back_and_leaves_the_svg_an_svg(make, tmp_path):
    svg = '<svg class="rich-terminal" viewBox="0 0 10 10"><text>x</text></svg>'
    out = make.stamped(svg, "made from a.jsonl (sha256 ab): last step 3 <&>")
    assert out.startswith("<svg") and out.endswith("</svg>")
    assert make.svg_stamp(out) == "made from a.jsonl (sha256 ab): last step 3 <&>"
    assert make.svg_stamp(svg) is None


async def test_the_fleet_screenshot_is_what_the_table_shows_of_the_real_sweep(make, tmp_path):
    """The README's fleet table of a real sweep (screenshots/fleet.py): what the table draws
    now (stale: it fails until drawn again), and each row as `fleet --json` reads the same
    streams: its state, last step, phase and stage."""
    from carl_tui.report.collect import collect
    from carl_tui.sources.open import open_file
    from carl_tui.store.fleet import FLEET_STORE, fleet_rows

    fleet = load("fleet", "carl_screenshots_fleet")
    lines = make.svg_lines(await fleet.render_svg("carl-dark"))
    for name in FLEET_SHOTS:
        published = make.svg_lines((SCRIPTS / name).read_text(encoding="utf-8"))
        assert published == lines, f"screenshots/{name} is stale: python screenshots/fleet.py"
    store = RunStore(**FLEET_STORE)
    sources = [open_file(p, settled=True) for p in fleet.write_sweep(tmp_path)]
    collect(sources, store, timeout=60, patient=False)
    rows = fleet_rows(store, now=fleet.NOW)
    assert len(rows) == len(fleet.sweep_files()) == 14 and "fleet · 14 runs" in lines[0]
    for row in rows:
        (line,) = [x for x in lines if x.split() and x.split()[0] == row.run.label]
        cells = line.split()
        assert cells[1:3] == [row.state, str(row.last_step)], line  # run, state, step
        assert f"{row.phase} · {row.stage}" in line, line


async def test_the_health_screenshot_is_what_the_dashboard_shows_of_a_real_run_made_to_fail(
        make):
    """The README's health row (screenshots/health.py): a real tiny GRPO run whose reward
    was made to pay for length over its cap; what the dashboard draws now (stale: it fails
    until drawn again), with the truncation flag where the corpus dates it."""
    health = load("health", "carl_screenshots_health")
    lines = make.svg_lines(await health.render_svg("carl-dark"))
    for name in HEALTH_SHOTS:
        published = make.svg_lines((SCRIPTS / name).read_text(encoding="utf-8"))
        assert published == lines, f"screenshots/{name} is stale: python screenshots/health.py"
    row = next(line for line in lines if " health " in line)
    assert "health       truncation since step 130 (seen at 134): 61% of completions" in row
    below = lines[lines.index(row) + 1]
    assert "no_learning_signal since 152" in below
