"""Completions from every place TRL puts them, checked against a real tiny GRPO run with
`log_completions=True` (tests/data/make_grpo_completions.py): its printed tables, its
parquet files, its Trackio tables, its W&B table files, and the CARL stream's sample."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import shutil

import pytest

pytest.importorskip("trl")
pq = pytest.importorskip("pyarrow.parquet")

from carl_tui.cli import main
from carl_tui.completions.files import ParquetReader, StdoutReader, StreamReader
from carl_tui.completions.log import CompletionLog
from carl_tui.completions.readers import readers_for
from carl_tui.completions.stdout import find_panels, parse_panel
from carl_tui.events import RunRef
from carl_tui.report import completions_export as completions_report
from carl_tui.sources.open import request
from tests.data.make_grpo_completions import MAX_STEPS, PROJECT

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def run(grpo_completions):
    return grpo_completions


def parquet_rows(run) -> list[dict]:
    """Every row TRL saved, as export prints them."""
    out = []
    for f in sorted((run / "out" / "completions").glob("*.parquet")):
        for r in pq.read_table(f).to_pylist():
            out.append({"step": r["step"], "prompt": r["prompt"], "completion": r["completion"],
                        "rewards": {"reverse_reward": r["reverse_reward"],
                                    "length_bonus": r["length_bonus"]},
                        "advantage": r["advantage"]})
    return out


def trackio_run_id(run) -> str:
    import sqlite3

    with contextlib.closing(sqlite3.connect(run / "trackio" / f"{PROJECT}.db")) as conn:
        return conn.execute("SELECT run_id FROM metrics LIMIT 1").fetchone()[0]


def export(*args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["export", *args, "--completions"])
    return code, out.getvalue(), err.getvalue()


def jsonl(text: str) -> list[dict]:
    return [json.loads(x) for x in text.splitlines()]


@pytest.mark.slow
def test_parquet_export_equals_what_trl_saved(run):
    want = parquet_rows(run)
    assert [r["step"] for r in want] == sorted(r["step"] for r in want)
    assert {r["step"] for r in want} == set(range(1, MAX_STEPS + 1))
    # TRL's parquet folder is found beside the stream (the run's output_dir, one level down)
    code, out, err = export(str(run / "stream.jsonl"))
    assert code == 0, err
    got = [{k: v for k, v in r.items() if k != "carl_score"} for r in jsonl(out)]
    assert got == want


@pytest.mark.slow
def test_parquet_export_as_csv(run):
    code, out, _ = export(str(run / "stream.jsonl"), "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    want = parquet_rows(run)
    assert list(rows[0]) == ["step", "prompt", "completion", "reverse_reward", "length_bonus",
                             "advantage"]
    assert len(rows) == len(want)
    for r, w in zip(rows, want):
        assert (int(r["step"]), r["prompt"], r["completion"]) == (
            w["step"], w["prompt"], w["completion"])
        assert float(r["reverse_reward"]) == w["rewards"]["reverse_reward"]
        assert float(r["advantage"]) == w["advantage"]


@pytest.mark.slow
def test_printed_tables_equal_parquet_to_printed_precision(run, tmp_path):
    log = tmp_path / "train.log"  # alone: no parquet folder beside it
    shutil.copy(run / "train.log", log)
    code, out, err = export(str(log))
    assert code == 0, err
    got = jsonl(out)
    want = parquet_rows(run)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert (g["step"], g["prompt"], g["completion"]) == (w["step"], w["prompt"],
                                                             w["completion"])
        for name, value in w["rewards"].items():
            assert g["rewards"][name] == pytest.approx(value, abs=0.005 + 1e-9)
            assert g["rewards"][name] == float(f"{value:.2f}")
        assert g["advantage"] == float(f"{w['advantage']:.2f}")


@pytest.mark.slow
def test_trackio_tables_equal_parquet(run):
    code, out, err = export("--trackio-dir", str(run / "trackio"), "--project", PROJECT)
    assert code == 0, err
    assert jsonl(out) == parquet_rows(run)
    readers = readers_for(request(trackio_dir=str(run / "trackio")),
                          RunRef("trackio", PROJECT, trackio_run_id(run)))
    assert [r.origin for r in readers] == ["trackio"]  # the config's output_dir is relative


@pytest.mark.slow
def test_wandb_tables_equal_parquet(run, tmp_path):
    wandb_dir = tmp_path / "wandb"
    shutil.copytree(run / "wandb", wandb_dir, symlinks=True)  # no parquet folder beside it
    code, out, err = export("--wandb", str(wandb_dir))
    assert code == 0, err
    assert jsonl(out) == parquet_rows(run)
    readers = readers_for(request(wandb=str(wandb_dir)), None)
    assert [r.origin for r in readers] == ["wandb"]


@pytest.mark.slow
def test_stream_sample_with_carl_scores(run):
    lines = [json.loads(x) for x in (run / "stream.jsonl").read_text().splitlines()]
    # one line per logged step: not again with the Trainer's closing summary
    assert [x["step"] for x in lines if x.get("event") == "completions"] == list(
        range(1, MAX_STEPS + 1))
    log = CompletionLog([StreamReader(run / "stream.jsonl")])
    log.poll()
    assert log.steps == list(range(1, MAX_STEPS + 1))
    want = {(r["step"], r["prompt"], r["completion"]): r for r in parquet_rows(run)}
    for step in log.steps:
        table = log.table(step)
        assert len(table.rows) == 4
        for r in table.rows:
            w = want[(step, r.prompt, r.completion)]
            assert dict(r.rewards) == w["rewards"]
            assert r.advantage == w["advantage"]
            assert 0.0 < r.carl < 1.0


@pytest.mark.slow
def test_bounded_memory_reads_old_steps_back(run):
    log = CompletionLog([ParquetReader(run / "out" / "completions")], keep=2)
    assert log.poll() == MAX_STEPS
    assert log.cached_steps() == []  # indexed by file name, read when looked at
    for step in log.steps:
        assert log.table(step).step == step
    assert log.loads == MAX_STEPS and log.cached_steps() == [3, 4]
    first = log.table(1)  # no longer in memory: read back from its file
    assert log.loads == MAX_STEPS + 1 and len(first.rows) == 4
    assert log.cached_steps() == [1, 4]
    assert log.table(1) is first and log.loads == MAX_STEPS + 1  # now in memory


@pytest.mark.slow
def test_a_panel_being_written_waits_for_its_end(run, tmp_path):
    data = (run / "train.log").read_bytes()
    panels, _ = find_panels(data)
    start, end, step = panels[0]
    cut = start + (end - start) // 2
    path = tmp_path / "growing.log"
    path.write_bytes(data[:cut])
    reader = StdoutReader(path)
    assert reader.scan() == []
    with open(path, "ab") as f:
        f.write(data[cut:end])
    found = reader.scan()
    assert [s for s, _, _ in found] == [step] and len(reader.load(found[0][1]).rows) == 4


def test_no_completions_is_one_line(tmp_path):
    stream = tmp_path / "s.jsonl"
    stream.write_text('{"step": 1, "loss": 1.0}\n{"event": "completions", "step": "x"}\n')
    code, out, err = export(str(stream))
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "no completions" in err and "log_completions" in err


def printed(prompts, completions, rewards, advantages, step, *, color=False, width=80) -> str:
    """What TRL's own printing function writes."""
    from rich.console import Console
    from trl.trainer import utils

    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=color, color_system="truecolor")
    orig = utils.Console
    utils.Console = lambda: console
    try:
        utils.print_prompt_completions_sample(prompts, completions, rewards, advantages, step)
    finally:
        utils.Console = orig
    return buf.getvalue()


def test_wrapped_cells_colours_and_bars():
    long_prompt = "Reverse the digits of 0123456789 and then explain what you did in words"
    text = printed([long_prompt, "p2"], ["9876543210 because reversing", "abc" * 20],
                   {"a_very_long_reward_function_name": [0.123, -1.5], "fmt": [1.0, float("nan")]},
                   [0.987, -0.25], 7, color=True)
    assert "\x1b[" in text
    text = "\r 25%|██▌   | 1/4 [00:00<00:00]" + text  # a bar redrawn in front of the title
    lines = text.split("\n")
    lines.insert(5, "/site-packages/x.py:1: FutureWarning: something")
    data = "\n".join(lines).encode()
    panels, consumed = find_panels(data)
    assert consumed == len(data) and len(panels) == 1
    table = parse_panel(data[panels[0][0]:panels[0][1]].decode())
    assert table.step == 7 and table.decimals == 2
    # what was printed: a header or a word wider than its column is cut with an ellipsis
    name = table.reward_names[0]
    assert table.reward_names[1] == "fmt" and name.endswith("…")
    assert "a_very_long_reward_function_name".startswith(name[:-1]) and len(name) > 8
    a, b = table.rows
    assert a.prompt == long_prompt  # wrapped over six lines
    assert a.completion == "9876543210 because reversing"
    assert b.completion.endswith("…") and ("abc" * 20).startswith(b.completion[:-1])
    assert dict(a.rewards) == {name: 0.12, "fmt": 1.0}
    assert dict(b.rewards) == {name: -1.5, "fmt": None}
    assert (a.advantage, b.advantage) == (0.99, -0.25)


def test_secrets_in_completions_are_masked(tmp_path):
    token = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz12"
    stream = tmp_path / "s.jsonl"
    row = {"prompt": f"use {token}", "completion": f"ok {token}", "rewards": {"r": 1.0},
           "advantage": 0.5}
    stream.write_text(json.dumps({"event": "completions", "step": 3, "rows": [row]}) + "\n")
    log = CompletionLog([StreamReader(stream)])
    log.poll()
    r = log.table(3).rows[0]
    assert token not in r.prompt and token not in r.completion and "[REDACTED]" in r.completion
    text = printed([f"use {token}"], [f"ok {token}"], {"r": [1.0]}, [0.5], 3, width=120)
    panels, _ = find_panels(text.encode())
    t = parse_panel(text)
    assert token in text and len(panels) == 1
    assert token not in t.rows[0].completion and "[REDACTED]" in t.rows[0].completion


@pytest.mark.slow
def test_trackio_server_tables_equal_parquet(run, tmp_path):
    """The same tables through a real Trackio server on 127.0.0.1 (`query_project`)."""
    from tests.fakes.trackio_server import TrackioServer

    data = tmp_path / "trackio"
    shutil.copytree(run / "trackio", data)
    with TrackioServer(data) as srv:
        code, out, err = export("--trackio", srv.url, "--project", PROJECT, "--timeout", "60")
    assert code == 0, err
    assert jsonl(out) == parquet_rows(run)


def test_export_closes_what_it_opened(run, monkeypatch):
    """export --completions closes the completions' log (its Trackio database) once the
    rows are written, not before: an older step may be read again while writing."""
    events = []
    real_close = CompletionLog.close
    real_write = completions_report.write_jsonl

    def close(self):
        events.append("close")
        real_close(self)

    def write(out, log):
        events.append("write")
        return real_write(out, log)

    monkeypatch.setattr(CompletionLog, "close", close)
    monkeypatch.setattr(completions_report, "write_jsonl", write)
    code, out, err = export("--trackio-dir", str(run / "trackio"), "--project", PROJECT)
    assert code == 0, err
    assert jsonl(out) == parquet_rows(run)
    assert events == ["write", "close"]


def test_completions_lines_are_not_skipped_input(tmp_path):
    from carl_tui.sources.jsonl import JsonlSource

    stream = tmp_path / "s.jsonl"
    line = {"event": "completions", "step": 1,
            "rows": [{"prompt": "p", "completion": "c", "rewards": {"r": 1.0}}]}
    stream.write_text(json.dumps({"step": 1, "loss": 1.0}) + "\n" + json.dumps(line) + "\n")
    src = JsonlSource(stream)
    src.poll()
    assert src.unused_input.total == 0
    assert dict(src.unused_input.notes()) == {"completions": 1}


@pytest.mark.slow
def test_export_to_a_file_says_where_from(run, tmp_path):
    out = tmp_path / "c.csv"
    code, printed_out, err = export(str(run / "stream.jsonl"), "--format", "csv", "-o", str(out))
    assert code == 0 and printed_out == ""
    n = 4 * MAX_STEPS
    assert err.strip() == (f"carl-tui: wrote {n} completions of {MAX_STEPS} steps "
                           f"(from parquet) to {out}")
    assert len(out.read_text().splitlines()) == n + 1
    code, _, err = export(str(run / "stream.jsonl"), "--metrics", "loss")
    assert code == 2 and "--metrics: not with --completions" in err


@pytest.mark.slow
def test_tables_far_apart_in_a_long_log_are_all_found(run, tmp_path, monkeypatch):
    from carl_tui.completions import files

    monkeypatch.setattr(files, "CHUNK", 4096)  # reads of 4 KiB: many between two tables
    data = (run / "train.log").read_bytes()
    panels, _ = find_panels(data)
    filler = b"".join(b"warning: line %d of noise\n" % i for i in range(2000))  # ~50 KB
    log = tmp_path / "train.log"
    log.write_bytes(filler + data[:panels[1][0]] + filler + data[panels[1][0]:])
    code, out, err = export(str(log))
    assert code == 0, err
    assert sorted({r["step"] for r in jsonl(out)}) == list(range(1, MAX_STEPS + 1))
    stream = tmp_path / "s.jsonl"
    lines = (run / "stream.jsonl").read_bytes()
    stream.write_bytes(b'{"step": 0, "loss": 1.0}\n' * 3000 + lines)
    reader = StreamReader(stream)
    assert [s for s, _, _ in reader.scan()] == list(range(1, MAX_STEPS + 1))


def test_a_conversation_reads_the_same_from_the_stream_as_from_parquet():
    """A conversational prompt (messages, content in typed blocks) in the CARL stream's
    sample reads as TRL's own table of it does: roles kept, block text, not a repr."""
    from carl_tui.completions.files import stream_table
    from carl_tui.completions.model import from_records
    from carl_tui.training.completion_sample import completions_line

    prompt = [{"role": "system", "content": "reverse it"},
              {"role": "user", "content": [{"type": "text", "text": "abc"}]}]
    completion = [{"role": "assistant", "content": "cba"}]
    logs = {"prompt": [prompt], "completion": [completion],
            "rewards": {"reverse_reward": [1.0]}, "advantages": [0.25]}
    line = json.loads(json.dumps(completions_line(logs, 7, 1)))
    got = stream_table(line).rows[0]
    want = from_records(7, [{"prompt": prompt, "completion": completion,
                             "reverse_reward": 1.0, "advantage": 0.25}], "parquet").rows[0]
    assert (got.prompt, got.completion) == ("SYSTEM: reverse it\nUSER: abc", "ASSISTANT: cba")
    assert (got.prompt, got.completion, got.rewards, got.advantage) == (
        want.prompt, want.completion, want.rewards, want.advantage)
