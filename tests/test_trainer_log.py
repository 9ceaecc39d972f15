"""Parsing a Trainer's console output: metric dict lines and tqdm progress bars."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from carl_tui.sources.trainer_log import (
    MAX_LINE_CHARS,
    BarUpdate,
    MetricsLine,
    TrainerLogParser,
    parse_metrics_dict,
    parse_progress,
)

REAL = Path(__file__).parent / "data" / "trainer_stdout.txt"


def test_real_trainer_output():
    """Output of a real transformers Trainer (tests/data/make_trainer_stdout.py)."""
    parser = TrainerLogParser()
    items = [it for line in REAL.read_text().split("\n") for it in parser.feed(line)]
    metrics = [it for it in items if isinstance(it, MetricsLine) and not it.summary]
    assert [m.step for m in metrics] == list(range(1, 13))
    assert all(m.step_from_bar for m in metrics)
    assert metrics[0].values == {
        "loss": 3.889,
        "grad_norm": 0.9558,
        "learning_rate": 0.001,
        "epoch": 0.125,
    }
    assert metrics[-1].values["learning_rate"] == 8.333e-05 and metrics[-1].values["epoch"] == 1.5
    summary = [it for it in items if isinstance(it, MetricsLine) and it.summary]
    assert len(summary) == 1 and summary[0].values["train_loss"] == 3.898
    bars = [it for it in items if isinstance(it, BarUpdate)]
    assert bars[-1].step == 12 and bars[-1].total == 12
    assert parser.total == 12 and parser.lines_seen == 12


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


@given(st.text(max_size=200))
def test_never_raises_on_garbage(s):
    parse_metrics_dict("{" + s)
    parse_progress(s)
    TrainerLogParser().feed(s)


@pytest.mark.parametrize(
    ("text", "step", "total", "eta"),
    [
        (" 45%|████▌     | 45/100 [00:12<00:15,  3.60it/s]", 45, 100, 15.0),
        ("  0%|          | 0/12 [00:00<?, ?it/s]", 0, 12, None),
        ("100%|██████████| 12/12 [00:00<00:00, 425.76it/s]", 12, 12, 0.0),
        (" 45%|████▌     | 45/100 [1:00:12<1:02:03,  3.60s/it, loss=0.3]", 45, 100, 3723.0),
        ("45it [00:12,  3.60it/s]", 45, None, None),
    ],
)
def test_parse_progress(text, step, total, eta):
    bar = parse_progress(text)
    assert bar is not None and (bar.step, bar.total, bar.eta_s) == (step, total, eta)


def test_progress_rejects_plain_text():
    assert parse_progress("loading weights [done]") is None
    assert parse_progress("{'loss': 1.0}") is None


def test_carriage_return_updates_and_step_from_latest_bar():
    p = TrainerLogParser()
    line = "\r 10%|█         | 1/10 [00:01<00:09,  1.00it/s]\r 20%|██        | 2/10 [00:02<00:08,  1.00it/s]\r   \r{'loss': 0.5}"
    items = p.feed(line)
    assert [type(i).__name__ for i in items] == ["BarUpdate", "BarUpdate", "MetricsLine"]
    assert items[-1] == MetricsLine(2, {"loss": 0.5}, False, True)


def test_described_and_evaluation_bars_do_not_move_the_step():
    p = TrainerLogParser()
    p.feed("Map: 100%|██████████| 1000/1000 [00:00<00:00, 9000.00 examples/s]")
    assert p.step is None
    p.feed(" 30%|███       | 3/10 [00:03<00:07,  1.00it/s]")
    p.feed(" 50%|█████     | 2/4 [00:00<00:00,  9.00it/s]")  # evaluation bar inside training
    assert p.feed("{'eval_loss': 1.25}")[0].step == 3
    p.feed(" 40%|████      | 4/10 [00:04<00:06,  1.00it/s]")
    assert p.feed("{'loss': 0.4}")[0].step == 4


def test_step_inferred_from_logging_steps_without_bars():
    p = TrainerLogParser(logging_steps=5)
    steps = [p.feed(f"{{'loss': {i}}}")[0].step for i in range(3)]
    assert steps == [5, 10, 15]
    assert p.feed("{'loss': 1.0}")[0].step_from_bar is False
    assert p.feed("{'step': 42, 'loss': 1.0}")[0].step == 42


def test_summary_line_does_not_count_as_a_log():
    p = TrainerLogParser()
    p.feed("{'loss': 1.0}")
    item = p.feed("{'train_runtime': 1.0, 'train_loss': 0.9, 'epoch': 1.0}")[0]
    assert item.summary and p.lines_seen == 1
