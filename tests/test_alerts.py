"""Alerts: a NaN loss, a diverging loss, crystallisation, the cascade, a job's end: a notice,
the bell and a desktop notification, each switchable; `summary` lists the same events."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from carl_tui.events import JobStatus, RunRef, ScalarBatch
from carl_tui.sources.jsonl import JsonlSource
from carl_tui.store import RunStore
from carl_tui.ui.alerts import AlertConfig, desktop_sequences, load_alert_config
from carl_tui.ui.app import DashboardConfig, build_app
from tests.conftest import ScriptedSource

RUN = RunRef("test", "p", "r1", "alerting")


def stream_with(tmp_path, rows):
    path = tmp_path / "run.jsonl"
    with open(path, "w") as f:  # Python's json writes NaN / Infinity literals
        f.writelines(json.dumps(row) + "\n" for row in rows)
    return path


def events_of(store, kind):
    snap = store.snapshot(RUN.key) or store.snapshot(store.runs()[0].key)
    return [e for e in snap.events if e.kind == kind]


def test_a_nan_loss_in_a_stream_is_an_alert_at_its_step(tmp_path):
    rng = random.Random(2)
    rows = [{"step": s, "loss": 1.0 / (1 + s) + rng.random() * 1e-3} for s in range(12)]
    rows[7]["loss"] = math.nan
    rows[8]["loss"] = math.inf
    src = JsonlSource(stream_with(tmp_path, rows))
    store = RunStore()
    store.apply(src.poll())
    alerts = events_of(store, "nan_loss")
    assert [(a.step, a.severity) for a in alerts] == [(7, "error")]  # once per episode
    assert "loss is NaN or infinite at step 7" in alerts[0].text
    assert src.tally.total == 2  # still skipped and counted as bad values


def test_a_loss_that_comes_back_and_fails_again_alerts_again():
    store = RunStore()
    for step, value in ((1, 0.5), (2, math.nan), (3, 0.4), (4, math.nan)):
        finite = {} if math.isnan(value) else {"loss": value}
        nonfinite = (("loss", step),) if math.isnan(value) else ()
        store.apply([ScalarBatch.from_rows(RUN, [(step, finite)]) if finite else
                     ScalarBatch(RUN, np.array([step]), {}, nonfinite=nonfinite)])
    assert [e.step for e in events_of(store, "nan_loss")] == [2, 4]


def test_a_diverging_loss_alerts_once_after_three_values_over_3x_its_recent_minimum():
    rng = random.Random(9)
    values = [2.0 * math.exp(-s / 15) + 0.2 + rng.random() * 0.01 for s in range(60)]
    low = min(values[-50:])
    values += [low * 3.2, low * 3.6, low * 4.1, low * 5.0, low * 6.0]  # steps 60..64
    store = RunStore()
    for s in range(0, len(values), 7):  # arriving in batches, as live
        store.apply([ScalarBatch.from_rows(RUN, [(i, {"loss": values[i]})
                                                 for i in range(s, min(s + 7, len(values)))])])
    alerts = events_of(store, "diverging")
    assert [a.step for a in alerts] == [62]
    assert "3x its recent minimum" in alerts[0].text


def test_noise_and_a_grpo_loss_around_zero_do_not_alert():
    rng = random.Random(4)
    store = RunStore()
    rows = [(s, {"loss": rng.gauss(0.0, 0.02), "eval/loss": 1.0 + rng.random() * 0.3})
            for s in range(300)]
    store.apply([ScalarBatch.from_rows(RUN, rows)])
    assert events_of(store, "diverging") == []


async def test_alerts_ring_the_bell_and_can_be_switched_off(monkeypatch):
    async def run(config: AlertConfig) -> tuple[int, list[str]]:
        src = ScriptedSource()
        app = build_app(DashboardConfig(sources=[src], refresh_interval=0.05, alerts=config))
        rings = []
        monkeypatch.setattr(app, "bell", lambda: rings.append(1))
        async with app.run_test(size=(120, 36)) as pilot:
            src.push([ScalarBatch.from_rows(RUN, [(1, {"loss": 0.5})]),
                      JobStatus(RUN, "job-1", "ERROR", message="exit status 1")])
            for _ in range(60):
                await pilot.pause(0.05)
                if app.notices_shown:
                    break
            await pilot.pause(0.1)
            shown = [str(n.message) for n in app._notifications]
        return len(rings), shown

    rings, shown = await run(AlertConfig())
    assert rings == 1 and any("job-1: ERROR" in text for text in shown)
    rings, shown = await run(AlertConfig(bell=False, notice=False))
    assert rings == 0 and not any("job-1" in text for text in shown)


def test_desktop_notification_cannot_escape_the_terminal_sequence():
    seq = desktop_sequences("carl-tui · run\x07x", "loss is NaN;\x1b]0;pwned\x07 at 7")
    assert seq.startswith("\x1b]9;") and seq.count("\x07") == 2 and seq.count("\x1b") == 2
    assert "pwned" in seq and "\x1b]0" not in seq


@pytest.mark.parametrize("text,expect", [
    ("[alerts]\nbell = false\nkinds = ['nan_loss']\n", AlertConfig(bell=False,
                                                                   kinds=("nan_loss",))),
    ("", AlertConfig()),
])
def test_the_config_file_switches_alerts(tmp_path, text, expect):
    path = tmp_path / "config.toml"
    path.write_text(text)
    assert load_alert_config(path) == (expect, "")


def test_a_bad_config_file_is_said_and_the_defaults_apply(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("[alerts]\nkinds = ['nope']\n")
    config, problem = load_alert_config(path)
    assert config == AlertConfig() and "unknown alert kinds" in problem
    path.write_text("[alerts\n")
    config, problem = load_alert_config(path)
    assert config == AlertConfig() and str(path) in problem


def test_a_burst_of_one_kind_of_notice_is_collapsed_to_a_count():
    from carl_tui.store.snapshot import Notice
    from carl_tui.ui.follow import collapse

    other = RunRef("test", "p", "r2", "other")
    burst = [Notice(i, RUN, "diverging", 100 + i, f"loss diverging at {100 + i}", "error")
             for i in range(1, 11)]
    burst.insert(4, Notice(50, other, "diverging", 7, "other run", "error"))
    burst.append(Notice(60, RUN, "phase_transition", 120, "Crystallised", "warning"))
    shown = collapse(burst)
    mine = [n.text for n in shown if n.run == RUN and n.kind == "diverging"]
    assert mine == ["loss diverging at 101", "loss diverging at 102",
                    ("8 more diverging notices, the last at step 110: press e for the run's "
                    "events")]
    assert [n.text for n in shown if n.run == other] == ["other run"]
    assert shown[-1].text == "Crystallised"
    assert collapse(burst[:3]) == burst[:3]
