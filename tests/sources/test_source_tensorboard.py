"""TensorBoardSource against event files written by the real writers.

torch's `SummaryWriter` (old- and new-style scalars, text, histograms, images,
hparams), tensorboardX's, TensorBoard's own `EventFileWriter` with TF2-shaped
tensor summaries, a real tiny TRL GRPO run with `report_to="tensorboard"`, an
OpenRLHF-shaped log, and a writer process followed while it writes. Damaged
files are copies of real ones with bytes cut or changed.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorboard")  # torch.utils.tensorboard writes through it

from hypothesis import given, settings
from hypothesis import strategies as st

from carl_tui.events import LogLines, RunMeta, ScalarBatch
from carl_tui.metric_names import canonical
from carl_tui.sources import tensorboard as tb
from carl_tui.sources import tfevents as tfe
from carl_tui.sources.base import SourceError


def f32(v: float) -> float:
    """What a float32 field (`simple_value`, `float_val`) keeps of v."""
    return float(np.float32(v))


def drain(src: tb.TensorBoardSource, max_polls: int = 1000) -> list:
    """Poll until the source is caught up (interval > 0 after a poll)."""
    events: list = []
    for _ in range(max_polls):
        events.extend(src.poll())
        if src.interval > 0:
            return events
    raise AssertionError("source never caught up")


def points(events, run: str | None = None) -> dict[str, list[tuple[int, float]]]:
    """{metric: [(step, value), ...]} in arrival order, from the ScalarBatches."""
    out: dict[str, list[tuple[int, float]]] = {}
    for e in events:
        if not isinstance(e, ScalarBatch) or (run is not None and e.run.run_id != run):
            continue
        assert e.steps.dtype == np.int64
        for name, col in e.columns.items():
            assert col.dtype == np.float64 and col.shape == e.steps.shape
        for i, step in enumerate(e.steps.tolist()):
            for name, col in e.columns.items():
                if not math.isnan(col[i]):
                    out.setdefault(name, []).append((step, float(col[i])))
    return out


def times(events, run: str | None = None) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for e in events:
        if isinstance(e, ScalarBatch) and (run is None or e.run.run_id == run):
            for s, t in zip(e.steps.tolist(), e.times.tolist()):
                out.setdefault(s, []).append(t)
    return out


def metas(events, run: str | None = None) -> list[dict]:
    return [e.meta for e in events if isinstance(e, RunMeta)
            and (run is None or e.run.run_id == run)]


def noisy(rng: random.Random, centre: float, spread: float) -> float:
    return centre + rng.gauss(0.0, spread)


def grpo_rows(n: int, seed: int = 7, every: int = 5) -> list[tuple[int, dict[str, float]]]:
    """(step, {tag: value}) shaped like TRL's GRPOTrainer through TensorBoard."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        t = i / n
        rows.append(((i + 1) * every, {
            "train/loss": noisy(rng, 0.031 * (1 - t) + 0.004, 0.0027),
            "train/reward": noisy(rng, 0.18 + 0.61 * t, 0.047),
            "train/entropy": abs(noisy(rng, 1.93 - 1.1 * t, 0.081)),
            "train/kl": abs(noisy(rng, 0.0009 + 0.013 * t, 0.0004)),
            "train/learning_rate": 1e-6 * (1 - t) + 3.7e-9,
            "train/rewards/accuracy_reward/mean": noisy(rng, 0.12 + 0.55 * t, 0.05),
            "train/completions/mean_length": noisy(rng, 187.3 - 40 * t, 6.1),
            "NDR": noisy(rng, 0.4 + 0.3 * t, 0.02),
            "TES": noisy(rng, 12.5 - 4 * t, 0.7),
        }))
    return rows


MODEL_CONFIG = {  # transformers 4.x wrote `_name_or_path` into the model config text
    "_name_or_path": "Qwen/Qwen2.5-0.5B-Instruct", "architectures": ["Qwen2ForCausalLM"],
    "hidden_size": 896, "model_type": "qwen2", "vocab_size": 151936,
}
ARGS = {"learning_rate": 1e-06, "num_generations": 8, "scale_rewards": "group", "beta": 0.04,
        "logging_steps": 5, "max_steps": 1500, "output_dir": "out/grpo"}
T0 = 1_732_350_000.125


# -- torch's SummaryWriter -----------------------------------------------------------------


@pytest.fixture(scope="module")
def torch_logdir(tmp_path_factory):
    """One run written by torch's SummaryWriter with everything a run may hold."""
    from torch.utils.tensorboard import SummaryWriter

    root = tmp_path_factory.mktemp("torch") / "grpo-logs"
    w = SummaryWriter(str(root / "run-a"))
    rng = np.random.default_rng(3)
    w.add_text("args", json.dumps(ARGS, indent=2))
    w.add_text("model_config", json.dumps(MODEL_CONFIG, indent=2))
    expected: dict[str, list[tuple[int, float]]] = {}
    for i, (step, row) in enumerate(grpo_rows(60)):
        wall = T0 + step * 1.37
        for tag, v in row.items():
            w.add_scalar(tag, v, step, walltime=wall)
            expected.setdefault(canonical(tag), []).append((step, f32(v)))
        # new-style scalars (a 0-d tensor), float32 and float64
        gn = abs(0.41 + rng.normal(0, 0.09))
        w.add_scalar("train/grad_norm", gn, step, walltime=wall, new_style=True)
        expected.setdefault("grad_norm", []).append((step, f32(gn)))
        rs = abs(0.29 + rng.normal(0, 0.031))
        w.add_scalar("train/reward_std", rs, step, walltime=wall, new_style=True,
                     double_precision=True)
        expected.setdefault("reward_std", []).append((step, float(rs)))
        if i in (10, 30, 50):
            w.add_histogram("train/completion_lengths", rng.normal(180, 30, 64), step)
        if i in (20, 40):
            w.add_image("samples", rng.random((3, 8, 8)), step)
    w.add_scalar("train/kl", math.nan, 305, walltime=T0 + 305 * 1.37)  # an fp16 overflow
    w.add_hparams({"lr": 1e-6, "beta": 0.04}, {"hparam/final_reward": 0.7134}, run_name="hp")
    w.close()
    return root, expected


def test_torch_writer_every_scalar_arrives_exactly(torch_logdir):
    root, expected = torch_logdir
    src = tb.TensorBoardSource(root)
    events = drain(src)
    got = points(events, "run-a")
    assert got == expected
    # several tags at one step make one row; each row keeps the wall time written
    batches = [e for e in events if isinstance(e, ScalarBatch) and e.run.run_id == "run-a"]
    assert sum(len(b) for b in batches) == 60
    # ScalarBatch.times: each row's wall time
    assert times(events, "run-a") == {s: [T0 + s * 1.37] for s, _ in expected["loss"]}
    assert max(b.wall_time for b in batches) == T0 + 300 * 1.37
    ref = batches[0].run
    assert (ref.source, ref.project, ref.run_id, ref.name) == (
        "tensorboard", "grpo-logs", "run-a", "run-a")


def test_torch_writer_config_text_gives_vocab_and_model(torch_logdir):
    root, _ = torch_logdir
    events = drain(tb.TensorBoardSource(root))
    (meta,) = metas(events, "run-a")
    assert meta["vocab_size"] == 151936
    assert meta["model"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert meta["method"] == "grpo"
    assert meta["config"] == {**MODEL_CONFIG, **ARGS}
    # the meta comes before the first scalars, so phi can be derived from the first point
    own = [e for e in events if e.run.run_id == "run-a"]
    assert isinstance(own[0], RunMeta) and isinstance(own[1], ScalarBatch)


def test_torch_writer_media_are_counted_not_errors(torch_logdir):
    root, _ = torch_logdir
    src = tb.TensorBoardSource(root)
    events = drain(src)
    notes = dict(src.unused_input.notes())
    assert notes == {"text": 2, "histogram": 3, "image": 2, "hparams": 3}
    # the one NaN: skipped, counted by reason, reported for the alert
    reasons = [(r.reason, r.count) for r in src.unused_input.reasons()]
    assert reasons == [("value not a finite number", 1)]
    assert "train/kl=nan at step 305" in src.unused_input.reasons()[0].example
    # ScalarBatch.nonfinite: for the NaN alert
    nonfinite = [x for e in events if isinstance(e, ScalarBatch) for x in e.nonfinite]
    assert nonfinite == [("kl", 305)]


def test_hparams_run_is_a_nested_run(torch_logdir):
    root, _ = torch_logdir
    events = drain(tb.TensorBoardSource(root))
    assert points(events, "run-a/hp") == {"hparam/final_reward": [(0, f32(0.7134))]}
    assert [r.name for r in tb.list_runs(root)] and {r.name for r in tb.list_runs(root)} == {
        "run-a", "run-a/hp"}
    only = drain(tb.TensorBoardSource(root, runs=["run-a/hp"]))
    assert {e.run.run_id for e in only if isinstance(e, ScalarBatch)} == {"run-a/hp"}
    under = drain(tb.TensorBoardSource(root, runs=["run-a"]))  # a run and the runs under it
    assert {e.run.run_id for e in under if isinstance(e, ScalarBatch)} == {"run-a", "run-a/hp"}
    tail = drain(tb.TensorBoardSource(root, runs=["hp/"]))  # the run folder's own name
    assert {e.run.run_id for e in tail if isinstance(e, ScalarBatch)} == {"run-a/hp"}
    with pytest.raises(SourceError, match="waiting for run a/hp"):  # whole names only
        tb.TensorBoardSource(root, runs=["a/hp"]).poll()


def test_matches_tensorboards_own_loader(torch_logdir):
    """Every simple_value scalar as TensorBoard's EventAccumulator reads it."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    root, _ = torch_logdir
    acc = ea.EventAccumulator(str(root / "run-a"), size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    acc.Reload()
    ref = {canonical(tag): [(s.step, s.value) for s in acc.Scalars(tag)]
           for tag in acc.Tags()["scalars"]}
    for tag in acc.Tags()["tensors"]:  # new-style scalars land among the tensors there
        from tensorboard.util import tensor_util

        if acc.SummaryMetadata(tag).plugin_data.plugin_name != "scalars":
            continue  # the config texts
        ref[canonical(tag)] = [(t.step, float(tensor_util.make_ndarray(t.tensor_proto)))
                               for t in acc.Tensors(tag)]
    ref["kl"] = [p for p in ref["kl"] if not math.isnan(p[1])]
    got = points(drain(tb.TensorBoardSource(root)), "run-a")
    assert got == ref


# -- other writers ---------------------------------------------------------------------------


def test_tensorboardx_writer(tmp_path):
    tbx = pytest.importorskip("tensorboardX")
    w = tbx.SummaryWriter(str(tmp_path / "tbx"))
    expected: dict[str, list] = {}
    for step, row in grpo_rows(25, seed=11, every=1):
        for tag, v in row.items():
            w.add_scalar(tag, v, step)
            expected.setdefault(canonical(tag), []).append((step, f32(v)))
    w.add_text("model_config", json.dumps({"vocab_size": 32003, "_name_or_path": "tiny/llama"}))
    w.add_histogram("weights", np.linspace(-1, 1, 50), 3)
    w.close()
    src = tb.TensorBoardSource(tmp_path / "tbx")
    events = drain(src)
    assert points(events) == expected
    assert metas(events)[0]["vocab_size"] == 32003 and metas(events)[0]["model"] == "tiny/llama"
    assert dict(src.unused_input.notes()) == {"text": 1, "histogram": 1}
    assert src.unused_input.total == 0
    # a logdir whose event files lie in it directly: the run is named after its folder
    assert {e.run.run_id for e in events if isinstance(e, ScalarBatch)} == {"tbx"}


def test_tf2_shaped_tensor_summaries(tmp_path):
    """What TF2's C++ writer sends, built with TensorBoard's own protos and writer:
    0-d tensors (typed values or tensor_content), metadata with a tag's first value only."""
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2
    from tensorboard.compat.proto import types_pb2 as dt
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    def meta(plugin):
        return summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=plugin))

    def value(tag, tensor, plugin=None):
        v = summary_pb2.Summary.Value(tag=tag, tensor=tensor)
        if plugin:
            v.metadata.CopyFrom(meta(plugin))
        return v

    scalar0 = tensor_shape_pb2.TensorShapeProto()
    w = EventFileWriter(str(tmp_path / "tf2"))
    rng = random.Random(5)
    expected: dict[str, list] = {"loss": [], "kl": [], "tokens": []}
    for step in range(0, 40, 2):
        loss = noisy(rng, 2.0 * math.exp(-step / 15) + 0.3, 0.01)
        kl = abs(noisy(rng, 0.002 * step, 0.0005))
        tokens = 4096 * step + rng.randint(0, 4000)
        vals = [
            value("train/loss", tensor_pb2.TensorProto(  # tensor_content, as TF2's C++ writes
                dtype=dt.DT_FLOAT, tensor_shape=scalar0,
                tensor_content=np.float32(loss).tobytes()), "scalars" if step == 0 else None),
            value("train/kl", tensor_pb2.TensorProto(dtype=dt.DT_DOUBLE, tensor_shape=scalar0,
                                                     double_val=[kl]),
                  "scalars" if step == 0 else None),
            value("tokens", tensor_pb2.TensorProto(dtype=dt.DT_INT64, tensor_shape=scalar0,
                                                   int64_val=[tokens]),
                  "scalars" if step == 0 else None),
            # a plugin's 0-d number: remembered as that plugin's, never a scalar
            value("custom/gauge", tensor_pb2.TensorProto(dtype=dt.DT_FLOAT,
                                                         tensor_shape=scalar0, float_val=[0.5]),
                  "my_plugin" if step == 0 else None),
        ]
        if step == 10:
            vals.append(value("notes", tensor_pb2.TensorProto(
                dtype=dt.DT_STRING, tensor_shape=scalar0, string_val=[b"warmup done"]), "text"))
        ev = event_pb2.Event(wall_time=T0 + step, step=step,
                             summary=summary_pb2.Summary(value=vals))
        w.add_event(ev)
        expected["loss"].append((step, f32(loss)))
        expected["kl"].append((step, kl))
        expected["tokens"].append((step, float(tokens)))
    w.close()
    src = tb.TensorBoardSource(tmp_path / "tf2")
    events = drain(src)
    assert points(events) == expected
    assert dict(src.unused_input.notes()) == {"my_plugin": 20, "text": 1}
    assert src.unused_input.total == 0


def test_openrlhf_shaped_log(tmp_path):
    """OpenRLHF's TensorboardLogger: SummaryWriter(<use_tensorboard>/<wandb_run_name>),
    `train/<key>` at the global step, samples as text, `eval/<key>` at eval steps."""
    from torch.utils.tensorboard import SummaryWriter

    rng = random.Random(17)
    w = SummaryWriter(str(tmp_path / "logs" / "qwen2.5-7b-ppo_1123T10:21"))
    expected: dict[str, list] = {}
    for step in range(1, 41):
        t = step / 40
        logs = {"policy_loss": noisy(rng, -0.02 * t, 0.01), "actor_lr": 5e-7 * min(1, step / 5),
                "kl": abs(noisy(rng, 0.004 * t, 0.001)), "reward": noisy(rng, 0.2 + 0.5 * t, 0.05),
                "return": noisy(rng, 0.18 + 0.5 * t, 0.05),
                "response_length": noisy(rng, 812 - 200 * t, 40),
                "total_length": noisy(rng, 1030 - 200 * t, 40),
                "critic_loss": abs(noisy(rng, 0.3 * (1 - t), 0.03)),
                "values": noisy(rng, 0.1 + 0.4 * t, 0.02), "critic_lr": 9e-6}
        for k, v in logs.items():
            w.add_scalar(f"train/{k}", v, step)
            expected.setdefault(canonical(f"train/{k}"), []).append((step, f32(v)))
        if step % 10 == 0:
            w.add_text("train/generated_samples",
                       f"Sample:\n2+{step}=\n\nReward: {logs['reward']:.4f}", step)
            acc = noisy(rng, 0.3 + 0.4 * t, 0.02)
            w.add_scalar("eval/math500_pass1", acc, step)
            expected.setdefault("eval/math500_pass1", []).append((step, f32(acc)))
    w.close()
    src = tb.TensorBoardSource(tmp_path / "logs")
    events = drain(src)
    got = points(events)
    assert got == expected
    assert {"policy_loss", "actor_lr", "kl", "reward", "response_length"} <= set(got)
    assert {e.run.run_id for e in events if isinstance(e, ScalarBatch)} == {
        "qwen2.5-7b-ppo_1123T10:21"}
    assert dict(src.unused_input.notes()) == {"text": 4} and not metas(events)


# -- a real TRL run --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trl_run(tmp_path_factory):
    pytest.importorskip("trl")
    from transformers import TrainerCallback
    from transformers import logging as hf_logging
    from transformers.integrations.integration_utils import rewrite_logs
    from trl import GRPOConfig, GRPOTrainer

    from carl_tui.training.tiny import grpo_dataset, reverse_reward, tiny_model, tiny_tokenizer

    hf_logging.set_verbosity_error()
    out = tmp_path_factory.mktemp("trl") / "out"
    seen: list[tuple[int, dict]] = []

    class Capture(TrainerCallback):  # runs after the TensorBoard callback, same logs
        def on_log(self, args, state, control, logs=None, **kwargs):
            seen.append((state.global_step, rewrite_logs(dict(logs))))

    model = tiny_model(seed=1)
    args = GRPOConfig(output_dir=str(out), per_device_train_batch_size=8, num_generations=4,
                      max_completion_length=6, learning_rate=1e-3, max_steps=3, logging_steps=1,
                      save_strategy="no", report_to=["tensorboard"], use_cpu=True,
                      disable_tqdm=True, seed=0)
    trainer = GRPOTrainer(model=model, args=args, processing_class=tiny_tokenizer(),
                          train_dataset=grpo_dataset(64), reward_funcs=[reverse_reward],
                          callbacks=[Capture()])
    trainer.train()
    return out, seen, model.config.vocab_size


@pytest.mark.slow
def test_trl_grpo_run_arrives_exactly(trl_run):
    out, seen, vocab = trl_run
    (info,) = tb.list_runs(out)
    assert info.name.startswith("runs/")  # transformers' default: <output_dir>/runs/<date_host>
    expected: dict[str, list] = {}
    for step, logs in seen:
        for tag, v in logs.items():
            if isinstance(v, (int, float)):
                expected.setdefault(canonical(tag), []).append((step, f32(v)))
    assert {"loss", "reward", "entropy", "rewards/reverse_reward/mean", "learning_rate",
            "grad_norm"} <= set(expected)
    src = tb.TensorBoardSource(out)
    events = drain(src)
    assert points(events, info.name) == expected
    (meta,) = metas(events, info.name)
    assert meta["vocab_size"] == vocab == 13  # from the model_config text
    assert meta["method"] == "grpo" and meta["config"]["num_generations"] == 4
    assert dict(src.unused_input.notes()) == {"text": 2} and src.unused_input.total == 0


# -- following -------------------------------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import json, math, os, sys, time
    from torch.utils.tensorboard import SummaryWriter

    plan = json.loads(open(sys.argv[1]).read())
    w = SummaryWriter(plan["dir"], max_queue=5, flush_secs=1)
    for i, (step, value) in enumerate(plan["points"]):
        w.add_scalar("train/loss", value, step)
        w.add_scalar("train/entropy", value * 3.1, step)
        if i % 7 == 0:
            w.flush()
            time.sleep(0.002)
        if i == plan["restart_at"]:  # the process restarts: a new event file, same run
            w.close()
            w = SummaryWriter(plan["dir"], max_queue=5, flush_secs=1)
        if i == plan["second_run_at"]:
            other = SummaryWriter(plan["dir"] + "-eval")
            other.add_scalar("eval/loss", value, step)
            other.close()
    w.close()
    """
)


def test_follow_a_writer_process(tmp_path):
    """Poll while another process writes (flushes land mid-record at times): every
    value arrives once, in order, across a restart's second file and a new run."""
    rng = random.Random(23)
    pts = [(s, noisy(rng, 2.5 * math.exp(-s / 200) + 0.2, 0.02)) for s in range(400)]
    plan = tmp_path / "plan.json"
    logdir = tmp_path / "logs"
    plan.write_text(json.dumps({"dir": str(logdir / "live"), "points": pts, "restart_at": 250,
                                "second_run_at": 120}))
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(plan)], stderr=subprocess.PIPE)
    src = tb.TensorBoardSource(logdir, max_bytes_per_poll=2048)
    events = []
    polls = 0
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                events.extend(src.poll())
                polls += 1
            except SourceError as exc:
                assert str(exc).startswith("waiting for")
            time.sleep(0.005)
    finally:
        if proc.poll() is None:
            proc.kill()
        _, err = proc.communicate()
    assert proc.returncode == 0, err.decode()
    events.extend(drain(src))
    got = points(events, "live")
    assert got["loss"] == [(s, f32(v)) for s, v in pts]
    assert got["entropy"] == [(s, f32(v * 3.1)) for s, v in pts]
    assert len(list((logdir / "live").glob("*tfevents*"))) == 2
    assert points(events, "live-eval") == {"eval/loss": [(120, f32(pts[120][1]))]}
    assert src.unused_input.total == 0 and polls > 3


def write_run(path: Path, pts: list[tuple[int, float]], tag: str = "train/loss") -> None:
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(path))
    for step, v in pts:
        w.add_scalar(tag, v, step)
    w.close()


def test_restart_writes_a_second_file_read_in_order(tmp_path):
    """A run resumed from a checkpoint at step 30 logs steps 30..40 again: both
    files are read, oldest first, and the repeated steps keep their arrival order."""
    rng = random.Random(2)
    first = [(s, noisy(rng, 1.0 - s / 100, 0.01)) for s in range(41)]
    second = [(s, noisy(rng, 0.9 - s / 100, 0.01)) for s in range(30, 61)]
    write_run(tmp_path / "run", first)
    src = tb.TensorBoardSource(tmp_path)
    before = points(drain(src))
    assert before == {"loss": [(s, f32(v)) for s, v in first]}
    time.sleep(1.05)  # the file name carries the second it was opened in
    write_run(tmp_path / "run", second)
    after = points(drain(src))
    assert after == {"loss": [(s, f32(v)) for s, v in second]}
    both = points(drain(tb.TensorBoardSource(tmp_path)))["loss"]
    assert both == [(s, f32(v)) for s, v in first + second]
    assert [p for p in both if p[0] == 35] == [(35, f32(first[35][1])), (35, f32(second[5][1]))]


def test_backlog_streams_in_bounded_polls(tmp_path):
    rng = random.Random(4)
    pts = [(s, noisy(rng, 0.5, 0.1)) for s in range(3000)]
    write_run(tmp_path / "big", pts)
    src = tb.TensorBoardSource(tmp_path, max_bytes_per_poll=8192)
    intervals, events = [], []
    while True:
        events.extend(src.poll())
        intervals.append(src.interval)
        if src.interval > 0:
            break
    assert len(intervals) > 10 and set(intervals[:-1]) == {0.0} and intervals[-1] == 1.0
    assert points(events) == {"loss": [(s, f32(v)) for s, v in pts]}
    assert max(len(e) for e in events if isinstance(e, ScalarBatch)) < 300


# -- damaged and odd input -------------------------------------------------------------------


def record_offsets(data: bytes) -> list[tuple[int, int]]:
    """(start, data length) of every record of an intact event file."""
    out, pos = [], 0
    while pos < len(data):
        (n,) = struct.unpack_from("<Q", data, pos)
        out.append((pos, n))
        pos += 12 + n + 4
    assert pos == len(data)
    return out


@pytest.fixture
def intact(tmp_path):
    """An intact file of 50 scalars (the file's own first record is its version)."""
    rng = random.Random(8)
    pts = [(s * 10, noisy(rng, 0.3 + s / 90, 0.01)) for s in range(50)]
    write_run(tmp_path / "w", pts)
    (path,) = (tmp_path / "w").glob("*tfevents*")
    data = path.read_bytes()
    recs = record_offsets(data)
    assert len(recs) == 51
    return pts, data, recs, tmp_path / "logs" / "run"


def test_half_written_record_is_waited_for(intact):
    pts, data, recs, run = intact
    run.mkdir(parents=True)
    out = run / "events.out.tfevents.1732350000.host.1.0"
    src = tb.TensorBoardSource(run.parent)
    got = []
    # cut inside a header, inside a record's data, and inside its last CRC
    cuts = [recs[20][0] + 5, recs[35][0] + 12 + 3, recs[44][0] + 12 + recs[44][1] + 2, len(data)]
    for cut in cuts:
        out.write_bytes(data[:cut])
        got.extend(drain(src))
        complete = sum(1 for s, n in recs[1:] if s + 12 + n + 4 <= cut)
        assert len(points(got).get("loss", [])) == complete
    assert points(got) == {"loss": [(s, f32(v)) for s, v in pts]}
    assert src.unused_input.total == 0


def test_corrupt_records_are_skipped_counted_and_reading_resyncs(intact):
    pts, data, recs, run = intact
    run.mkdir(parents=True)
    buf = bytearray(data)
    s, n = recs[11]
    buf[s + 12 + n - 2] ^= 0x40  # a bit flip in the value of point 10: data CRC fails
    s, _ = recs[31]
    buf[s + 1] ^= 0x01  # a bit flip in the length of point 30: its header fails
    (run / "events.out.tfevents.1732350000.host.1.0").write_bytes(bytes(buf))
    src = tb.TensorBoardSource(run.parent)
    got = points(drain(src))
    assert got == {"loss": [(s, f32(v)) for i, (s, v) in enumerate(pts) if i not in (10, 30)]}
    (reason,) = src.unused_input.reasons()
    assert (reason.reason, reason.count) == ("record CRC mismatch", 2)
    assert "run/events.out.tfevents" in reason.example
    assert not drain(src)  # nothing more, nothing counted twice
    assert src.unused_input.total == 2


def test_damaged_first_record_is_no_reason_to_give_up_the_file(intact):
    pts, data, _, run = intact
    run.mkdir(parents=True)
    buf = bytearray(data)
    buf[3] ^= 0x10  # the length of the file's first record (its version event)
    (run / "events.out.tfevents.1732350000.host.1.0").write_bytes(bytes(buf))
    src = tb.TensorBoardSource(run.parent)
    assert points(drain(src)) == {"loss": [(s, f32(v)) for s, v in pts]}
    assert [(r.reason, r.count) for r in src.unused_input.reasons()] == [("record CRC mismatch", 1)]


def test_garbage_between_records_resyncs(intact):
    pts, data, recs, run = intact
    run.mkdir(parents=True)
    s, _ = recs[26]
    rng = random.Random(1)
    junk = bytes(rng.randrange(256) for _ in range(333))
    (run / "events.out.tfevents.1732350000.host.1.0").write_bytes(data[:s] + junk + data[s:])
    src = tb.TensorBoardSource(run.parent)
    assert points(drain(src)) == {"loss": [(s, f32(v)) for s, v in pts]}
    assert [(r.reason, r.count) for r in src.unused_input.reasons()] == [("record CRC mismatch", 1)]


def test_damage_at_the_end_of_a_growing_file_is_counted_once(intact):
    pts, data, recs, run = intact
    run.mkdir(parents=True)
    path = run / "events.out.tfevents.1732350000.host.1.0"
    s, _ = recs[40]
    junk = b"\x17not a record, a stray write\x01" * 3
    path.write_bytes(data[:s] + junk)
    src = tb.TensorBoardSource(run.parent)
    first = points(drain(src))
    assert first == {"loss": [(s, f32(v)) for s, v in pts[:39]]}
    drain(src)
    with open(path, "ab") as f:
        f.write(data[s:])
    rest = points(drain(src))
    assert rest == {"loss": [(s, f32(v)) for s, v in pts[39:]]}
    assert [(r.reason, r.count) for r in src.unused_input.reasons()] == [("record CRC mismatch", 1)]


def test_unreadable_event_inside_a_good_record(tmp_path, intact):
    """A record whose CRCs check out but whose bytes are no Event message."""
    from tensorboard.summary.writer.record_writer import RecordWriter

    pts, data, recs, run = intact
    run.mkdir(parents=True)
    path = run / "events.out.tfevents.1732350000.host.1.0"
    with open(path, "wb") as f:
        f.write(data[: recs[5][0]])
        RecordWriter(f).write(b"\x2a\x7f\x0a\x03abc")  # a summary longer than the record
        f.write(data[recs[5][0]:])
    src = tb.TensorBoardSource(run.parent)
    assert points(drain(src)) == {"loss": [(s, f32(v)) for s, v in pts]}
    assert [(r.reason, r.count) for r in src.unused_input.reasons()] == [("record not readable", 1)]


def test_not_an_event_file(tmp_path, intact):
    _, data, _, run = intact
    (run.parent / "bad").mkdir(parents=True)
    (run.parent / "bad" / "events.out.tfevents.json").write_text('{"loss": 0.5}\n' * 20)
    (run.parent / "bad" / "notes.txt").write_text("not an event file either, and not named so")
    run.mkdir()
    (run / "events.out.tfevents.1732350000.host.1.0").write_bytes(data)
    src = tb.TensorBoardSource(run.parent)
    got = drain(src)
    assert len(points(got, "run")["loss"]) == 50 and not points(got, "bad")
    drain(src)
    (reason,) = src.unused_input.reasons()
    assert (reason.reason, reason.count, reason.example) == (
        "not an event file", 1, "bad/events.out.tfevents.json")


def test_empty_and_missing_logdirs(tmp_path):
    missing = tmp_path / "not-yet"
    src = tb.TensorBoardSource(missing)
    with pytest.raises(SourceError, match=r"^waiting for .*not-yet$"):
        src.poll()
    missing.mkdir()
    with pytest.raises(SourceError, match="waiting for event files in"):
        src.poll()
    (missing / "run").mkdir()
    (missing / "run" / "events.out.tfevents.1.host.2.0").write_bytes(b"")  # created, not written
    assert src.poll() == []
    write_run(missing / "run", [(3, 0.25)])
    assert points(drain(src)) == {"loss": [(3, 0.25)]}
    assert tb.list_runs(tmp_path / "nowhere") == []
    with pytest.raises(SourceError, match="waiting for run grpo in"):
        tb.TensorBoardSource(tmp_path / "not-yet", runs=["grpo"]).poll()
    (tmp_path / "file").write_text("x")
    with pytest.raises(SourceError, match="is not a directory") as info:
        tb.TensorBoardSource(tmp_path / "file").poll()
    assert info.value.retry is False


def test_truncated_file_is_read_again(intact):
    pts, data, recs, run = intact
    run.mkdir(parents=True)
    path = run / "events.out.tfevents.1732350000.host.1.0"
    path.write_bytes(data)
    src = tb.TensorBoardSource(run.parent)
    assert len(points(drain(src))["loss"]) == 50
    path.write_bytes(data[: recs[10][0]])
    again = drain(src)
    assert points(again) == {"loss": [(s, f32(v)) for s, v in pts[:9]]}
    assert any(isinstance(e, LogLines) and "rewritten" in e.lines[0] for e in again)


def test_deleted_files_and_runs_are_let_go(intact):
    pts, data, recs, run = intact
    run.mkdir(parents=True)
    path = run / "events.out.tfevents.1732350000.host.1.0"
    path.write_bytes(data[: recs[20][0]])  # the version record and 19 values
    src = tb.TensorBoardSource(run.parent)
    assert points(drain(src)) == {"loss": [(s, f32(v)) for s, v in pts[:19]]}
    path.unlink()
    (note,) = drain(src)  # said once, in the run's log and the status bar
    said = f"{run.name}/{path.name} was deleted while being read; what was read from it stays"
    assert isinstance(note, LogLines) and note.lines == (said,) and src.limitation == said
    assert drain(src) == []
    shutil.rmtree(run)
    with pytest.raises(SourceError, match="waiting for event files"):
        tb.TensorBoardSource(run.parent).poll()
    assert drain(src) == [] and src.unused_input.total == 0


def test_huge_trees_are_cut_and_said(tmp_path, monkeypatch):
    for name in ("a", "b", "c", "d", "e"):
        write_run(tmp_path / name, [(1, 0.5)])
    monkeypatch.setattr(tb, "MAX_DIRS", 3)  # the logdir itself and two runs
    src = tb.TensorBoardSource(tmp_path)
    got = drain(src)
    assert len({e.run.run_id for e in got if isinstance(e, ScalarBatch)}) == 2
    assert src.limitation == f"only the first 3 folders under {tmp_path} are watched"


def test_list_runs_most_recent_first(tmp_path):
    for name, mtime in (("a", 100.0), ("b/c", 300.0), ("d", 200.0)):
        write_run(tmp_path / name, [(1, 1.0)])
        for f in (tmp_path / name).glob("*tfevents*"):
            os.utime(f, (mtime, mtime))
    infos = tb.list_runs(tmp_path)
    assert [(r.name, r.mtime) for r in infos] == [("b/c", 300.0), ("d", 200.0), ("a", 100.0)]
    assert all(len(r.files) == 1 and r.files[0].parent == r.dir for r in infos)
    write_run(tmp_path, [(1, 1.0)])  # files in the logdir itself: named after its folder
    assert tmp_path.name in {r.name for r in tb.list_runs(tmp_path)}


# -- the reader's parts ----------------------------------------------------------------------


def test_crc32c_implementations_agree(monkeypatch):
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    assert tfe.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    rng = np.random.default_rng(0)
    sizes = [0, 1, 7, 8, 9, 63, 64, 100, 1023, 1024, 1025, 2047, 2048, 2049, 5000, 300_001]
    sizes += rng.integers(0, 300, 100).tolist()
    blobs = [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in sizes]
    buf = b"".join(blobs)
    starts = np.cumsum([0] + [len(b) for b in blobs[:-1]])
    lens = np.array([len(b) for b in blobs])
    table = [tfe._crc_python(b) for b in blobs]
    assert tfe.crc32c_many(buf, starts, lens).tolist() == table
    monkeypatch.setattr(tfe, "_C_CRC", None)  # the numpy fallback: lanes, long pieces in chunks
    assert tfe.crc32c_many(buf, starts, lens).tolist() == table
    assert [tfe.masked_crc32c(b) for b in blobs[:20]] == [masked_crc32c(b) for b in blobs[:20]]


def test_numpy_crc_fallback_reads_the_same(torch_logdir, monkeypatch):
    root, expected = torch_logdir
    monkeypatch.setattr(tfe, "_C_CRC", None)
    assert points(drain(tb.TensorBoardSource(root)), "run-a") == expected


_tags = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
_value = st.one_of(
    st.tuples(st.just("simple"), st.floats(width=32, allow_nan=False, allow_infinity=False)),
    st.tuples(st.just("float"), st.floats(width=32, allow_nan=False, allow_infinity=False)),
    st.tuples(st.just("double"), st.floats(allow_nan=False, allow_infinity=False)),
    st.tuples(st.just("int64"), st.integers(-(2**53), 2**53)),
    st.tuples(st.just("histo"), st.just(0.0)),
)


@settings(max_examples=150, deadline=None)
@given(wall=st.floats(allow_nan=False, allow_infinity=False),
       step=st.integers(-(2**63), 2**63 - 1),
       values=st.lists(st.tuples(_tags, _value), max_size=6))
def test_decoder_matches_protobuf(wall, step, values):
    """Events serialized by protobuf itself decode to the same wall time, step and values."""
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2
    from tensorboard.compat.proto import types_pb2 as dt

    summary = summary_pb2.Summary()
    want = []
    for tag, (kind, v) in values:
        val = summary.value.add(tag=tag)
        if kind == "simple":
            val.simple_value = v
            want.append(("scalar", tag, v))
        elif kind == "histo":
            val.histo.min, val.histo.max = -1.0, 1.0
            want.append(("histogram", tag, None))
        else:
            t = tensor_pb2.TensorProto()
            if kind == "float":
                t.dtype, t.float_val[:] = dt.DT_FLOAT, [v]
            elif kind == "double":
                t.dtype, t.double_val[:] = dt.DT_DOUBLE, [v]
            else:
                t.dtype, t.int64_val[:] = dt.DT_INT64, [v]
            val.tensor.CopyFrom(t)
            val.metadata.plugin_data.plugin_name = "scalars"
            want.append(("scalar", tag, float(v)))
    data = event_pb2.Event(wall_time=wall, step=step, summary=summary).SerializeToString()
    out = tfe.Items()
    tfe.EventDecoder().decode(data, 0, len(data), out)
    assert list(zip(out.kind, out.tag, out.value)) == want
    assert out.step == [step] * len(want)
    # protobuf leaves a 0.0 wall time out: the decoder says "unknown" (NaN), not 1970
    unset = struct.pack("<d", wall) == bytes(8)
    assert [math.isnan(w) if unset else w == wall for w in out.wall] == [True] * len(want)
