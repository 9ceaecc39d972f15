"""What a plot shows (`ui/chart.build_view`), checked on a run shaped like a real one:
the x axis by step, by tokens seen and by elapsed time, the range of the last N steps,
and a clear word when the run does not log what an axis needs."""

from __future__ import annotations

import numpy as np
import pytest

from carl_tui.events import RunRef, ScalarBatch
from carl_tui.store import RunStore
from carl_tui.ui.chart import ChartSettings, build_view

RUN = RunRef("jsonl", "p", "r1", "sft-run")
T0 = 1_790_000_000.0


def snapshot(*, tokens: bool = True, times: bool = True):
    """200 steps of a falling, noisy loss; tokens seen grow unevenly; ~1.3 s a step."""
    rng = np.random.default_rng(3)
    steps = np.arange(1, 201, dtype=np.int64)
    loss = 2.4 * np.exp(-steps / 70) + 0.05 + rng.normal(0, 0.02, steps.size)
    columns = {"loss": loss}
    if tokens:
        columns["num_tokens"] = np.cumsum(rng.integers(300, 700, steps.size)).astype(float)
    t = T0 + np.cumsum(rng.uniform(1.1, 1.5, steps.size)) if times else None
    store = RunStore()
    store.apply([ScalarBatch(RUN, steps, columns, wall_time=None if t is None else t[-1],
                             times=t)])
    return store.snapshot(RUN.key), steps, columns, t


def main_trace(view):
    (trace,) = [t for t in view.traces if not t.faint]
    return trace


def test_by_step_every_point_at_its_step():
    snap, steps, columns, _ = snapshot()
    view = build_view("loss", snap, settings=ChartSettings())
    trace = main_trace(view)
    assert trace.xs.tolist() == steps.astype(float).tolist()
    assert trace.ys == pytest.approx(columns["loss"])
    assert view.x_label == "step"


def test_by_tokens_each_step_at_the_tokens_seen_then():
    snap, _, columns, _ = snapshot()
    trace = main_trace(build_view("loss", snap, settings=ChartSettings(x_axis="tokens")))
    assert trace.xs == pytest.approx(columns["num_tokens"])


def test_by_time_each_step_at_its_elapsed_seconds():
    snap, _, _, t = snapshot()
    trace = main_trace(build_view("loss", snap, settings=ChartSettings(x_axis="time")))
    assert trace.xs == pytest.approx(t - t[0])


def test_the_last_n_steps_only():
    snap, steps, columns, _ = snapshot()
    trace = main_trace(build_view("loss", snap, settings=ChartSettings(last_n=50)))
    assert trace.xs.min() >= 150 and trace.xs.max() == 200
    shown = steps >= trace.xs.min()
    assert trace.ys == pytest.approx(columns["loss"][shown])


@pytest.mark.parametrize("axis,need,kw", [("tokens", "num_tokens", {"tokens": False}),
                                           ("time", "wall times", {"times": False})])
def test_an_axis_the_run_cannot_give_says_so(axis, need, kw):
    snap, *_ = snapshot(**kw)
    view = build_view("loss", snap, settings=ChartSettings(x_axis=axis))
    assert view.traces == ()
    assert view.empty == f"this run logs no {need}: press x for another axis"


def test_tokens_are_counted_across_stages():
    """TRL's num_tokens restarts at the GRPO stage: the tokens axis goes on from the SFT
    stage's total, so the GRPO curve follows the SFT one and a later step is never drawn
    left of an earlier one (CARL on @ 340 was left of crystallised @ 277)."""
    steps = np.arange(1, 201, dtype=np.int64)
    sft = np.cumsum(np.full(100, 500.0))  # 500 .. 50,000
    grpo = np.cumsum(np.full(100, 300.0))  # restarts: 300 .. 30,000
    store = RunStore()
    store.apply([ScalarBatch(RUN, steps, {"loss": np.linspace(2, 1, 200),
                                          "num_tokens": np.concatenate([sft, grpo])})])
    snap = store.snapshot(RUN.key)
    trace = main_trace(build_view("loss", snap, settings=ChartSettings(x_axis="tokens")))
    assert np.all(np.diff(trace.xs) > 0)
    assert trace.xs[99] == pytest.approx(50_000) and trace.xs[100] == pytest.approx(50_300)
    assert trace.xs[-1] == pytest.approx(80_000)


def test_the_sigma_line_stays_on_a_log_scale():
    """phi on a log y scale: σ is drawn at log10(σ), named in the legend (it was dropped)."""
    import math

    from carl_tui.coherence.constants import SIGMA

    steps = np.arange(1, 101, dtype=np.int64)
    store = RunStore()
    store.apply([ScalarBatch(RUN, steps, {"phi": np.linspace(0.01, 0.99, 100)})])
    snap = store.snapshot(RUN.key)
    view = build_view("phi", snap, settings=ChartSettings(log_y=frozenset({"phi"})))
    assert view.log_y
    (line,) = [m for m in view.marks if m.kind == "hline"]
    assert line.y == pytest.approx(math.log10(SIGMA))
    assert any(item.text == f"σ = {SIGMA:g}" for item in view.legend)


def test_a_metric_not_logged_yet_says_so_while_others_are():
    """The warm start logs phi, not entropy: the entropy plot says it is not logged yet
    and where the run is, not "waiting for data…" beside a drawn phi plot."""
    store = RunStore()
    store.apply([ScalarBatch(RUN, np.arange(1, 41, dtype=np.int64),
                             {"phi": np.linspace(0.1, 0.5, 40)})])
    snap = store.snapshot(RUN.key)
    assert build_view("phi", snap).traces
    view = build_view("entropy", snap)
    assert view.empty == "no entropy logged yet (the run is at step 40)"
