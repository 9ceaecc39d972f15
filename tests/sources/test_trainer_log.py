"""Parsing a Trainer's console output: metric dict lines, tqdm bars, and the step of each dict.

The byte patterns below are cut from real runs (tests/data/make_trainer_stdout.py);
`simulated_trainer` drives the real tqdm, with a fake clock, the way transformers'
ProgressCallback does, so that rate-limited bars and buffered stdout can be varied
freely. tests/sources/test_trainer_log_real.py checks real TRL runs end to end.
"""

from __future__ import annotations

import importlib
import io
import itertools
import json
import math
import random
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from carl_tui.events import LogLines, Progress, RunMeta, RunRef, ScalarBatch
from carl_tui.sources.trainer_log import (
    MAX_LINE_CHARS,
    BarUpdate,
    MetricsLine,
    TrainerLogParser,
    looks_like_trainer_log,
    parse_metrics_dict,
    parse_progress,
    trainer_events,
)

REAL = Path(__file__).parents[1] / "data" / "trainer_stdout.txt"
CLEAR = "\r" + " " * 46 + "\r"  # tqdm.write clearing the bar before printing


def bar(n: int, total: int, rate: str = "53.66it/s") -> str:
    pct = 100 * n // total
    return f"\r{pct:3d}%|{'█' * (pct // 10):<10}| {n}/{total} [00:00<00:01, {rate}]"


def run(parser: TrainerLogParser, lines, *, flush_each: bool = False) -> list:
    items = []
    for line in lines:
        items += parser.feed(line)
        if flush_each:
            items += parser.flush()
    return items + parser.flush()


def metrics(items) -> list[MetricsLine]:
    return [it for it in items if isinstance(it, MetricsLine) and not it.summary]


def test_real_trainer_output():
    """Output of a real transformers Trainer, every step drawn (see make_trainer_stdout.py)."""
    parser = TrainerLogParser()
    items = run(parser, REAL.read_text().split("\n"))
    rows = metrics(items)
    assert [m.step for m in rows] == list(range(1, 13))
    assert all(m.step_known for m in rows)
    assert rows[0].values == {
        "loss": 3.889,
        "grad_norm": 0.9558,
        "learning_rate": 0.001,
        "epoch": 0.125,
    }
    assert rows[-1].values["learning_rate"] == 8.333e-05 and rows[-1].values["epoch"] == 1.5
    summary = [it for it in items if isinstance(it, MetricsLine) and it.summary]
    assert len(summary) == 1 and summary[0].values["train_loss"] == 3.898
    assert summary[0].step == 12 and summary[0].step_known
    bars = [it for it in items if isinstance(it, BarUpdate)]
    assert bars[-1].step == 12 and bars[-1].total == 12
    assert parser.total == 12 and parser.lines_seen == 12 and parser.estimated == 0


# -- parse_metrics_dict -----------------------------------------------------------------

@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "{'loss': 0.12, 'reward': 0.8, 'entropy': 1.3, 'epoch': 0.5}",
            {"loss": 0.12, "reward": 0.8, "entropy": 1.3, "epoch": 0.5},
        ),
        (
            "{'loss': '3.889', 'learning_rate': '8.333e-05'}",
            {"loss": 3.889, "learning_rate": 8.333e-05},
        ),
        ('{"loss": 1, "n": -2}', {"loss": 1.0, "n": -2.0}),
        (
            "{'a': np.float64(0.5), 'b': numpy.float32(-1e-3), 'c': tensor(0.25, device='cuda:0')}",
            {"a": 0.5, "b": -1e-3, "c": 0.25},
        ),
        ("{'x': 1.0, 'nested': {'y': 2, 'z': [1, 2, {'q': 3}]}, 'w': 2.0}", {"x": 1.0, "w": 2.0}),
        ("{'flag': True, 'none': None, 'name': 'gpt2', 'list': [1, 2], 'v': .5}", {"v": 0.5}),
        ("{'trailing': 1,}", {"trailing": 1.0}),
        ("{}", {}),
        ("{'quote\\'s': 1}", {"quote's": 1.0}),
        (
            ("{'completions/mean_length': '3.5', 'rewards/reverse_reward/mean': '0.4167', "
            "'clip_ratio/low_mean': '0', 'kl': '1.2e-05'}"),
            {"completions/mean_length": 3.5, "rewards/reverse_reward/mean": 0.4167,
             "clip_ratio/low_mean": 0.0, "kl": 1.2e-05},
        ),
    ],
)
def test_parse_metrics_dict(text, expected):
    assert parse_metrics_dict(text) == expected


def test_non_finite_values_are_kept_as_floats():
    got = parse_metrics_dict(
        "{'loss': nan, 'a': inf, 'b': -inf, 'c': 'NaN', 'd': np.float64(nan), 'e': -Infinity}"
    )
    assert math.isnan(got["loss"]) and math.isnan(got["c"]) and math.isnan(got["d"])
    assert got["a"] == math.inf and got["b"] == -math.inf and got["e"] == -math.inf


@pytest.mark.parametrize(
    "text",
    [
        "not a dict",
        "{'a': 1",
        "{'a' 1}",
        "{a: 1}",
        "{'a': 1} trailing",
        "{'a': __import__('os').system('echo hi')}x",
        "{'a': (1, 2}",
        "{'a': 1 2}",
        "{" + "'k': 1, " * (MAX_LINE_CHARS // 8) + "}",
    ],
)
def test_rejects_non_dicts(text):
    assert parse_metrics_dict(text) is None


def test_calls_are_never_evaluated():
    # A call-shaped value is read as a wrapped scalar at most, never run.
    assert parse_metrics_dict("{'a': __import__('os').getcwd()}") is None
    assert parse_metrics_dict("{'a': exit(3), 'b': 1}") == {"b": 1.0}


@given(
    st.dictionaries(
        st.from_regex(r"[a-z_/]{1,12}", fullmatch=True),
        st.floats(allow_nan=False, allow_infinity=False),
        max_size=8,
    )
)
def test_round_trips_python_repr(d):
    assert parse_metrics_dict(repr(d)) == d


@given(
    st.dictionaries(
        st.from_regex(r"[a-z_/]{1,12}", fullmatch=True),
        st.floats(allow_nan=False, allow_infinity=False, width=32),
        max_size=8,
    )
)
def test_reads_transformers_5_quoted_numbers(d):
    """ProgressCallback prints floats as f"{v:.4g}" strings."""
    printed = str({k: f"{v:.4g}" for k, v in d.items()})
    assert parse_metrics_dict(printed) == {k: float(f"{v:.4g}") for k, v in d.items()}


@given(st.text(max_size=300))
def test_parsers_never_raise_on_text(s):
    got = parse_metrics_dict("{" + s)
    assert got is None or all(isinstance(v, float) for v in got.values())
    bar_ = parse_progress(s)
    assert bar_ is None or (bar_.step >= 0 and (bar_.total is None or bar_.total >= 0))


# -- parse_progress ---------------------------------------------------------------------

@pytest.mark.parametrize(
    ("text", "step", "total", "eta"),
    [
        (" 45%|████▌     | 45/100 [00:12<00:15,  3.60it/s]", 45, 100, 15.0),
        ("  0%|          | 0/12 [00:00<?, ?it/s]", 0, 12, None),
        ("100%|██████████| 12/12 [00:00<00:00, 425.76it/s]", 12, 12, 0.0),
        (" 45%|████▌     | 45/100 [1:00:12<1:02:03,  3.60s/it, loss=0.3]", 45, 100, 3723.0),
        ("45it [00:12,  3.60it/s]", 45, None, None),
        # an evaluation bar inside training: drawn one line down, then the cursor goes up
        ("100%|██████████| 6/6 [00:00<00:00, 506.63it/s]\x1b[A", 6, 6, 0.0),
        (" 43%|████▎     | 26/60 [00:00<00:00, 91.63it/s] ", 26, 60, 0.0),
    ],
)
def test_parse_progress(text, step, total, eta):
    got = parse_progress(text)
    assert got is not None and (got.step, got.total, got.eta_s) == (step, total, eta)
    assert got.desc == ""


def test_progress_keeps_the_description():
    got = parse_progress("Writing model shards: 100%|██████████| 1/1 [00:00<00:00, 425.13it/s]")
    assert got is not None and got.desc == "Writing model shards" and got.step == 1


def test_progress_rejects_plain_text():
    assert parse_progress("loading weights [done]") is None
    assert parse_progress("{'loss': 1.0}") is None
    assert parse_progress("epoch 3 [00:01]") is None


# -- steps: the patterns of real output ------------------------------------------------

def test_step_comes_from_the_bar_redrawn_after_the_dict():
    """SFT, logging_steps=5: the bar drawn before the first dict shows step 1 (tqdm draws
    at most every 0.1 s); tqdm.write redraws the bar after the dict with the true count."""
    log = [
        bar(0, 120) + bar(1, 120) + CLEAR + "{'loss': '2.572', 'epoch': '0.03906'}",
        bar(5, 120) + bar(8, 120) + CLEAR + "{'loss': '2.487', 'epoch': '0.07812'}",
        bar(10, 120) + CLEAR + "{'loss': '2.458', 'epoch': '0.1172'}",
        bar(15, 120) + bar(19, 120),
    ]
    parser = TrainerLogParser()
    items = []
    for line in log:
        items += parser.feed(line)
    rows = metrics(items)
    assert [(m.step, m.step_known) for m in rows] == [(5, True), (10, True), (15, True)]
    assert parser.pending == 0 and parser.step == 19
    # items come in order: each dict just before the bar that told its step
    kinds = [(type(i).__name__, i.step) for i in items]
    assert kinds.index(("MetricsLine", 5)) == kinds.index(("BarUpdate", 5)) - 1


def test_logging_every_step_has_no_duplicate_steps():
    """GRPO, logging_steps=1: no new bar between two logs; the redraw still counts on."""
    log = [
        bar(5, 30) + bar(6, 30) + CLEAR + "{'loss': '0', 'reward': '0.25'}",
        bar(6, 30) + CLEAR + "{'loss': '0', 'reward': '0.5'}",
        bar(7, 30) + CLEAR + "{'loss': '0.047', 'reward': '0.75'}",
        bar(8, 30),
    ]
    rows = metrics(run(TrainerLogParser(), log))
    assert [m.step for m in rows] == [6, 7, 8] and all(m.step_known for m in rows)


def test_a_dict_waits_for_its_bar_and_flush_releases_it_estimated():
    parser = TrainerLogParser()
    assert metrics(parser.feed(bar(0, 30) + bar(2, 30) + CLEAR + "{'loss': '1.5'}")) == []
    assert parser.pending == 1
    held = parser.flush()
    assert len(held) == 1 and not held[0].step_known
    assert held[0].step == 2  # the bar before it is a lower bound; nothing more is known
    assert parser.pending == 0 and parser.flush() == []
    assert parser.estimated == 1


def test_flushed_prediction_is_checked_by_the_next_redraw():
    """Logging every 4 steps with epoch = step / 40: after two exact steps, a flushed dict
    is predicted from the cadence, confirmed by its epoch (known); the redraw then
    confirms it. A later flushed dict whose redraw disagrees is counted."""
    parser = TrainerLogParser()
    rows = []
    for step in (4, 8):
        rows += parser.feed(CLEAR + f"{{'loss': '1', 'epoch': '{step / 40:.4g}'}}")
        rows += parser.feed(bar(step, 100))
    rows += parser.feed(CLEAR + "{'loss': '1', 'epoch': '0.3'}")
    rows += parser.flush()
    assert [(m.step, m.step_known) for m in metrics(rows)] == [(4, True), (8, True), (12, True)]
    parser.feed(bar(12, 100))
    assert parser.mispredicted == 0
    parser.feed(CLEAR + "{'loss': '1', 'epoch': '0.4'}")
    (predicted,) = parser.flush()
    assert (predicted.step, predicted.step_known) == (16, True)
    parser.feed(bar(17, 100))  # the log says otherwise: count it, trust no prediction after
    assert parser.mispredicted == 1
    parser.feed(CLEAR + "{'loss': '1', 'epoch': '0.525'}")
    (later,) = parser.flush()
    assert not later.step_known and later.step >= 17  # at least the bar drawn before it


def test_evaluation_inside_training():
    """sft eval_steps=25, logging_steps=4: the evaluation bar (6 batches) is drawn one
    line down with a cursor-up escape; the eval dict is printed while it is open."""
    log = [
        bar(24, 60),  # the redraw after the step-24 log
        "\r  0%|          | 0/6 [00:00<?, ?it/s]\x1b[A" + CLEAR + "",
        "\r" + " " * 37 + "\r\x1b[A{'eval_loss': '2.368', 'eval_runtime': '0.0153', "
        "'epoch': '0.1953'}",
        bar(25, 60),
        "\r100%|██████████| 6/6 [00:00<00:00, 506.63it/s]\x1b[A",
        "\r" + " " * 46 + "\x1b[A" + bar(26, 60) + CLEAR + "{'loss': '2.366', 'epoch': '0.2188'}",
        bar(28, 60),
    ]
    parser = TrainerLogParser()
    items = run(parser, [""] + log)
    assert [(m.step, m.step_known) for m in metrics(items)] == [(25, True), (28, True)]
    assert metrics(items)[0].values["eval_loss"] == 2.368
    assert [b.total for b in items if isinstance(b, BarUpdate)] == [60, 60, 60, 60]


def test_evaluation_bars_without_escapes_do_not_move_the_step():
    """A log viewer that strips terminal escapes: the evaluation bar is told by its total."""
    log = [
        bar(0, 60),
        bar(24, 60),
        "\r  0%|          | 0/6 [00:00<?, ?it/s]",
        CLEAR + "{'eval_loss': '2.368', 'eval_runtime': '0.0153'}",
        bar(25, 60),
        "\r100%|██████████| 6/6 [00:00<00:00, 506.63it/s]",
        bar(26, 60) + CLEAR + "{'loss': '2.366'}",
        bar(28, 60),
    ]
    assert [m.step for m in metrics(run(TrainerLogParser(), log))] == [25, 28]


def test_described_bars_never_count():
    parser = TrainerLogParser()
    parser.feed("Map: 100%|██████████| 1000/1000 [00:00<00:00, 9000.00 examples/s]")
    parser.feed("\rWriting model shards: 100%|██████████| 1/1 [00:00<00:00, 425.13it/s]")
    assert parser.step is None and parser.total is None


def test_a_warning_glued_to_the_bar():
    """tqdm ends no line: a warning written next lands on the bar's line."""
    log = [
        ("\r  0%|          | 0/40 [00:00<?, ?it/s]/x/modeling_utils.py:3303: FutureWarning: "
        "`is_gradient_checkpointing` is deprecated"),
        "  warnings.warn(",
        CLEAR + "{'loss': '-0.1009', 'epoch': '0.007812'}",
        bar(1, 40),
    ]
    parser = TrainerLogParser()
    items = run(parser, log)
    assert [(m.step, m.step_known) for m in metrics(items)] == [(1, True)]
    assert [b.step for b in items if isinstance(b, BarUpdate)] == [0, 1]


def test_resumed_run_starts_at_the_checkpoint_step():
    log = [
        "[transformers] There were missing keys in the checkpoint model loaded",
        bar(0, 90) + CLEAR + "{'loss': '2.31', 'epoch': '0.3281'}",
        bar(42, 90) + CLEAR + "{'loss': '2.343', 'epoch': '0.3516'}",
        bar(45, 90),
    ]
    rows = metrics(run(TrainerLogParser(), log))
    assert [(m.step, m.step_known) for m in rows] == [(42, True), (45, True)]


def test_a_second_training_continues_the_steps():
    """SFT then GRPO in one log: after the first training's summary, a bar counting from
    0 starts the next; its steps follow the last step of the first."""
    log = [
        bar(0, 30) + CLEAR + "{'loss': '2.1'}",
        bar(15, 30) + CLEAR + "{'loss': '2.0'}",
        bar(30, 30) + CLEAR + "{'train_runtime': '1.2', 'train_loss': '2.05'}",
        bar(30, 30) + bar(30, 30),
        "",
        bar(0, 12) + CLEAR + "{'loss': '0.1', 'reward': '0.3'}",
        bar(1, 12) + CLEAR + "{'loss': '0.2', 'reward': '0.4'}",
        bar(2, 12),
    ]
    items = run(TrainerLogParser(), log)
    assert [m.step for m in metrics(items)] == [15, 30, 31, 32]
    summary = [m for m in items if isinstance(m, MetricsLine) and m.summary]
    assert summary[0].step == 30 and summary[0].values["train_loss"] == 2.05


@pytest.mark.parametrize("chunk", [256, 30])
def test_buffered_stdout_takes_the_queued_redraws(monkeypatch, chunk):
    """stdout block-buffered (real tqdm, real io buffering): stderr shows each tqdm.write
    as a clear and a redraw at once, the dicts come later. 256-byte chunks: bursts of
    dicts, each burst written out by the next dict's text, so the redraw after a burst
    belongs to a dict still in the buffer. 30-byte chunks (dicts longer than a chunk):
    each dict is written out by itself, its newline later, and its redraw follows on
    the same line."""
    text, truth = simulated_trainer(monkeypatch, max_steps=90, logging_steps=1,
                                    step_times=[0.03], buffered=True, buffer_size=chunk)
    lines = text.split("\n")
    dict_then_bar = sum(1 for line in lines if line.startswith("{") and "}\r" in line)
    bursts = sum(1 for a, b in itertools.pairwise(lines) if a.startswith("{") and b.startswith("{"))
    assert (bursts > 10 and dict_then_bar == 0) if chunk == 256 else dict_then_bar > 80
    items, parser = parsed_steps(text)
    assert [m.step for m in items] == truth and all(m.step_known for m in items)
    assert parser.estimated == 0


def test_progress_bars_off_estimates_from_the_logging_steps_hint():
    """disable_tqdm=True: the Trainer prints only the dicts. Steps are estimated."""
    parser = TrainerLogParser(logging_steps=5)
    lines = [f"{{'loss': {i}}}" for i in range(3)]
    assert parser.feed(lines[0]) == []  # held: a bar may yet follow
    rows = metrics(run(parser, lines[1:]))
    rows = [MetricsLine(5, {"loss": 0.0}, False, False)] + rows if len(rows) == 2 else rows
    assert [m.step for m in rows] == [5, 10, 15]
    assert not any(m.step_known for m in rows)


def test_explicit_step_key_is_used_when_no_bar_tells():
    parser = TrainerLogParser()
    rows = metrics(run(parser, ["{'step': 42, 'loss': 1.0}", "{'global_step': 50, 'loss': 2}"]))
    assert [(m.step, m.step_known) for m in rows] == [(42, True), (50, True)]


def test_summary_line_does_not_count_as_a_log():
    parser = TrainerLogParser()
    items = run(parser, ["{'loss': 1.0}", ("{'train_runtime': 1.0, 'train_loss': 0.9, "
                                          "'epoch': 1.0}")])
    assert parser.lines_seen == 1
    assert [m.summary for m in items if isinstance(m, MetricsLine)] == [False, True]


def test_unreadable_dict_lines_are_counted():
    parser = TrainerLogParser()
    run(parser, [bar(0, 10), CLEAR + "{'loss': 1 2}", bar(1, 10)])
    assert parser.take_unreadable() == (1, "{'loss': 1 2}")
    assert parser.take_unreadable() == (0, "")


# -- real tqdm, driven like transformers' ProgressCallback ------------------------------

class _Clock:
    def __init__(self) -> None:
        self.t = 1_000.0

    def __call__(self) -> float:
        return self.t


class _Sink(io.RawIOBase):
    def __init__(self) -> None:
        self.data = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        self.data += b
        return len(b)


def simulated_trainer(monkeypatch, *, max_steps, logging_steps, step_times, eval_steps=0,
                      eval_batches=3, buffered=False, buffer_size=1024, first_step=False,
                      start=0, spe=64):
    """The bytes a Trainer's ProgressCallback makes tqdm write (stdout and stderr in one
    file), and the true step of each printed dict. The dicts are printed like
    transformers 5 (f"{v:.4g}" strings); epoch = step / spe."""
    pytest.importorskip("tqdm")  # the real tqdm draws the bars (a dependency of [train])
    from tqdm.std import tqdm

    clock = _Clock()
    monkeypatch.setattr(importlib.import_module("tqdm.std"), "time", clock)
    sink = _Sink()
    err = io.TextIOWrapper(sink, encoding="utf-8", line_buffering=True, write_through=True)
    out = err
    if buffered:  # as Python sets up stdout for a file or a pipe; smaller bursts than 8 KB
        out = io.TextIOWrapper(io.BufferedWriter(sink, buffer_size=buffer_size), encoding="utf-8")
        out._CHUNK_SIZE = buffer_size  # type: ignore[attr-defined]
    truth: list[int] = []
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)

    def log(step, values):
        truth.append(step)
        tqdm.write(str({k: f"{v:.4g}" for k, v in values.items()}))

    training = tqdm(total=max_steps, dynamic_ncols=True)
    current = 0
    for step in range(start + 1, max_steps + 1):
        clock.t += step_times[step % len(step_times)]
        training.update(step - current)
        current = step
        if step % logging_steps == 0 or (first_step and step == 1):
            log(step, {"loss": 1 / step, "grad_norm": 0.5, "epoch": step / spe})
        if eval_steps and (step % eval_steps == 0 or step == max_steps):
            evaluation = tqdm(total=eval_batches, leave=False, dynamic_ncols=True)
            for _ in range(eval_batches):
                clock.t += 0.004
                evaluation.update(1)
            log(step, {"eval_loss": 2 / step, "eval_runtime": 0.01, "epoch": step / spe})
            evaluation.close()
    log(max_steps, {"train_runtime": clock.t - 1_000, "train_loss": 0.5,
                    "epoch": max_steps / spe})
    training.close()
    out.flush()
    monkeypatch.undo()
    return bytes(sink.data).decode("utf-8"), truth


def parsed_steps(text, *, flush_each=False):
    parser = TrainerLogParser()
    items = run(parser, text.split("\n"), flush_each=flush_each)
    return [it for it in items if isinstance(it, MetricsLine)], parser


configs = st.fixed_dictionaries({
    "max_steps": st.integers(5, 90),
    "logging_steps": st.integers(1, 9),
    "step_times": st.lists(st.sampled_from([0.004, 0.01, 0.03, 0.07, 0.12, 0.5]),
                           min_size=1, max_size=5),
    "eval_steps": st.sampled_from([0, 0, 7, 10]),
    "buffered": st.booleans(),
    "buffer_size": st.sampled_from([256, 1024, 8192]),
    "first_step": st.booleans(),
    "start": st.sampled_from([0, 0, 3]),
})


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(configs)
def test_every_dict_gets_its_true_step(monkeypatch, config):
    text, truth = simulated_trainer(monkeypatch, **config)
    items, parser = parsed_steps(text)
    assert [m.step for m in items] == truth
    assert all(m.step_known for m in items)
    assert parser.mispredicted == 0


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(configs)
def test_flushing_at_any_line_never_claims_a_wrong_step(monkeypatch, config):
    """A caller flushing whenever the stream is idle (here: after every line) gets
    estimates, flagged; a step given as known is the true one."""
    text, truth = simulated_trainer(monkeypatch, **config)
    items, parser = parsed_steps(text, flush_each=True)
    assert len(items) == len(truth)
    wrong_known = [(m.step, t) for m, t in zip(items, truth) if m.step_known and m.step != t]
    assert wrong_known == []
    assert parser.mispredicted == 0
    assert_monotonic(items)


def test_old_parser_bug_is_reproduced_by_the_simulation(monkeypatch):
    """The staleness the parser must undo: the bar drawn before most dicts is behind."""
    text, truth = simulated_trainer(monkeypatch, max_steps=60, logging_steps=5,
                                    step_times=[0.01])
    before = []
    last = None
    for line in text.split("\n"):
        for seg in line.split("\r"):
            got = parse_progress(seg)
            if got is not None:
                last = got.step
            elif seg.startswith("{'loss'"):
                before.append(last)
    assert sum(b != t for b, t in zip(before, truth)) >= len(before) // 2
    items, _ = parsed_steps(text)
    assert [m.step for m in items] == truth


# -- arbitrary input --------------------------------------------------------------------

def assert_monotonic(items):
    steps = [m for m in items if isinstance(m, MetricsLine) and not m.summary]
    for a, b in itertools.pairwise(steps):
        assert b.step >= a.step
    by_kind: dict[bool, list[int]] = {}
    for m in steps:
        by_kind.setdefault("eval_loss" in m.values, []).append(m.step)
    for seq in by_kind.values():
        assert all(b > a for a, b in itertools.pairwise(seq))


def test_a_resumed_training_never_places_a_dict_before_its_checkpoint():
    """Found by the property below: a training whose bar starts at 2 (a resume from the
    checkpoint at step 2) put the evaluation dict after it at step 0, behind the step
    already logged: a resume's steps go back no further than its checkpoint."""
    parts = [bar(0, 2), "{'loss': '0.0', 'epoch': '0.0'}", bar(0, 1),
             "{'train_runtime': 1.0, 'train_loss': 0.5}", bar(2, 3),
             "{'eval_loss': 0.0, 'eval_runtime': 0.1}"]
    parser = TrainerLogParser()
    items = parser.feed("".join(parts)) + parser.flush()
    steps = [(m.step, min(m.values)) for m in items if isinstance(m, MetricsLine)]
    assert steps == [(1, "epoch"), (1, "train_loss"), (2, "eval_loss")], steps
    assert_monotonic(items)


segments = st.one_of(
    st.builds(lambda n, t: bar(min(n, t), t), st.integers(0, 50), st.integers(1, 50)),
    st.builds(lambda n, t: f"\r{n}/{t} [00:00<00:00]\x1b[A", st.integers(0, 50),
              st.integers(1, 50)),
    st.just(CLEAR),
    st.just("\r   \r\x1b[A"),
    st.just("\n"),
    st.builds(lambda v, e: f"{{'loss': '{v}', 'epoch': '{e}'}}", st.floats(-5, 5),
              st.floats(0, 3)),
    st.builds(lambda v: f"{{'eval_loss': {v}, 'eval_runtime': 0.1}}", st.floats(0, 5)),
    st.builds(lambda s: f"{{'step': {s}, 'loss': 1}}", st.integers(-5, 100)),
    st.just("{'train_runtime': 1.0, 'train_loss': 0.5}"),
    st.just("{'loss': broken"),
    st.text(max_size=30),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(segments, max_size=60), st.lists(st.booleans(), max_size=60))
def test_any_mix_of_segments_never_raises_or_goes_back(parts, flushes):
    parser = TrainerLogParser()
    items = []
    for line, flush in zip("".join(parts).split("\n"), flushes + [False] * 60):
        items += parser.feed(line)
        if flush:
            items += parser.flush()
    items += parser.flush()
    assert parser.pending == 0
    assert_monotonic(items)
    assert all(isinstance(m.step, int) and m.step >= 0 for m in items
               if isinstance(m, MetricsLine))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000))
def test_any_bytes_never_raise(data):
    parser = TrainerLogParser()
    items = run(parser, data.decode("utf-8", "replace").split("\n"))
    assert_monotonic(items)
    looks_like_trainer_log(data)


# -- telling a Trainer log from a JSONL stream -----------------------------------------

def test_real_trainer_log_heads_are_trainer_logs():
    data = REAL.read_bytes()
    for n in (200, 400, 1000, 4096, len(data)):
        assert looks_like_trainer_log(data[:n]), n


@pytest.mark.parametrize(
    "head",
    [
        (b"/x/training_args.py:1541: FutureWarning: `gradient_checkpointing` is deprecated\n"
        b"  warnings.warn(f\"`{old}` is deprecated\", FutureWarning)\n"),
        (b"\rMap:   0%|          | 0/512 [00:00<?, ? examples/s]\rMap: 100%|##########| "
        b"512/512 [00:00<00:00, 34716.91 examples/s]\n"),
        b"Loading checkpoint shards: 100%|##| 2/2 [00:03<00:00,  1.6s/it]\n{'loss': 0.5}\n",
        b"{'loss': '2.572', 'grad_norm': '1.863', 'epoch': '0.03906'}\n",
        "\ufeff[transformers] Model config: bos_token_id\n".encode(),
    ],
)
def test_trainer_log_heads(head):
    assert looks_like_trainer_log(head)


@pytest.mark.parametrize(
    "head",
    [
        b"",
        b"\n\n",
        (json.dumps({"event": "meta", "run_id": "r1", "method": "sft"}) + "\n"
         + json.dumps({"step": 1, "loss": 0.5, "time": 1.7e9}) + "\n").encode(),
        b'{"step": 1, "loss": 0.5}\n{"step": 2, "loss": 0.4}\n{"step": 3, "lo',
        b'{"step": 1, "loss": NaN}\n{"step": 2, "text": "45%|###| 45/100 [00:12<00:15]"}\n',
    ],
)
def test_jsonl_heads(head):
    assert not looks_like_trainer_log(head)


# -- items -> events ----------------------------------------------------------------------

RUN = RunRef("trainer-log", "p", "r")


def test_trainer_events():
    items = [
        BarUpdate(4, 60, 12.0),
        MetricsLine(4, {"loss": 2.5, "train/entropy": 1.25, "epoch": 0.06}, False, True),
        MetricsLine(8, {"loss": math.nan, "grad_norm": 0.7}, False, False),
        MetricsLine(9, {"reward": math.inf}, False, True),
        BarUpdate(9, 60, 10.0),
        MetricsLine(60, {"train_loss": 2.1, "train_runtime": 3.5}, True, True),
    ]
    skipped = []

    def clean(values, rename):
        from carl_tui.sources.trainer_log import clean_values

        return clean_values(values, rename, lambda reason, ex: skipped.append((reason, ex)))

    events = trainer_events(RUN, items, clean, wall_time=123.0)
    metas = [e.meta for e in events if isinstance(e, RunMeta)]
    assert metas == [{"train_summary": {"train_loss": 2.1, "train_runtime": 3.5},
                      "train_summary_step": 60},
                     {"steps_estimated": True}]
    (batch,) = [e for e in events if isinstance(e, ScalarBatch)]
    assert list(batch.steps) == [4, 8] and batch.wall_time == 123.0
    assert batch.columns["entropy"][0] == 1.25 and math.isnan(batch.columns["loss"][1])
    assert [e for e in events if isinstance(e, Progress)] == [Progress(RUN, 9, 60, 10.0)]
    assert [r for r, _ in skipped] == ["value not a finite number"] * 2


def test_trainer_events_without_estimates_say_nothing_about_them():
    events = trainer_events(RUN, [MetricsLine(3, {"loss": 1.0})])
    assert not any(isinstance(e, RunMeta) for e in events)
    assert trainer_events(RUN, []) == []


def test_a_count_going_back_is_not_a_new_training():
    rows = metrics(run(TrainerLogParser(), [bar(0, 50), bar(10, 50) + CLEAR + "{'loss': '1'}",
                                            bar(12, 50) + bar(9, 50) + CLEAR + "{'loss': '2'}",
                                            bar(14, 50)]))
    assert [m.step for m in rows] == [12, 14]


def test_long_noisy_stream_with_warnings():
    """400 logs at irregular steps, stale bars between, warnings landing on a bar's line
    (tqdm ends no line), all read in one pass with the true steps."""
    rng = random.Random(7)
    lines, truth, step, redraw = [], [], 0, ""
    for _ in range(400):
        line = redraw
        for drawn in sorted(rng.randint(0, 1) for _ in range(rng.randint(0, 2))):
            line += bar(step + drawn, 5000)  # rate-limited draws: behind the true count
        if rng.random() < 0.15:
            lines.append(line + "UserWarning: something [see docs]")
            line = ""
        step += rng.randint(1, 4)
        truth.append(step)
        values = f"{{'loss': '{rng.random():.4g}', 'epoch': '{step / 800:.4g}'}}"
        lines.append(line + CLEAR + values)
        redraw = bar(step, 5000)
    lines.append(redraw)
    parser = TrainerLogParser()
    rows = metrics(run(parser, lines))
    assert [m.step for m in rows] == truth and all(m.step_known for m in rows)
    assert parser.mispredicted == 0


# -- the file source on small files ------------------------------------------------------

def test_file_source_counts_what_it_cannot_use(tmp_path):
    from carl_tui.sources.trainer_file import TrainerLogSource

    path = tmp_path / "train.log"
    path.write_text(bar(0, 10) + CLEAR + "{'loss': nan, 'reward': '0.5'}\n"
                    + bar(1, 10) + CLEAR + "{'loss': 1 2}\n" + bar(2, 10) + "\n")
    source = TrainerLogSource(path, idle_flush_s=0.0)
    events = source.poll() + source.poll()
    assert [int(s) for e in events if isinstance(e, ScalarBatch) for s in e.steps] == [1]
    reasons = {r.reason: (r.count, r.example) for r in source.unused_input.reasons()}
    assert reasons["value not a finite number"] == (1, "loss: nan")
    assert reasons["dict line not readable"] == (1, "{'loss': 1 2}")
    assert source.skipped == 2


def test_file_source_starts_over_when_the_file_is_rewritten(tmp_path):
    """A new run writing the same nohup.out: read from the start with a fresh parser."""
    from carl_tui.sources.trainer_file import TrainerLogSource

    path = tmp_path / "nohup.out"
    first = bar(0, 10) + CLEAR + "{'loss': '1.0'}\n" + bar(4, 10) + CLEAR + "{'loss': '0.9'}\n"
    path.write_text(first + bar(8, 10) + "\n")
    source = TrainerLogSource(path, idle_flush_s=3600)
    events = source.poll()
    steps = [int(s) for e in events if isinstance(e, ScalarBatch) for s in e.steps]
    assert steps == [4, 8]
    path.write_text(bar(0, 20) + CLEAR + "{'loss': '2.0'}\n" + bar(3, 20) + "\n")
    events = source.poll()
    steps = [int(s) for e in events if isinstance(e, ScalarBatch) for s in e.steps]
    assert steps == [3] and source.generation == 1
    notes = [line for e in events if isinstance(e, LogLines) for line in e.lines
             if line.startswith("[carl-tui]")]
    assert len(notes) == 1 and "nohup.out" in notes[0]
    source.close()
