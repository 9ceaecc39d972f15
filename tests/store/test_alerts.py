"""Alerts: a NaN loss, a diverging loss, crystallisation, the cascade, a job's end: a notice,
the bell and a desktop notification, each switchable; `summary` lists the same events."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from carl_tui.events import Job, RunRef, ScalarBatch
from carl_tui.sources.jsonl import JsonlSource
from carl_tui.store import RunStore
from carl_tui.store.alerts import is_loss
from carl_tui.ui.app import DashboardConfig, Settings, build_app
from carl_tui.ui.attention import AlertConfig, desktop_sequences, load_alert_config
from carl_tui.ui.widgets.job_bar import JobBar
from tests.conftest import ScriptedSource, plain_text, wait_for

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
    assert src.unused_input.total == 2  # still skipped and counted as bad values


def test_a_loss_that_comes_back_and_fails_again_alerts_again():
    store = RunStore()
    for step, value in ((1, 0.5), (2, math.nan), (3, 0.4), (4, math.nan)):
        finite = {} if math.isnan(value) else {"loss": value}
        nonfinite = (("loss", step),) if math.isnan(value) else ()
        store.apply([ScalarBatch.from_rows(RUN, [(step, finite)]) if finite else
                     ScalarBatch(RUN, np.array([step]), {}, nonfinite=nonfinite)])
    assert [e.step for e in events_of(store, "nan_loss")] == [2, 4]


DATA = Path(__file__).parents[1] / "data"
CORPUS = DATA / "alert_runs"
RECORDING = Path(__file__).resolve().parents[2] / "recordings" / "tiny-demo.jsonl"


def real_runs() -> list[Path]:
    """Real training histories: the `log_history` of public trainer_state.json files (each
    with its repository, path and commit), of tiny TRL runs and of demo runs: the shared
    corpus (real_runs/, see its PROVENANCE) and a few more (alert_runs/)."""
    return sorted([*(DATA / "real_runs").glob("*.json"), *CORPUS.glob("*.json")])


def loss_series(path: Path) -> dict[str, tuple[list[int], list[float]]]:
    """name -> (steps, values) of each loss in a history, named as the Trainer reports
    them to Trackio / W&B (`eval_loss` -> `eval/loss`)."""
    out: dict[str, tuple[list[int], list[float]]] = {}
    for entry in json.loads(path.read_text())["log_history"]:
        for key, value in entry.items():
            name = "eval/" + key[5:] if key.startswith("eval_") else key
            if key != "step" and is_loss(name) and isinstance(value, (int, float)):
                steps, values = out.setdefault(name, ([], []))
                steps.append(entry["step"])
                values.append(float(value))
    return out


def divergences(series: dict[str, tuple[list[int], list[float]]], batch: int = 7):
    """The diverging alerts a store raises on these series, arriving in batches as live."""
    store = RunStore()
    rows: dict[int, dict[str, float]] = {}
    for name, (steps, values) in series.items():
        for step, value in zip(steps, values):
            rows.setdefault(step, {})[name] = value
    ordered = sorted(rows.items())
    for i in range(0, len(ordered), batch):
        store.apply([ScalarBatch.from_rows(RUN, ordered[i : i + batch])])
    return events_of(store, "diverging")


def test_the_corpus_holds_real_runs_with_their_provenance():
    runs = real_runs()
    assert len(runs) >= 50
    public = 0
    for path in runs:
        source = json.loads(path.read_text())["source"]
        known = len(source.get("commit", "")) == 40 and ("repo" in source or "repository"
                                                          in source)
        assert known or "made_by" in source or "generator" in source, path.name
        public += known
        assert len(loss_series(path)["loss"][1]) >= 15, path.name
    assert public >= 35


def made_to_fail(path: Path) -> bool:
    """A run made to fail (make_tiny.py's "induced", other than "none")."""
    induced = json.loads(path.read_text()).get("induced") or {}
    return induced.get("flag", "none") != "none"


@pytest.mark.parametrize("path", [p for p in real_runs() if not made_to_fail(p)],
                         ids=lambda p: p.stem)
def test_a_healthy_real_run_raises_no_divergence_alert(path):
    assert [a.text for a in divergences(loss_series(path))] == []


def test_a_grpo_loss_made_of_a_growing_kl_term_is_not_diverging():
    """The issue's case: a GRPO loss around 0.0001-0.0004 (beta x KL, the policy term
    averaging out) that grows as the policy leaves the reference. The KL of a real tiny
    GRPO run, scaled: the old rule (3x its recent minimum) called it diverging."""
    history = json.loads((CORPUS / "tiny-grpo-beta.json").read_text())["log_history"]
    steps = [e["step"] for e in history]
    values = [0.002 * e["kl"] for e in history]
    assert 0.0001 <= np.median(values[-20:]) <= 0.0004
    assert divergences({"loss": (steps, values)}) == []


def test_the_demo_recording_a_real_sft_then_grpo_run_raises_no_alert():
    src = JsonlSource(RECORDING)
    store = RunStore()
    while not src.finished:
        batch = src.poll()
        if not batch:
            break
        store.apply(batch)
    assert store.snapshot(store.runs()[0].key).series["loss"].count > 200
    assert events_of(store, "diverging") == []


SUDDEN = (5, 15, 40, 100, 160)  # times the run's range above its last value
GRADUAL = tuple((2**k - 1) / 8 for k in range(1, 10))  # doubling: 1/8, 3/8, 7/8 ...


@pytest.mark.parametrize("shape", [SUDDEN, GRADUAL], ids=["sudden", "gradual"])
@pytest.mark.parametrize("path", [p for p in real_runs() if not made_to_fail(p)],
                         ids=lambda p: p.stem)
def test_a_blow_up_spliced_onto_a_real_run_alerts_once_as_it_rises(path, shape):
    steps, values = loss_series(path)["loss"]
    span = (max(values) - min(values)) or abs(values[-1]) or 1.0  # (a loss stuck at ln 2)
    gap = steps[-1] - steps[-2]
    blown = [values[-1] + span * f for f in shape]
    new_steps = [steps[-1] + gap * (i + 1) for i in range(len(shape))]
    alerts = divergences({"loss": (steps + new_steps, values + blown)})
    assert len(alerts) == 1
    at = new_steps.index(alerts[0].step)
    assert 2 <= at <= (4 if shape is SUDDEN else 6)  # three values over the bar at least
    assert "loss diverging" in alerts[0].text and "recent level" in alerts[0].text


def test_noise_and_a_grpo_loss_around_zero_do_not_alert():
    rng = random.Random(4)
    store = RunStore()
    rows = [(s, {"loss": rng.gauss(0.0, 0.02), "eval/loss": 1.0 + rng.random() * 0.3})
            for s in range(300)]
    store.apply([ScalarBatch.from_rows(RUN, rows)])
    assert events_of(store, "diverging") == []


def test_alerts_do_not_depend_on_how_the_values_arrive():
    """A stretch checked at once and values read one by one give the same alerts."""
    from carl_tui.store.alerts import AlertWatch

    def steps_alerted(values, batch):
        got = []
        watch = AlertWatch(lambda kind, step, text, sev: got.append(step))
        steps = np.arange(values.shape[0])
        for i in range(0, values.shape[0], batch):
            watch.feed(steps[i : i + batch], {"loss": values[i : i + batch]}, ())
        return got

    seen = 0
    for seed in range(30):
        rng = np.random.default_rng(seed)
        values = 2 * np.exp(-np.arange(600) / 100) + rng.normal(0, 0.05, 600)
        for _ in range(3):  # bumps of every height and length
            at = int(rng.integers(20, 580))
            values[at : at + int(rng.integers(1, 80))] += rng.choice([0.5, 2.0, 10.0])
        whole = steps_alerted(values, 10**6)
        assert steps_alerted(values, 1) == whole == steps_alerted(values, 37)
        seen += len(whole)
    assert seen > 10  # the bumps did raise alerts


def test_a_loss_that_settles_at_a_new_level_is_measured_from_there():
    """A loss that jumps and stays there alerts once; once it has held its new level for
    a window, that is its level: a later blow-up from it alerts again."""
    rng = np.random.default_rng(5)
    values = np.concatenate([1.0 + rng.normal(0, 0.01, 100), 3.0 + rng.normal(0, 0.01, 200),
                             [3.5, 4.5, 6.0, 9.0]])
    steps = list(range(values.shape[0]))
    alerts = divergences({"loss": (steps, values.tolist())})
    assert [a.step for a in alerts] == [102, 302]


async def test_alerts_ring_the_bell_and_can_be_switched_off(monkeypatch):
    async def run(config: AlertConfig) -> tuple[int, list[str]]:
        src = ScriptedSource()
        app = build_app(DashboardConfig(sources=[src],
                                        settings=Settings(refresh_interval=0.05, alerts=config)))
        rings = []
        monkeypatch.setattr(app, "bell", lambda: rings.append(1))
        async with app.run_test(size=(120, 36)) as pilot:
            src.push([ScalarBatch.from_rows(RUN, [(1, {"loss": 0.5})]),
                      Job(RUN, "job-1", "ERROR", message="exit status 1")])
            # The job line shows the state once the update that raised its notice is handled.
            await wait_for(pilot, lambda: "ERROR" in plain_text(app.query_one(JobBar), 120),
                           what="the job's state on screen")
            await pilot.pause()
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
    from carl_tui.ui.follower import collapse

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


def test_a_real_tiny_sft_run_whose_learning_rate_turns_absurd_alerts_as_its_loss_blows_up(
        tmp_path):
    """TRL's SFTTrainer on the tiny model, streamed by the CARL callback and read back by
    the JSONL source: a healthy start, then the learning rate set to 5 from step 25. The
    loss blows up; one alert, within three steps of it, none before."""
    pytest.importorskip("trl")
    from transformers import TrainerCallback
    from transformers import logging as hf_logging
    from trl import SFTConfig, SFTTrainer

    from carl_tui.training.callback import CarlCallback
    from carl_tui.training.tiny import sft_dataset, tiny_model, tiny_tokenizer

    at = 25

    class AbsurdRate(TrainerCallback):
        def on_step_begin(self, args, state, control, optimizer=None, **kwargs):
            if state.global_step >= at:
                for group in optimizer.param_groups:
                    group["lr"] = 5.0

    hf_logging.set_verbosity_error()
    tok, model = tiny_tokenizer(), tiny_model(seed=0)
    stream = tmp_path / "run.jsonl"
    cb = CarlCallback(stream, model.config.vocab_size, run_name="absurd-lr")
    args = SFTConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8,
                     learning_rate=3e-3, lr_scheduler_type="constant", max_steps=at + 8,
                     logging_steps=1, save_strategy="no", report_to=[], use_cpu=True,
                     disable_tqdm=True, seed=0)
    SFTTrainer(model=model, args=args, processing_class=tok, train_dataset=sft_dataset(400),
               callbacks=[AbsurdRate(), cb]).train()
    cb.close()
    store = RunStore()
    store.apply(JsonlSource(stream).poll())
    snap = store.snapshot(store.runs()[0].key)
    loss = dict(zip(snap.series["loss"].steps.tolist(), snap.series["loss"].values.tolist()))
    assert max(loss[s] for s in range(at + 2, at + 9)) > 10 * loss[at]  # it did blow up
    alerts = [e for e in snap.events if e.kind == "diverging"]
    assert len(alerts) == 1 and at < alerts[0].step <= at + 4, [a.text for a in alerts]
