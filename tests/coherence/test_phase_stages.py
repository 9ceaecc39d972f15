"""Runs with stages (SFT -> GRPO, the demo): the stage that ended keeps its last phase
on screen beside the current stage's, the GRPO stage leaves baseline while its task
reward climbs after the gate, and `summary --json` tells each phase's stage."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from carl_tui.cli import main
from carl_tui.sources.jsonl import JsonlSource
from carl_tui.store import RunStore
from carl_tui.ui.widgets.phase_panel import PhasePanel
from tests.real_runs import CORPUS, Hindsight, load_run

RECORDING = CORPUS.parent.parent.parent / "recordings" / "tiny-demo.jsonl"


class Panel(PhasePanel):
    def _color(self, phase: str) -> str:  # no app (theme) here
        return "bold"


def panel_text(snap, width: int) -> str:
    console = Console(width=width, file=io.StringIO(), color_system=None)
    console.print(Panel()._render_snapshot(snap))
    return " ".join(console.file.getvalue().split())


def read_recording(path):
    src = JsonlSource(path)
    events = [e for _ in range(50) for e in src.poll()]
    store = RunStore(vocab_size=13)
    store.apply(events)
    return store.snapshot(store.runs()[0].key)


@pytest.fixture(scope="module")
def demo_snapshot(tmp_path_factory):
    """The demo read up to step 355: its GRPO stage has not crystallised there, after
    the gate fired in the SFT stage (287)."""
    lines = []
    for line in RECORDING.read_text().splitlines():
        if json.loads(line).get("step", 0) > 355:
            break
        lines.append(line)
    path = tmp_path_factory.mktemp("demo") / "demo-355.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return read_recording(path)


def test_summary_json_tells_both_stages(capsys):
    try:
        rc = main(["summary", str(RECORDING), "--json"])
    except SystemExit as exc:
        rc = exc.code
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    sft = [p for p in d["phases"] if p["stage"] == "accuracy"]
    grpo = [p for p in d["phases"] if p["stage"] == "reward"]
    gate = d["gate"]["fired_at"]
    assert sft[-1]["phase"] in ("crystallisation", "converged") and sft[-1]["from_step"] <= gate
    assert grpo[0]["from_step"] == gate + 1 and grpo[0]["phase"] == "baseline"
    # the task reward climbs after the gate: the GRPO stage leaves baseline before the
    # climb is nine tenths done (hindsight over the whole stage)
    stage = next(st for st in load_run(CORPUS / "demo-seed0.json").stages if st.kind == "reward")
    h = Hindsight(stage.steps, stage.values)
    assert h.learned
    assert grpo[-1]["phase"] != "baseline"
    assert grpo[1]["from_step"] <= h.step_at(0.9), (grpo, h.step_at(0.9))


@pytest.mark.parametrize("width", [40, 60, 80, 100, 160])
def test_the_ended_stage_keeps_its_phase_on_screen(demo_snapshot, width):
    snap = demo_snapshot
    assert snap.phase.stage == "reward"
    sft = [(p, s) for p, s, k in snap.phase.history if k == "accuracy"]
    shown = panel_text(snap, width)
    last, since = sft[-1]
    assert f"accuracy ended {last.upper()}@{since}" in shown
    assert snap.phase.phase.upper() in shown
    # the gate fired in the SFT stage: the panel says why the GRPO stage reads earlier
    assert snap.phase.phase in ("baseline", "transition", "plateau")
    assert (f"CRYSTALLISED at step {snap.gate.trigger_step}, in the stage before "
            f"(reward stage from {snap.phase.stage_start})") in shown


def test_the_whole_demo_ends_with_both_stages_crystallised():
    """The whole demo: the SFT stage crystallised where its gate fired (one step for it,
    on the panel and the gate row), the GRPO stage's small climb of its task reward ended
    in crystallisation (its entropy fell under half its start); the panel shows both."""
    snap = read_recording(RECORDING)
    shown = panel_text(snap, 100)
    last, since = [(p, s) for p, s, k in snap.phase.history if k == "accuracy"][-1]
    assert (last, since) == ("crystallisation", snap.gate.trigger_step)
    assert (snap.phase.stage, snap.phase.phase) == ("reward", "crystallisation")
    assert f"accuracy ended CRYSTALLISATION@{since}" in shown
    assert f"CRYSTALLISED at step {snap.gate.trigger_step}" in shown
    assert "in the stage before" not in shown


def test_the_callbacks_phase_markers_agree_with_its_gate(tmp_path):
    """The training callback's own phase markers: crystallisation (or later) from the
    step its gate fires, on an accuracy climb the gate sees before the phases would."""
    pytest.importorskip("transformers")  # the callback is a transformers TrainerCallback
    from types import SimpleNamespace

    import numpy as np

    from carl_tui.training.callback import CarlCallback

    path = tmp_path / "run.jsonl"
    cb = CarlCallback(path, 13, run_name="gate-phase")
    rng = np.random.default_rng(0)
    acc = np.concatenate([0.2 + rng.normal(0, 0.01, 20), np.linspace(0.2, 0.995, 30),
                          np.full(10, 0.996)])
    control = SimpleNamespace(should_training_stop=False)
    for i, a in enumerate(acc):
        state = SimpleNamespace(global_step=i + 1, is_world_process_zero=True)
        cb.on_log(None, state, control, logs={"mean_token_accuracy": float(a),
                                               "entropy": 1.0 + 0.01 * float(rng.normal())})
    cb.close()
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    gate = next(x["step"] for x in lines if x.get("kind") == "phase_transition")
    phases = [(x["phase"], x["step"]) for x in lines if x.get("kind") == "phase"]
    at_gate = [p for p, s in phases if s <= gate][-1]
    assert at_gate in ("crystallisation", "converged"), (gate, phases)


def test_accuracy_has_a_ceiling_and_a_reward_none():
    """The store reads token accuracy against its ceiling (1.0) and a task reward
    without one: the same staircase (0.1 -> 0.3, a pause of 6 steps, -> 0.9) is not
    crystallised in its pause as accuracy and crystallises at its end, near the ceiling;
    as a reward with no entropy logged nothing says the model knows its task: it ends on
    a plateau."""
    import numpy as np

    from carl_tui.events import RunRef, ScalarBatch

    rng = np.random.default_rng(0)
    steps = np.arange(200)
    level = 0.1 + 0.2 * np.clip((steps - 20) / 10, 0, 1) + 0.6 * np.clip((steps - 36) / 30, 0, 1)
    values = (level + rng.normal(0, 0.01, steps.size)).tolist()
    hist = {}
    for key in ("mean_token_accuracy", "rewards/accuracy_reward/mean"):
        ref = RunRef("test", "p", key, "real")
        store = RunStore(gate_metric="none")
        store.apply([ScalarBatch.from_rows(ref, [(int(s), {key: v})
                                                 for s, v in zip(steps, values)])])
        hist[key] = store.snapshot(ref.key).phase.history
    acc = hist["mean_token_accuracy"]
    assert min(s for p, s, _ in acc if p == "crystallisation") >= 60, acc
    assert acc[-1][0] in ("crystallisation", "converged"), acc
    reward = hist["rewards/accuracy_reward/mean"]
    assert reward[-1][0] == "plateau" and all(p != "crystallisation" for p, _, _ in reward)


def test_the_panel_shows_a_phase_the_run_went_back_from():
    """A climb that resumes after a pause goes back from plateau to transition: the panel
    marks the phase left behind "↺" at the step it was reached, not as still ahead or
    current."""
    import numpy as np

    from carl_tui.events import RunRef, ScalarBatch

    rng = np.random.default_rng(2)
    level = np.concatenate([np.full(5, 0.1), np.linspace(0.1, 0.4, 20), np.full(40, 0.4),
                            np.linspace(0.4, 0.7, 40)])
    values = level + rng.normal(0, 0.01, level.size)
    ref = RunRef("test", "p", "pause", "real")
    store = RunStore(gate_metric="none")
    store.apply([ScalarBatch.from_rows(ref, [(i + 1, {"mean_token_accuracy": float(v)})
                                             for i, v in enumerate(values)])])
    snap = store.snapshot(ref.key)
    steps = {p: s for p, s, _ in snap.phase.history}
    assert snap.phase.phase == "transition" and steps["plateau"] < steps["transition"]
    text = panel_text(snap, 100)
    assert f"●transition@{steps['transition']}" in text, text
    assert f"↺plateau@{steps['plateau']}" in text, text
    assert "·converged" in text, text
