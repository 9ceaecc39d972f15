"""What was skipped is said in its units: a NaN value skips one value (its row stays), a
malformed line a whole line. "skipped 32" for 32 NaN values read as 32 lost lines."""

from __future__ import annotations

import io
import json
import math

import pytest
from rich.console import Console

from carl_tui.sources.jsonl import JsonlSource
from carl_tui.ui.app import DashboardConfig, Settings, build_app
from carl_tui.ui.screens.skipped_input import SkippedScreen
from carl_tui.ui.widgets.status_bar import StatusBar
from tests.conftest import plain_text
from tests.report.test_report import cli, summary
from tests.ui.test_app import wait_for


def nan_tensorboard_run(logdir):
    """A SummaryWriter run: loss every step 0..79 (32 of them NaN), an evaluation loss
    every 10 steps at a step the training loss has too."""
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(logdir))
    for step in range(80):
        w.add_scalar("train/loss", math.nan if step % 5 < 2 else 2.0 / (1 + step), step)
        if step % 10 == 0:
            w.add_scalar("eval/loss", 2.5 / (1 + step), step)
    w.close()


def stream_with_bad_lines(path, nan_at=None):
    with open(path, "w") as f:
        f.write(json.dumps({"event": "meta", "name": "bad-lines"}) + "\n")
        for step in range(20):
            f.write(json.dumps({"step": step, "loss": 1.0 / (1 + step)}) + "\n")
            if step in (3, 9, 15):
                f.write("{'loss': oops\n")
        if nan_at is not None:
            f.write(json.dumps({"step": nan_at, "loss": math.nan, "entropy": 1.0}) + "\n")


def test_summary_says_what_was_skipped_and_counts_steps(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    nan_tensorboard_run(tmp_path / "tb" / "run")
    d = summary(["--tensorboard", str(tmp_path / "tb")], capsys)
    assert d["skipped"] == 32
    assert d["skipped_input"] == [{"count": 32, "what": "NaN or infinite values"}]
    assert d["steps_logged"] == 48 + 8  # steps with a value (each evaluation is at a NaN)
    assert d["metrics"]["loss"]["count"] == 48 and d["metrics"]["eval/loss"]["count"] == 8
    rc, out, _ = cli(["summary", "--tensorboard", str(tmp_path / "tb")], capsys)
    assert rc == 0 and "56 logged; skipped 32 NaN or infinite values" in out

    stream_with_bad_lines(tmp_path / "run.jsonl")
    d = summary([str(tmp_path / "run.jsonl")], capsys)
    assert d["skipped_input"] == [{"count": 3, "what": "malformed lines"}]
    assert d["steps_logged"] == 20


async def test_the_status_bar_says_what_was_skipped(tmp_path):
    path = tmp_path / "run.jsonl"
    stream_with_bad_lines(path)
    stream_with_bad_lines(path, nan_at=20)
    app = build_app(DashboardConfig(sources=[JsonlSource(path)],
                                    settings=Settings(refresh_interval=0.05)))
    async with app.run_test(size=(160, 45)) as pilot:
        bar = app.query_one(StatusBar)
        await wait_for(pilot, lambda: "skipped 3 malformed lines" in plain_text(bar, 300))
        assert "1 NaN or infinite value" in plain_text(bar, 300)
        await pilot.press("k")  # the list of reasons says the same
        await wait_for(pilot, lambda: isinstance(app.screen, SkippedScreen))
        console = Console(width=200, file=io.StringIO(), color_system=None)
        console.print(app.screen.render_body())
        listed = console.file.getvalue()
        assert "skipped input: 3 malformed lines, 1 NaN or infinite value" in listed
        assert "3 malformed lines" in listed and "1 NaN or infinite value" in listed
