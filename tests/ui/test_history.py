"""History is history: what happened before the dashboard opened goes to the events view
and one quiet line on the status bar ("history: crystallised at 315, 6.0d ago"), never
a bell, a desktop notification (OSC 9/777) or a toast. What happens after it opened is
news, told as before."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from carl_tui.coherence.gates import PhaseTransitionGate
from carl_tui.sources.jsonl import JsonlSource
from carl_tui.sources.replay import ReplaySource
from carl_tui.ui import app as app_module
from carl_tui.ui.app import build_app
from tests.conftest import dashboard_config, spec_trajectory, wait_for
from tests.store.test_run_age import screen_lines

RECORDING = Path(__file__).resolve().parents[2] / "recordings" / "tiny-demo.jsonl"
DAY = 86400.0


def gate_step() -> int:
    gate = PhaseTransitionGate()
    for step, vals in spec_trajectory():
        gate.update(step, vals["mean_token_accuracy"], vals["entropy"])
    assert gate.fired
    return gate.trigger_step


def write_stream(path: Path, t0: float, rows) -> None:
    with open(path, "a") as f:
        f.writelines(json.dumps({"step": step, "time": t0 + step, **vals}) + "\n"
                     for step, vals in rows)


@pytest.fixture
def alerts(monkeypatch):
    """Every notice `announce` raises (the toast, the bell and the desktop all go through
    it), and every bell rung."""
    said: list[str] = []
    rung: list[int] = []
    real = app_module.announce

    def spy(app, notice, cfg):
        said.append(notice.text)
        return real(app, notice, cfg)

    monkeypatch.setattr(app_module, "announce", spy)
    return said, rung


def status_line(app) -> str:
    return next(line for line in screen_lines(app) if line.lstrip().startswith("run "))


async def test_a_gate_that_fired_days_ago_is_history_not_news(tmp_path, alerts):
    said, rung = alerts
    path = tmp_path / "old.jsonl"
    write_stream(path, time.time() - 6 * DAY, spec_trajectory())
    app = build_app(dashboard_config([JsonlSource(path)], refresh_interval=0.05))
    app.bell = lambda: rung.append(1)  # type: ignore[method-assign]
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None
                       and app.snapshot.gate.fired, what="the gate read")
        await wait_for(pilot, lambda: "history:" in status_line(app), what="the line")
        line = status_line(app)
        history = line[line.index("history: "):].split("  │")[0]
        assert history.startswith(f"history: crystallised at {gate_step()}, ") and \
            history.endswith(", 6.0d ago"), line
        assert not [t for t in said if "rystallised" in t], said
        assert rung == [] and [n.message for n in app._notifications] == []
        # the events view still lists it
        assert any(e.kind == "phase_transition" for e in app.snapshot.events)


async def test_a_gate_that_fires_after_opening_is_still_news(tmp_path, alerts):
    said, rung = alerts
    path = tmp_path / "live.jsonl"
    rows = spec_trajectory()
    write_stream(path, time.time() - 30, rows[:5])
    app = build_app(dashboard_config([JsonlSource(path, interval=0.05)],
                                     refresh_interval=0.05))
    app.bell = lambda: rung.append(1)  # type: ignore[method-assign]
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None, what="the first rows")
        write_stream(path, time.time() - rows[5][0], rows[5:])  # dated now
        await wait_for(pilot, lambda: any("rystallised" in t for t in said),
                       what="the gate told")
        assert rung == [1]
        assert "history:" not in status_line(app)


async def test_a_replay_is_a_recording_its_gate_is_history(alerts):
    said, rung = alerts
    source = ReplaySource(RECORDING, speed=float("inf"))
    app = build_app(dashboard_config([source], refresh_interval=0.05))
    app.bell = lambda: rung.append(1)  # type: ignore[method-assign]
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: source.finished and app.snapshot is not None
                       and app.snapshot.cascade.trigger_step is not None, timeout=10,
                       what="the recording read")
        await wait_for(pilot, lambda: "history:" in status_line(app), what="the line")
        assert "history: crystallised at 287, CARL on at 365" in status_line(app)
        assert not [t for t in said if "rystallised" in t or "Cascade" in t], said
        assert rung == []


async def test_the_history_line_says_the_phase_the_panel_says_not_a_corrected_one(tmp_path):
    """A TensorBoard GRPO run written an hour ago: its phase was said as transition (80),
    plateau (160), transition again from 150 (215), then corrected back to one climb from
    step 5 (225). The history line says the phase as it reads now, as the panel does, not
    the last notice's "transition at 215"."""
    SummaryWriter = pytest.importorskip("torch.utils.tensorboard").SummaryWriter
    from carl_tui.sources.tensorboard import TensorBoardSource
    from tests.sources.test_source_tensorboard import grpo_rows

    writer = SummaryWriter(str(tmp_path / "run-a"))
    t0 = time.time() - 3600
    for step, row in grpo_rows(60):
        for tag, v in row.items():
            writer.add_scalar(tag, v, step, walltime=t0 + step)
    writer.close()
    app = build_app(dashboard_config([TensorBoardSource(tmp_path)], refresh_interval=0.05))
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None
                       and app.snapshot.phase.seen_at is not None
                       and "history:" in status_line(app), what="the history line")
        phase = app.snapshot.phase
        assert (phase.phase, phase.since_step, phase.seen_at) == ("transition", 5, 80)
        line = status_line(app)
        assert "history: transition since 5" in line, line
        assert "at 215" not in line
