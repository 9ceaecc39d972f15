"""WandbSource against `.wandb` logs written by real `wandb.init(mode="offline")` runs.

One writer process per module writes an SFT run and then a TRL-shaped GRPO run
into one `wandb/` directory; the damaged-file tests work on copies of the GRPO
run's log. A second writer logs in phases, waiting for the test between them,
to follow a run that is still being written.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import random
import struct
import subprocess
import sys
import textwrap
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from carl_tui.events import LogLines, RunMeta, ScalarBatch
from carl_tui.metric_names import canonical, is_metric_key
from carl_tui.sources import wandb_log as wl
from carl_tui.sources import wandb_run as wr
from carl_tui.sources.base import SourceError
from carl_tui.sources.unused_input import UnusedInput


# The chunk-format tests and the no-wandb message need no wandb; the rest write real runs.
def _has_wandb() -> bool:
    try:
        return importlib.util.find_spec("wandb") is not None
    except (ImportError, ValueError):
        return False


needs_wandb = pytest.mark.skipif(not _has_wandb(), reason="needs wandb (the [wandb] extra)")

WRITER = textwrap.dedent(
    """
    import json, os, sys, time
    import wandb

    plan = json.loads(open(sys.argv[1]).read())

    def value(v):
        if isinstance(v, dict) and "__hist__" in v:
            return wandb.Histogram(v["__hist__"])
        if isinstance(v, dict) and "__table__" in v:
            return wandb.Table(columns=v["columns"], data=v["__table__"])
        return v

    for spec in plan["runs"]:
        settings = wandb.Settings(
            x_disable_stats=True, x_disable_machine_info=True, x_save_requirements=False,
            disable_git=True, save_code=False, console="off", silent=True,
            x_transaction_log_flush_interval=plan.get("flush", 15.0),
            x_history_value_encoding=plan.get("encoding", "json"),
        )
        run = wandb.init(mode="offline", dir=plan["dir"], project=spec["project"],
                         name=spec["name"], config=spec.get("config"), settings=settings)
        if spec.get("config_update"):
            run.config.update(spec["config_update"], allow_val_change=True)
        if spec.get("define"):
            run.define_metric("train/global_step")
            run.define_metric("*", step_metric="train/global_step", step_sync=True)
        for i, row in enumerate(spec["rows"]):
            run.log({k: value(v) for k, v in row.items()})
            if i in spec.get("pause_after", ()):
                go = os.path.join(plan["go_dir"], f"go-{i}")
                deadline = time.time() + 120
                while not os.path.exists(go):
                    if time.time() > deadline:
                        sys.exit(3)
                    time.sleep(0.01)
        for k, v in spec.get("summary", {}).items():
            run.summary[k] = v
        run.finish()
    """
)

# A chat template long enough that its config record spans three 32 KiB blocks.
CHAT_TEMPLATE = "".join(
    f"{{% for m in messages %}}<|im_start|>{{{{ m.role }}}} #{i}\\n{{{{ m.content }}}}<|im_end|>"
    for i in range(1100)
)


def _noisy(rng: random.Random, centre: float, spread: float) -> float:
    return centre + rng.gauss(0.0, spread)


def grpo_rows(n: int = 300, seed: int = 7) -> list[dict]:
    """Rows shaped like TRL's GRPOTrainer logging every 5 steps through W&B."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        t = i / n
        row = {
            "train/loss": _noisy(rng, 0.031 * (1 - t) + 0.004, 0.0027),
            "train/grad_norm": abs(_noisy(rng, 0.41, 0.093)),
            "train/learning_rate": 1e-6 * (1 - t) + 3.7e-9,
            "train/reward": _noisy(rng, 0.18 + 0.61 * t, 0.047),
            "train/reward_std": abs(_noisy(rng, 0.29, 0.031)),
            "train/entropy": abs(_noisy(rng, 1.93 - 1.1 * t, 0.081)),
            "train/kl": abs(_noisy(rng, 0.0009 + 0.013 * t, 0.0004)),
            "train/rewards/accuracy_reward/mean": _noisy(rng, 0.12 + 0.55 * t, 0.05),
            "train/rewards/format_reward/mean": _noisy(rng, 0.71 + 0.2 * t, 0.03),
            "train/completions/mean_length": _noisy(rng, 187.3 - 40 * t, 6.1),
            "train/epoch": round((i + 1) * 5 / 1200, 6),
            "train/global_step": (i + 1) * 5,
        }
        if i in (37, 111):
            row["train/grad_norm"] = math.nan  # fp16 overflow steps
        if i == 200:
            row["train/kl"] = math.inf
        if i == 250:
            row["train/loss"] = -math.inf
        if i == 3:
            row["train/phase"] = "warmup"
        if i == 4:
            row["train/is_best"] = True
        if i == 120:
            hist = [rng.gauss(180, 30) for _ in range(64)]
            row["train/completion_length_hist"] = {"__hist__": hist}
        rows.append(row)
    # An eval row without the step metric: W&B syncs it to the last global step.
    evals = {"eval/loss": 0.02731946, "eval/runtime": 3.1838, "eval/samples_per_second": 15.7}
    rows.insert(150, evals)
    table = {"columns": ["step", "prompt", "completion", "reward"],
             "__table__": [[755, "2+2=", "4", 1.0], [755, "3*7=", "21", 1.0]]}
    rows.insert(160, {"completions": table})
    return rows


def sft_rows(n: int = 40, seed: int = 3) -> list[dict]:
    """A custom SFT loop: no step metric declared, W&B's own `_step` is the x axis."""
    rng = random.Random(seed)
    return [
        {
            "train/loss": _noisy(rng, 2.7 * math.exp(-i / 12) + 0.31, 0.021),
            "train/mean_token_accuracy": _noisy(rng, 0.42 + 0.4 * (1 - math.exp(-i / 9)), 0.011),
            "train/entropy": _noisy(rng, 2.1 * math.exp(-i / 15) + 0.6, 0.017),
        }
        for i in range(n)
    ]


GRPO_CONFIG = {  # what transformers' W&B callback sends: model config, then the TrainingArguments
    "vocab_size": 151665,
    "_name_or_path": "Qwen/Qwen2.5-0.5B-Instruct",
    "architectures": ["Qwen2ForCausalLM"],
    "hidden_size": 896,
    "learning_rate": 1e-06,
    "num_generations": 8,
    "scale_rewards": "group",
    "beta": 0.04,
    "logging_steps": 5,
    "max_steps": 1500,
    "chat_template": CHAT_TEMPLATE,
}
SFT_CONFIG = {"method": "sft", "model_config": {"vocab_size": 32003, "_name_or_path": "tiny/llama"}}


def writer_env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(
        WANDB_MODE="offline",
        WANDB_SILENT="true",
        WANDB_DISABLE_GIT="true",
        WANDB_DISABLE_CODE="true",
        WANDB_CONSOLE="off",
        WANDB_DIR=str(root),
        WANDB_CONFIG_DIR=str(root / ".config"),
        WANDB_CACHE_DIR=str(root / ".cache"),
        WANDB_DATA_DIR=str(root / ".data"),
    )
    return env


def start_writer(root: Path, plan: dict) -> subprocess.Popen:
    plan = {"dir": str(root), **plan}
    plan_file = root / f"plan-{len(list(root.glob('plan-*')))}.json"
    plan_file.write_text(json.dumps(plan))
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(plan_file)],
        env=writer_env(root),
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def expected_points(rows: list[dict], *, step_metric: str | None) -> dict[str, list]:
    """{canonical name: [(step, value), ...]} that the rows should produce."""
    out: dict[str, list] = {}
    synced = None
    for i, row in enumerate(rows):
        if step_metric is not None and step_metric in row:
            synced = row[step_metric]
        step = synced if step_metric is not None and synced is not None else i
        for k, v in row.items():
            if k == step_metric or not is_metric_key(k):
                continue
            if type(v) in (int, float) and math.isfinite(v):
                out.setdefault(canonical(k), []).append((step, float(v)))
    return out


def points(events, run_id: str | None = None) -> dict[str, list]:
    """The same shape from the source's batches, in arrival order."""
    out: dict[str, list] = {}
    for e in events:
        if not isinstance(e, ScalarBatch) or (run_id and e.run.run_id != run_id):
            continue
        assert e.steps.dtype == np.int64
        for name, col in e.columns.items():
            assert col.dtype == np.float64 and len(col) == len(e)
            keep = ~np.isnan(col)
            out.setdefault(canonical(name), []).extend(
                zip(e.steps[keep].tolist(), col[keep].tolist(), strict=True)
            )
    return out


def drain(src, limit: int = 10_000) -> list:
    """Poll until nothing more comes and no backlog remains."""
    events = []
    for _ in range(limit):
        got = src.poll()
        events.extend(got)
        if not got and src.interval > 0:
            return events
    raise AssertionError("the source never caught up")


def metas(events, key: str, run_id: str | None = None) -> list:
    return [
        e.meta[key]
        for e in events
        if isinstance(e, RunMeta) and key in e.meta and (run_id is None or e.run.run_id == run_id)
    ]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A project folder with `wandb/` holding an SFT run and then a GRPO run."""
    root = tmp_path_factory.mktemp("wandb-project")
    plan = {
        "runs": [
            {"project": "rcl-pipeline", "name": "sft-warmup", "config": SFT_CONFIG,
             "rows": sft_rows()},
            {"project": "rcl-pipeline", "name": "grpo-qwen-math", "config_update": GRPO_CONFIG,
             "define": True, "rows": grpo_rows(), "summary": {"best_reward": 0.80913}},
        ]
    }
    proc = start_writer(root, plan)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err.decode()
    runs = wr.list_runs(root)
    by_name = {r.name: r for r in runs}
    assert set(by_name) == {"sft-warmup", "grpo-qwen-math"}
    return root, by_name["sft-warmup"], by_name["grpo-qwen-math"]


@needs_wandb
def test_trl_shaped_run_arrives_exactly(written):
    _, _, grpo = written
    src = wr.WandbSource(grpo.dir)
    events = drain(src)
    rows = grpo_rows()

    assert points(events) == expected_points(rows, step_metric="train/global_step")
    assert {e.run for e in events} == {events[0].run}
    run = events[0].run
    assert (run.source, run.project, run.name) == ("wandb", "rcl-pipeline", "grpo-qwen-math")
    assert run.run_id == grpo.run_id and grpo.dir.name.endswith(run.run_id)

    # The eval row sits at the step it was logged after (W&B's step_sync).
    assert points(events)["eval/loss"] == [(750, 0.02731946)]
    # Bookkeeping keys are not metrics; the step metric is the x axis.
    names = {n for e in events if isinstance(e, ScalarBatch) for n in e.columns}
    assert not names & {"_step", "_runtime", "_timestamp", "train/global_step", "global_step"}

    config = metas(events, "config")[-1]
    assert config["chat_template"] == CHAT_TEMPLATE  # a record longer than a block
    assert config["num_generations"] == 8 and "_wandb" not in config
    last = [e.meta for e in events if isinstance(e, RunMeta) and "config" in e.meta][-1]
    assert last["vocab_size"] == 151665
    assert last["model"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert last["method"] == "grpo"
    summary = metas(events, "summary")[-1]
    assert summary["best_reward"] == 0.80913
    assert summary["train/loss"] == rows[-1]["train/loss"]
    assert metas(events, "exit_code") == [0]

    assert {r.reason: r.count for r in src.unused_input.reasons()} == {
        wr.NOT_FINITE: 4,  # two NaN grad norms, +inf kl, -inf loss
        wr.NOT_NUMBER: 2,  # a string and a boolean
    }
    assert src.unused_input.notes() == (("histogram", 1), ("table-file", 1))
    assert src.finished and src.poll() == []


@needs_wandb
def test_matches_wandbs_own_reader(written, tmp_path):
    """Every history record as wandb's Go reader (`wandb leet inspect --json`) sees it."""
    _, _, grpo = written
    exe = Path(sys.executable).with_name("wandb")
    proc = subprocess.run(
        [str(exe), "leet", "inspect", "--json", str(grpo.log)],
        check=False, capture_output=True, text=True, timeout=120, env=writer_env(tmp_path),
    )
    if proc.returncode != 0 or '"history"' not in proc.stdout:
        pytest.skip(f"this wandb has no `leet inspect --json`: {proc.stderr[:200]}")
    reference: dict[str, list] = {}
    for line in proc.stdout.splitlines():
        rec = json.loads(line)
        if rec.get("type") != "history":
            continue
        items = rec["history"]["item"]
        media = tuple(k.removesuffix("_type") for k in items if k.endswith("._type"))
        for k, v in items.items():
            if k.startswith(media or "\0"):  # a table's or histogram's own fields
                continue
            if is_metric_key(k) and type(v) in (int, float) and math.isfinite(v):
                reference.setdefault(canonical(k), []).append((items["train/global_step"], v))
    ours = points(drain(wr.WandbSource(grpo.log)))
    assert ours == reference


@needs_wandb
def test_wandb_dir_with_two_runs(written):
    root, sft, grpo = written
    assert [r.run_id for r in wr.list_runs(root)] == [grpo.run_id, sft.run_id]
    assert [r.run_id for r in wr.list_runs(root / "wandb")] == [grpo.run_id, sft.run_id]
    assert wr.list_runs(grpo.dir)[0] == grpo

    src = wr.WandbSource(root)
    events = drain(src)
    batches = [e for e in events if isinstance(e, ScalarBatch)]
    assert batches[0].run.run_id == grpo.run_id  # the latest run first
    assert points(events, grpo.run_id) == expected_points(grpo_rows(),
                                                          step_metric="train/global_step")
    assert points(events, sft.run_id) == expected_points(sft_rows(), step_metric=None)
    sft_meta = [e.meta for e in events if isinstance(e, RunMeta) and e.run.run_id == sft.run_id]
    assert sft_meta[0]["vocab_size"] == 32003 and sft_meta[0]["method"] == "sft"
    assert sft_meta[0]["model"] == "tiny/llama"
    assert not src.finished  # a wandb/ directory is watched for the next stage's run
    assert src.poll() == []

    only = drain(wr.WandbSource(root / "wandb", runs=["sft-warmup"]))
    assert {e.run.run_id for e in only} == {sft.run_id}
    assert points(only) == expected_points(sft_rows(), step_metric=None)

    latest = wr.WandbSource(root / "wandb" / "latest-run")  # wandb's link to the newest run
    assert {e.run.run_id for e in drain(latest)} == {grpo.run_id} and latest.finished
    with pytest.raises(SourceError, match="not one of") as err:
        drain(wr.WandbSource(grpo.dir, runs=["sft-warmup"]))
    assert err.value.retry is False


def copy_log(run, tmp_path: Path) -> tuple[bytes, Path]:
    data = run.log.read_bytes()
    run_dir = tmp_path / run.dir.name
    run_dir.mkdir()
    return data, run_dir / run.log.name


@needs_wandb
def test_log_growing_in_pieces_delivers_every_point_once(written, tmp_path):
    """Half-written records at the end are waited for, across block boundaries."""
    _, _, grpo = written
    data, log = copy_log(grpo, tmp_path)
    assert len(data) > 5 * wl.BLOCK_LEN
    whole = drain(wr.WandbSource(grpo.dir))
    rng = random.Random(11)
    src = wr.WandbSource(log.parent)
    events: list = []
    pos = 0
    log.write_bytes(b"")
    while pos < len(data):
        step = rng.choice((1, 5, 6, 7, 8, 300, 2900, 9000))
        with open(log, "ab") as f:
            f.write(data[pos : pos + step])
        pos += step
        events.extend(src.poll())
        assert not src.finished or pos >= len(data)
    events.extend(drain(src))
    assert points(events) == points(whole)
    steps = np.concatenate([e.steps for e in events if isinstance(e, ScalarBatch)])
    assert len(steps) == len(np.unique(steps)) + 1  # the eval row shares step 750 with a train row
    assert src.unused_input.total == 4 + 2 and src.finished
    assert metas(events, "config")[-1] == metas(whole, "config")[-1]


@needs_wandb
def test_backlog_in_bounded_polls(written):
    _, _, grpo = written
    src = wr.WandbSource(grpo.dir, max_bytes_per_poll=20_000)
    first = src.poll()
    assert src.interval == 0 and not src.finished
    events = first + drain(src)
    assert src.interval == 1.0 and src.finished
    assert points(events) == expected_points(grpo_rows(), step_metric="train/global_step")


@needs_wandb
def test_corrupt_records_are_skipped_and_counted(written, tmp_path):
    _, _, grpo = written
    data, log = copy_log(grpo, tmp_path)
    rows = grpo_rows()
    k = 90  # a row in the middle: its value text is in its summary and its history record
    needle = json.dumps(rows[k]["train/reward"]).encode()
    hits = [i for i in range(len(data)) if data.startswith(needle, i)]
    assert len(hits) == 2
    damaged = bytearray(data)
    for at in hits:
        damaged[at + 3] ^= 0x01
    log.write_bytes(bytes(damaged))

    src = wr.WandbSource(log.parent)
    events = drain(src)
    expected = expected_points(rows[:k] + rows[k + 1 :], step_metric="train/global_step")
    assert points(events) == expected
    reasons = {r.reason: r.count for r in src.unused_input.reasons()}
    assert reasons[wl.CORRUPT] == 2
    corrupt = next(r for r in src.unused_input.reasons() if r.reason == wl.CORRUPT)
    assert "checksum" in corrupt.example
    assert src.finished  # the damage did not hide the exit record


@needs_wandb
def test_damaged_header_resumes_at_next_block(written, tmp_path):
    _, _, grpo = written
    data, log = copy_log(grpo, tmp_path)
    damaged = bytearray(data)
    damaged[3 * wl.BLOCK_LEN : 3 * wl.BLOCK_LEN + 7] = b"\x13\x37\xff\xff\x09\x00\x42"
    log.write_bytes(bytes(damaged))
    src = wr.WandbSource(log.parent)
    got = points(drain(src))["reward"]
    full = points(drain(wr.WandbSource(grpo.dir)))["reward"]
    # What is lost is one contiguous stretch of rows inside that block; the rest is exact.
    first_lost = next(i for i, p in enumerate(got) if p != full[i])
    lost = len(full) - len(got)
    assert 0 < lost < wl.BLOCK_LEN // 700
    assert got == full[:first_lost] + full[first_lost + lost :]
    assert {r.reason: r.count for r in src.unused_input.reasons()}[wl.CORRUPT] == 1
    assert src.finished


@needs_wandb
def test_truncated_log_waits_for_the_rest(written, tmp_path):
    _, _, grpo = written
    data, log = copy_log(grpo, tmp_path)
    cut = len(data) // 2 + 3
    log.write_bytes(data[:cut] + b"\0" * 4096)  # a crash can leave zeros at the end
    src = wr.WandbSource(log.parent)
    half = drain(src)
    assert 0 < len(points(half)["loss"]) < len(grpo_rows())
    assert src.unused_input.total <= 6
    assert wl.CORRUPT not in {r.reason for r in src.unused_input.reasons()}
    assert not src.finished
    log.write_bytes(data)  # the writer comes back and the file is whole (same inode)
    rest = drain(src)
    assert not any(isinstance(e, LogLines) for e in rest)
    assert points(half + rest) == expected_points(grpo_rows(), step_metric="train/global_step")
    assert src.finished


@needs_wandb
def test_not_a_wandb_log(tmp_path):
    run_dir = tmp_path / "run-20250101_000000-abc"
    run_dir.mkdir()
    (run_dir / "run-abc.wandb").write_bytes(b"SQLite format 3\0" + bytes(100))
    with pytest.raises(SourceError, match="not a W&B transaction log") as err:
        wr.WandbSource(run_dir).poll()
    assert err.value.retry is False


@needs_wandb
def test_waiting_for_runs(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(SourceError, match="waiting for") as err:
        wr.WandbSource(missing).poll()
    assert str(missing) in str(err.value) and err.value.retry
    empty = tmp_path / "project"
    (empty / "wandb").mkdir(parents=True)
    src = wr.WandbSource(empty)
    with pytest.raises(SourceError, match="waiting for a W&B run in") as err:
        src.poll()
    assert err.value.retry
    assert wr.list_runs(empty) == []


def test_without_wandb_installed(monkeypatch, tmp_path):
    for mod in ("wandb", "wandb.proto", "wandb.proto.wandb_internal_pb2"):
        monkeypatch.setitem(sys.modules, mod, None)
    with pytest.raises(SourceError) as err:
        wr.WandbSource(tmp_path).poll()
    assert str(err.value) == "reading W&B runs needs wandb: pip install 'carl-tui[wandb]'"
    assert err.value.retry is False


@needs_wandb
def test_follow_a_run_while_it_logs(tmp_path):
    rows = grpo_rows(60, seed=19)
    rows = [r for r in rows if "completions" not in r]
    pauses = [14, 33]
    go_dir = tmp_path / "go"
    go_dir.mkdir()
    # wandb writes each value twice here, as JSON text and typed; the typed one is read.
    plan = {"flush": 0.05, "encoding": "json,typed", "go_dir": str(go_dir), "runs": [
        {"project": "live", "name": "grpo-live", "config_update": GRPO_CONFIG, "define": True,
         "rows": rows, "pause_after": pauses},
    ]}
    proc = start_writer(tmp_path, plan)
    try:
        expected = expected_points(rows, step_metric="train/global_step")
        src = wr.WandbSource(tmp_path / "wandb", interval=0.02)
        seen: list = []
        bounds = [*pauses, len(rows) - 1]
        for phase, last in enumerate(bounds):
            want = expected_points(rows[: last + 1], step_metric="train/global_step")["loss"]
            got: list = []
            deadline = time.monotonic() + 120  # a guard against a hang, not a timing assertion
            while points(seen + got).get("loss", []) != want:
                assert proc.poll() in (None, 0), proc.stderr.read().decode()
                assert time.monotonic() < deadline, f"phase {phase}: {points(seen + got)}"
                try:
                    got.extend(src.poll())
                except SourceError as exc:  # the run directory may not exist yet
                    assert "waiting for" in str(exc)
                time.sleep(0.02)
            lo = bounds[phase - 1] + 1 if phase else 0
            before = expected_points(rows[:lo], step_metric="train/global_step").get("loss", [])
            # Only the rows logged since the last phase: nothing repeated, nothing early.
            assert points(got)["loss"] == want[len(before) :]
            seen.extend(got)
            if phase < len(pauses):
                (go_dir / f"go-{last}").touch()
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
        seen.extend(drain(src))
        assert points(seen) == expected
        assert metas(seen, "exit_code") == [0]
        assert not src.finished  # a wandb/ directory keeps watching
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- the chunk format against a reference writer (LevelDB's log writer, W&B's header) --------


def leveldb_log(records: list[bytes]) -> tuple[bytes, list[list[tuple[int, int]]]]:
    """The log LevelDB's writer makes of `records`, and where each record's data lies."""
    out = bytearray(wl.FILE_IDENT + struct.pack("<HB", wl.FILE_MAGIC, 0))
    spans: list[list[tuple[int, int]]] = []
    for rec in records:
        pieces, data, first = [], rec, True
        while True:
            left = wl.BLOCK_LEN - len(out) % wl.BLOCK_LEN
            if left < wl.HEADER_LEN:
                out += bytes(left)
                left = wl.BLOCK_LEN
            frag, data = data[: left - wl.HEADER_LEN], data[left - wl.HEADER_LEN :]
            last = not data
            kind = (wl.FULL if last else wl.FIRST) if first else (wl.LAST if last else wl.MIDDLE)
            out += struct.pack("<IHB", zlib.crc32(bytes([kind]) + frag), len(frag), kind)
            pieces.append((len(out), len(out) + len(frag)))
            out += frag
            first = False
            if last:
                break
        spans.append(pieces)
    return bytes(out), spans


def follow(data: bytes, cuts: list[int], unused_input) -> list[bytes]:
    """Records found by reading `data` as it grows to each of `cuts`, as a source does."""
    got, offset = [], wl.HEADER_LEN
    for size in [*sorted(cuts), len(data)]:
        scan = wl.scan_chunks(data[offset:size], offset, at_eof=True, unused_input=unused_input)
        got.extend(scan.records)
        offset = max(offset, scan.end)
    return got


def _record(size_seed: tuple[int, int]) -> bytes:
    size, seed = size_seed
    return random.Random(seed).randbytes(size)


# Records small and larger than a block (which then span two or three blocks).
record_lists = st.lists(
    st.tuples(
        st.one_of(st.integers(0, 300), st.integers(wl.BLOCK_LEN - 40, 80_000)), st.integers(0, 99)
    ).map(_record),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=record_lists, data=st.data())
def test_chunks_growing_anywhere_give_every_record_once(records, data):
    log, _ = leveldb_log(records)
    cuts = data.draw(st.lists(st.integers(wl.HEADER_LEN, len(log)), max_size=25))
    unused_input = UnusedInput()
    assert follow(log, cuts, unused_input) == records
    assert unused_input.total == 0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=record_lists, data=st.data())
def test_a_damaged_record_is_the_only_one_lost(records, data):
    log, spans = leveldb_log(records)
    victim = data.draw(st.integers(0, len(records) - 1))
    pieces = [(a, b) for a, b in spans[victim] if b > a]
    if not pieces or victim == len(records) - 1:
        return  # an empty record has no data to damage; a damaged last record is waited for
    a, b = data.draw(st.sampled_from(pieces))
    at = data.draw(st.integers(a, b - 1))
    damaged = bytearray(log)
    damaged[at] ^= 0x5A
    unused_input = UnusedInput()
    assert follow(bytes(damaged), [], unused_input) == records[:victim] + records[victim + 1 :]
    assert [(r.reason, r.count) for r in unused_input.reasons()] == [(wl.CORRUPT, 1)]


@pytest.mark.parametrize("room", range(9))
def test_block_tail_padding_and_empty_first_piece(room):
    """A block ending with `room` bytes after a record: < 7 is zero padding, 7 is a
    first piece with no data; read growing one byte at a time across the edge."""
    first = wl.BLOCK_LEN - 2 * wl.HEADER_LEN - room
    records = [_record((first, 1)), _record((50, 2)), _record((40_000, 3))]
    log, _ = leveldb_log(records)
    unused_input = UnusedInput()
    assert follow(log, list(range(wl.BLOCK_LEN - 12, wl.BLOCK_LEN + 70)), unused_input) == records
    assert unused_input.total == 0
