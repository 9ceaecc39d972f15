"""The biggest plot is never a placeholder: where phi cannot be shown (a TensorBoard GRPO
run, a Trainer log: entropy and no vocabulary size, or no entropy at all), the first
plot is the run's task metric (its reward, its token accuracy), and its title says in
one line how to get phi. Read from the drawn screen."""

from __future__ import annotations

import pytest

from carl_tui.events import RunMeta, RunRef, ScalarBatch
from carl_tui.sources import tensorboard as tb
from carl_tui.ui.app import build_app
from tests.conftest import ScriptedSource, dashboard_config, spec_trajectory, wait_for
from tests.sources.test_source_tensorboard import grpo_rows
from tests.store.test_run_age import screen_lines


def first_panel(app) -> list[str]:
    """The top-left panel's rows, as drawn (its border title first)."""
    plot = app.query_one("#phi-plot")
    r = plot.region
    lines = screen_lines(app)
    return [line[r.x:r.x + r.width] for line in lines[r.y:r.y + r.height]]


@pytest.fixture(scope="module")
def grpo_logdir(tmp_path_factory):
    """A GRPO run as TRL writes it through TensorBoard: reward, entropy, no model config
    (so no vocabulary size)."""
    from torch.utils.tensorboard import SummaryWriter

    root = tmp_path_factory.mktemp("tb") / "grpo"
    w = SummaryWriter(str(root / "run-a"))
    for step, row in grpo_rows(60):
        for tag, v in row.items():
            w.add_scalar(tag, v, step, walltime=1_732_350_000.0 + step)
    w.close()
    return root


async def test_a_tensorboard_grpo_runs_first_plot_is_its_reward(grpo_logdir):
    rewards = [row["train/reward"] for _, row in grpo_rows(60)]
    app = build_app(dashboard_config([tb.TensorBoardSource(grpo_logdir)],
                                     refresh_interval=0.05))
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None
                       and app.snapshot.last_step == 300, timeout=10, what="the run read")
        await pilot.pause(0.3)
        panel = first_panel(app)
        text = "\n".join(panel)
        assert "─ reward · phi: set --vocab-size ─" in panel[0], panel[0]
        assert "vocabulary size" not in text.replace("--vocab-size", "")
        assert "waiting for data" not in text
        # its y axis is the reward's range: its lowest and highest ticks within it
        labels = [float(line[1:5]) for line in panel[1:] if line[1:5].strip()
                  and line[5:6] in "┤┼"]
        assert labels and min(rewards) - 0.2 <= min(labels) and max(labels) <= max(rewards) + 0.2


async def test_a_run_with_no_entropy_shows_its_token_accuracy_and_how_to_get_phi():
    src = ScriptedSource()
    run = RunRef("jsonl", "p", "sft", "sft")
    rows = [(s, {"mean_token_accuracy": v["mean_token_accuracy"], "loss": 1.0})
            for s, v in spec_trajectory()]
    src.push([RunMeta(run, {"name": "sft"}), ScalarBatch.from_rows(run, rows)])
    app = build_app(dashboard_config([src], refresh_interval=0.05))
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None
                       and app.snapshot.last_step == rows[-1][0], what="the run read")
        await pilot.pause(0.3)
        title = first_panel(app)[0]
        assert "─ mean_token_accuracy · phi: log entropy ─" in title, title
