"""`summary` and `export` of one real tiny TRL run, written at once by transformers'
TensorBoard callback and by the CARL callback's JSONL stream: the numbers must be those
the Trainer logged, whatever the source."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl")
pytest.importorskip("tensorboard")

from tests.report.test_report import export_rows, summary

pytestmark = pytest.mark.timeout(240)

MAX_STEPS, LOGGING_STEPS, EVAL_STEPS = 40, 5, 20


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A real SFT run (evaluation every 20 steps) logging to TensorBoard and to a CARL
    stream; what the Trainer logged at each `on_log`, with its step."""
    from transformers import TrainerCallback, set_seed
    from transformers import logging as hf_logging
    from trl import SFTConfig, SFTTrainer

    from carl_tui.training.callback import CarlCallback
    from carl_tui.training.tiny import sft_dataset, tiny_model, tiny_tokenizer

    tmp = tmp_path_factory.mktemp("tiny-run")
    logged: list[tuple[int, dict]] = []

    class Record(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            logged.append((state.global_step, dict(logs or {})))

    hf_logging.set_verbosity_error()
    set_seed(0)
    tok = tiny_tokenizer()
    model = tiny_model(hidden_size=32, num_layers=1, num_heads=2)
    carl = CarlCallback(tmp / "run.jsonl", model.config.vocab_size, run_name="tiny")
    args = SFTConfig(output_dir=str(tmp / "out"),  # TensorBoard: out/runs/<date>_<host>
                     per_device_train_batch_size=4, learning_rate=3e-3, max_length=32,
                     max_steps=MAX_STEPS, logging_steps=LOGGING_STEPS, eval_strategy="steps",
                     eval_steps=EVAL_STEPS, per_device_eval_batch_size=4,
                     save_strategy="no", report_to=["tensorboard"], use_cpu=True,
                     disable_tqdm=True, seed=0)
    trainer = SFTTrainer(model=model, args=args, processing_class=tok,
                         train_dataset=sft_dataset(512), eval_dataset=sft_dataset(24, seed=5),
                         callbacks=[Record(), carl])
    result = trainer.train()
    carl.close()
    return tmp, logged, result.training_loss


def sources(tmp):
    return {"tensorboard": ["--tensorboard", str(tmp / "out" / "runs")],
            "jsonl": [str(tmp / "run.jsonl")]}


@pytest.mark.parametrize("source", ["tensorboard", "jsonl"])
def test_the_runs_average_loss_is_not_the_last_steps_loss(tiny_run, source, capsys):
    """The Trainer's end-of-run `train_loss` (the run's average) was stored as the loss of
    the last step: the table's last loss was the average, not what was logged there."""
    tmp, logged, average = tiny_run
    losses = [(step, logs["loss"]) for step, logs in logged if "loss" in logs]
    (end,) = [logs for _, logs in logged if "train_runtime" in logs]
    assert losses[-1][0] == MAX_STEPS and abs(losses[-1][1] - average) > 1e-3
    d = summary(sources(tmp)[source], capsys)
    loss = d["metrics"]["loss"]
    assert loss["last_step"] == MAX_STEPS and loss["count"] == len(losses)
    assert loss["last"] == pytest.approx(losses[-1][1], rel=1e-6)
    assert "train_loss" not in d["metrics"] and "train_runtime" not in d["metrics"]
    kept = d["train_summary"]
    assert kept["step"] == MAX_STEPS
    assert kept["values"]["train_loss"] == pytest.approx(average, rel=1e-6)
    assert kept["values"]["train_runtime"] == pytest.approx(end["train_runtime"], rel=1e-6)
    assert kept["values"]["epoch"] == pytest.approx(end["epoch"], rel=1e-6)
    rows = {r["step"]: r for r in export_rows(sources(tmp)[source], capsys)}
    assert rows[MAX_STEPS]["loss"] == pytest.approx(losses[-1][1], rel=1e-6)
    assert rows[MAX_STEPS]["train_loss"] == pytest.approx(average, rel=1e-6)


def test_evaluation_metrics_have_one_name_whatever_the_source(tiny_run, capsys):
    tmp, logged, _ = tiny_run
    evals = [(step, logs["eval_loss"]) for step, logs in logged if "eval_loss" in logs]
    assert [s for s, _ in evals] == [20, 40]
    for source in sources(tmp).values():
        d = summary(source, capsys)
        names = set(d["metrics"])
        assert "eval/loss" in names and not any(n.startswith("eval_") for n in names)
        assert d["metrics"]["eval/loss"]["last"] == pytest.approx(evals[-1][1], rel=1e-6)
        assert d["metrics"]["eval/loss"]["count"] == 2
        # steps, not rows: the evaluations share their steps with training logs
        assert d["steps_logged"] == MAX_STEPS // LOGGING_STEPS
    stream = [json.loads(line) for line in (tmp / "run.jsonl").read_text().splitlines()]
    assert any("eval_loss" in line for line in stream)  # the stream itself says eval_loss
