"""The system panel renders a run's GPUs, CPU and RAM from the store's snapshot."""

from __future__ import annotations

import math

import numpy as np
import pytest
from rich.text import Text
from textual.app import App, ComposeResult

from carl_tui.events import GpuSample, RunRef, ScalarBatch, SystemSample
from carl_tui.store import RunStore
from carl_tui.ui.widgets.system_panel import (
    BAR_WIDTH,
    NO_DATA,
    SPARK_WIDTH,
    SystemPanel,
    bar,
    memory_text,
    sparkline,
    system_text,
)
from tests.conftest import plain_text

RUN = RunRef("trackio", "p", "r1", "grpo")
TOTAL_MIB = 79.6468505859375 * 1024


class PanelApp(App[None]):
    def compose(self) -> ComposeResult:
        yield SystemPanel(id="system")


def fed_store(n: int = 40) -> tuple[RunStore, list[list[GpuSample]], dict]:
    """A store fed like a GRPO run on two GPUs: noisy utilization, memory creeping up."""
    rng = np.random.default_rng(21)
    store = RunStore()
    store.apply([ScalarBatch.from_rows(RUN, [(1, {"loss": 2.1})], wall_time=1000.0)])
    gpus_by_t = []
    for t in range(n):
        gpus = [
            GpuSample(i, float(np.clip(rng.normal(78 - 30 * i, 8), 0, 100)),
                      1024 * (30.2 + 0.05 * t + 7 * i + rng.normal(0, 0.02)), TOTAL_MIB,
                      float(rng.normal(405 - 130 * i, 20)), float(60 + (t + 3 * i) % 9))
            for i in range(2)
        ]
        gpus_by_t.append(gpus)
        store.apply([SystemSample(RUN, None, 1000.0 + 10 * t, tuple(gpus))])
    cpu = {"cpu_percent": 61.37, "memory_mb": 1024 * 12.71, "memory_total_mb": 1024 * 62.8}
    store.apply([SystemSample(RUN, None, 1000.0 + 10 * n - 5, (), **cpu)])
    return store, gpus_by_t, cpu


def test_panel_shows_each_gpu_then_cpu_and_ram():
    store, gpus_by_t, cpu = fed_store()
    view = store.snapshot(RUN.key).system
    text = system_text(view, now=view.updated_at + 7)
    lines = text.plain.split("\n")
    assert lines[0] == "41 samples · newest 7s ago"
    last = gpus_by_t[-1]
    for i, line in enumerate(lines[1:3]):
        g = last[i]
        assert line.startswith(f"GPU{i} ")
        assert f" {g.utilization:3.0f}% " in line
        assert f"mem {g.memory_used_mb / 1024:.1f}/79.6 GiB" in line
        assert f"{g.power_w:.0f} W" in line and f"{g.temperature_c:.0f}°C" in line
        # the bar: filled to the utilization, BAR_WIDTH cells in all
        cells = line[len("GPU0  "):len("GPU0  ") + BAR_WIDTH]
        assert len(cells) == BAR_WIDTH and set(cells) <= set("█▏▎▍▌▋▊▉░")
        assert cells.count("█") == round(g.utilization / 100 * BAR_WIDTH * 8) // 8
        assert cells.count("░") == BAR_WIDTH - math.ceil(
            round(g.utilization / 100 * BAR_WIDTH * 8) / 8)
        # the sparkline: the last SPARK_WIDTH utilizations, higher ones drawn taller
        spark = line.split("  ")[-1]
        utils = [gpus_by_t[t][i].utilization for t in range(len(gpus_by_t))][-SPARK_WIDTH:]
        assert len(spark) == SPARK_WIDTH
        order = "▁▂▃▄▅▆▇█"
        heights = [order.index(c) for c in spark]
        hi, lo = int(np.argmax(utils)), int(np.argmin(utils))
        assert heights[hi] >= heights[lo] and heights[hi] > 0
    assert lines[3].startswith("CPU ")
    assert f" {cpu['cpu_percent']:3.0f}%" in lines[3] and "RAM 12.7/62.8 GiB" in lines[3]
    assert len(lines) == 4


def test_panel_without_system_metrics_says_so():
    assert system_text(None).plain == NO_DATA
    store = RunStore()
    store.apply([ScalarBatch.from_rows(RUN, [(3, {"loss": 1.5})])])
    assert store.snapshot(RUN.key).system is None
    # a sample with only a disk reading gives no view at all at the source; a view
    # with nothing the panel can show says so under its header
    store.apply([SystemSample(RUN, None, 50.0, (), memory_total_mb=4096.0)])
    text = system_text(store.snapshot(RUN.key).system, now=60.0).plain
    assert text.endswith(NO_DATA) and "GPU" not in text


def test_cpu_only_and_partial_gpu_readings():
    store = RunStore()
    store.apply([SystemSample(RUN, None, 10.0, (), cpu_percent=7.5, memory_mb=700.0)])
    text = system_text(store.snapshot(RUN.key).system, now=11.0).plain
    assert "GPU" not in text and "  8%" in text and "RAM 700 MiB" in text
    store.apply([SystemSample(RUN, None, 12.0, (GpuSample(0, None, 512.0, 960.0),))])
    line = system_text(store.snapshot(RUN.key).system, now=13.0).plain.split("\n")[1]
    assert line.startswith("GPU0 ") and "    ?" in line and "mem 512/960 MiB" in line
    assert " W" not in line and "°C" not in line


def test_bar_sparkline_and_memory_text():
    assert bar(None).plain == "·" * BAR_WIDTH and bar(math.nan).plain == "·" * BAR_WIDTH
    assert bar(0.0).plain == "░" * BAR_WIDTH and bar(1.0).plain == "█" * BAR_WIDTH
    assert bar(1.7).plain == "█" * BAR_WIDTH and bar(-0.2).plain == "░" * BAR_WIDTH
    half = bar(0.5, width=10).plain
    assert half == "█" * 5 + "░" * 5
    third = bar(0.37, width=10).plain  # 29.6 eighths: 3 full cells and 6/8 of one
    assert third == "███▊" + "░" * 6 and len(third) == 10
    assert sparkline(np.array([0.0, 50.0, 100.0, np.nan])) == "▁▅█"
    assert sparkline(np.array([np.nan])) == ""
    assert len(sparkline(np.linspace(0, 100, 50), width=8)) == 8
    assert memory_text(None, None) == "?"
    assert memory_text(3686.4, TOTAL_MIB) == "3.6/79.6 GiB"
    assert memory_text(None, 2048.0) == "?/2.0 GiB"
    assert memory_text(300.0, None) == "300 MiB"


@pytest.mark.timeout(60)
async def test_panel_mounted_shows_a_snapshot_and_hides():
    store, _, _ = fed_store(12)
    app = PanelApp()
    async with app.run_test(size=(100, 20)) as pilot:
        panel = app.query_one(SystemPanel)
        panel.show(store.snapshot(RUN.key), now=1200.0)
        await pilot.pause()
        shown = plain_text(panel, 100)
        assert "GPU0" in shown and "GPU1" in shown and "CPU" in shown
        assert panel.region.height >= 4
        panel.show(None)
        await pilot.pause()
        assert plain_text(panel).strip() == NO_DATA
        panel.add_class("-hidden")
        await pilot.pause()
        assert not panel.display and panel.region.height == 0
    assert isinstance(system_text(None), Text)
