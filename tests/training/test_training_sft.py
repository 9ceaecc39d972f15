"""A real tiny SFT run through TRL's SFTTrainer with the CARL callback streaming."""

from __future__ import annotations

import itertools
import json
import math
import os
import threading

import pytest

pytest.importorskip("trl")

from carl_tui.coherence.gates import PhaseTransitionGate
from carl_tui.training.callback import CarlCallback, StreamWriter
from carl_tui.training.train import (
    ConfigError,
    build_parser,
    load_config,
    main,
    parse_train_args,
    trainer_config,
)

GATE = {"threshold": 0.75, "window": 5, "min_above": 3}


def read_stream(path):
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def run_sft(tmp_path, *, max_steps=150, stop_on_gate=True, gate=None):
    from transformers import logging as hf_logging
    from trl import SFTConfig, SFTTrainer

    from carl_tui.training.tiny import sft_dataset, tiny_model, tiny_tokenizer, warm_start_copy

    hf_logging.set_verbosity_error()
    tok = tiny_tokenizer()
    model = tiny_model(seed=0)
    warm_start_copy(model, tok, steps=40)
    stream = tmp_path / "run.jsonl"
    cb = CarlCallback(stream, model.config.vocab_size,
                      gate=gate if gate is not None else PhaseTransitionGate(**GATE),
                      stop_on_gate=stop_on_gate, run_name="sft-test")
    args = SFTConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=32,
                     learning_rate=3e-3, max_steps=max_steps, logging_steps=1, save_strategy="no",
                     report_to=[], use_cpu=True, disable_tqdm=True, seed=0)
    trainer = SFTTrainer(model=model, args=args, processing_class=tok,
                         train_dataset=sft_dataset(max_steps * 32), callbacks=[cb])
    trainer.train()
    cb.close()
    return cb, read_stream(stream)


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory):
    return run_sft(tmp_path_factory.mktemp("sft"))


@pytest.mark.slow
def test_stream_meta_keys_steps_and_phi(sft_run):
    cb, lines = sft_run
    meta = lines[0]
    assert meta["event"] == "meta" and meta["method"] == "sft" and meta["vocab_size"] == 13
    assert meta["name"] == "sft-test" and meta["run_id"] == cb.run_id
    assert meta["config"]["learning_rate"] == 0.003
    metrics = [x for x in lines if "event" not in x]
    train_rows = [x for x in metrics if "loss" in x]
    assert len(train_rows) >= 10
    for row in train_rows:
        assert {"loss", "entropy", "mean_token_accuracy", "learning_rate", "grad_norm",
                "phi", "time"} <= set(row)
        assert row["phi"] == pytest.approx(1.0 - row["entropy"] / math.log(13), abs=1e-12)
    steps = [x["step"] for x in train_rows]
    assert steps == list(range(1, len(steps) + 1))  # one line per step, logging_steps=1
    all_steps = [x["step"] for x in lines if "step" in x]
    assert all(a <= b for a, b in itertools.pairwise(all_steps))
    assert metrics[-1].get("train_runtime", 0) > 0  # the trainer's final summary log too


@pytest.mark.slow
def test_gate_marker_at_predicted_step_and_training_stops(sft_run):
    cb, lines = sft_run
    rows = [x for x in lines if "mean_token_accuracy" in x]
    gate = PhaseTransitionGate(**GATE)
    predicted = next(r["step"] for r in rows if gate.update(r["step"], r["mean_token_accuracy"],
                                                            entropy=r["entropy"]))
    markers = [x for x in lines if x.get("kind") == "phase_transition"]
    assert len(markers) == 1
    m = markers[0]
    assert m["step"] == predicted == cb.gate_step
    assert m["peak_entropy"] == pytest.approx(gate.peak_entropy)
    assert m["peak_entropy_step"] == gate.peak_entropy_step
    assert rows[-1]["step"] == predicted < 150  # stop_on_gate ended training there
    # the warm-started model melts: entropy rises above its first value before collapsing
    assert max(r["entropy"] for r in rows) > 1.5 * rows[0]["entropy"]
    phases = [x["phase"] for x in lines if x.get("kind") == "phase"]
    assert phases[0] == "baseline" and len(phases) >= 2


@pytest.mark.slow
def test_no_stop_without_stop_on_gate(tmp_path):
    cb, lines = run_sft(tmp_path, max_steps=30, stop_on_gate=False,
                        gate=PhaseTransitionGate(threshold=0.2))
    rows = [x for x in lines if "loss" in x]
    assert cb.gate_step is not None and cb.gate_step < 30
    assert rows[-1]["step"] == 30


def test_stream_writer_lines_are_whole_under_threads(tmp_path):
    w = StreamWriter(tmp_path / "s.jsonl")
    big = "x" * 20000  # larger than any stdio buffer

    def writer(k):
        for i in range(200):
            w.write({"step": i, "k": k, "pad": big if i % 50 == 0 else ""})

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w.close()
    lines = (tmp_path / "s.jsonl").read_text().splitlines()
    assert len(lines) == 800
    assert sorted((json.loads(x)["k"], json.loads(x)["step"]) for x in lines) == [
        (k, i) for k in range(4) for i in range(200)]


def test_callback_drops_non_finite_and_derives_phi(tmp_path):
    cb = CarlCallback(tmp_path / "s.jsonl", 100, gate=False, phases=False)
    cb.write_metrics(3, {"loss": float("nan"), "entropy": math.log(100) / 4, "note": "text",
                         "reward": float("inf"), "n": 7})
    cb.close()
    meta, row = read_stream(tmp_path / "s.jsonl")
    assert meta["event"] == "meta"
    assert row["step"] == 3 and row["n"] == 7 and row["phi"] == pytest.approx(0.75)
    assert "loss" not in row and "reward" not in row and "note" not in row


# -- `carl-tui train` options ------------------------------------------------------


def test_config_file_and_command_line_override(tmp_path):
    cfg = tmp_path / "carl.yaml"
    cfg.write_text("model: tiny\ndataset: tiny\nmethod: sft\nmax-steps: 7\nlearning_rate: 0.01\n"
                   "report_to: trackio\ntrainer:\n  warmup_steps: 3\n")
    args = parse_train_args(["--config", str(cfg), "--max-steps", "9", "--no-carl"])
    assert (args.model, args.dataset, args.method) == ("tiny", "tiny", "sft")
    assert args.max_steps == 9 and args.learning_rate == 0.01 and args.carl is False
    assert args.report_to == ["trackio"] and args.trainer == {"warmup_steps": 3}
    args.report_to = []
    conf = trainer_config(args)
    assert type(conf).__name__ == "SFTConfig"
    assert conf.max_steps == 9 and conf.learning_rate == 0.01 and conf.warmup_steps == 3


def test_config_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: tiny\nbogus_option: 1\n")
    with pytest.raises(ConfigError, match="bogus_option"):
        load_config(bad, build_parser())
    assert main(["--config", str(bad)]) == 2
    with pytest.raises(SystemExit):
        parse_train_args(["--dataset", "tiny"])  # no model
    args = parse_train_args(["--model", "tiny", "--dataset", "tiny", "--method", "grpo",
                             "--num-generations", "4", "--reward", "reverse"])
    conf = trainer_config(args)
    assert type(conf).__name__ == "GRPOConfig" and conf.num_generations == 4
    args.trainer = {"no_such_field": 1}
    with pytest.raises(ConfigError):
        trainer_config(args)


@pytest.mark.slow
def test_train_command_on_the_tiny_model(tmp_path):
    stream = tmp_path / "s.jsonl"
    out = tmp_path / "model"
    rc = main(["--model", "tiny", "--dataset", "tiny", "--method", "sft", "--max-steps", "12",
               "--stream", str(stream), "--output", str(out), "--run-name", "cli"])
    assert rc == 0
    lines = read_stream(stream)
    assert lines[0]["event"] == "meta" and lines[0]["model"] == "tiny"
    assert [x["step"] for x in lines if "loss" in x] == list(range(1, 13))
    assert lines[-1] == {"event": "log", "text": "training finished at step 12"}
    assert os.path.exists(out / "model.safetensors") and os.path.exists(out / "tokenizer.json")


@pytest.mark.slow
def test_dashboard_source_reads_the_callback_stream(sft_run):
    import numpy as np

    from carl_tui.events import Marker, RunMeta, ScalarBatch
    from carl_tui.sources.jsonl import JsonlSource

    cb, lines = sft_run
    src = JsonlSource(cb.writer.path)
    events = []
    for _ in range(5):
        events.extend(src.poll())
    assert src.skipped == 0
    metas = [e for e in events if isinstance(e, RunMeta)]
    assert metas and metas[0].meta["method"] == "sft" and src.run.run_id == cb.run_id
    batches = [e for e in events if isinstance(e, ScalarBatch)]
    steps = np.concatenate([b.steps for b in batches])
    phi = np.concatenate([b.columns["phi"] for b in batches])
    want = [x for x in lines if "phi" in x]
    assert steps[: len(want)].tolist() == [x["step"] for x in want]
    np.testing.assert_allclose(phi[~np.isnan(phi)], [x["phi"] for x in want])
    gates = [e for e in events if isinstance(e, Marker) and e.kind == "phase_transition"]
    assert [g.step for g in gates] == [cb.gate_step]
