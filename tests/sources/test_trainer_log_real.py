"""Steps from the stdout of real tiny TRL runs (SFT, GRPO, evaluation, checkpoints, a
resumed run, gradient accumulation, buffered stdout, progress bars off, two trainings in
one log), each checked against the Trainer's own `global_step` at every log.

The runs are made once per session by tests/data/make_trainer_stdout.py (default tqdm
rate limit; stdout and stderr in one file, as a job's log holds them); a callback wrote
the true step of each printed dict to a side file.
"""

from __future__ import annotations

import math
import re
import time

import pytest

pytest.importorskip("trl")

import itertools

from carl_tui.events import LogLines, Progress, RunMeta, ScalarBatch
from carl_tui.sources.trainer_file import TrainerLogSource
from carl_tui.sources.trainer_log import (
    MetricsLine,
    TrainerLogParser,
    looks_like_trainer_log,
    parse_progress,
)
from tests.data.make_trainer_stdout import RUNS, true_steps

pytestmark = pytest.mark.timeout(240)

WITH_BARS = [name for name, spec in RUNS.items() if not spec.get("no_bars")]


def expected(log) -> list[tuple[int, bool]]:
    """(step the parser must give, is it the summary) for each printed dict, in order: the
    Trainer's global_step, plus, in a second training of the same log, the last step of
    the first (a training resumed from a checkpoint continues its global_step)."""
    out, offset, last = [], 0, 0
    resumed = RUNS[log.name.removesuffix(".log")].get("appended")
    for entry in true_steps(log):
        summary = "train_runtime" in entry["keys"]
        step = entry["step"] + offset
        if not summary and step < last and not resumed:  # the second training starts over
            offset, step = last, entry["step"] + last
        if not summary:
            last = step
        out.append((step, summary))
    return out


def parse(text: str, *, flush_each: bool = False, split=lambda t: t.split("\n")):
    parser = TrainerLogParser()
    items = []
    for line in split(text):
        items += parser.feed(line)
        if flush_each:
            items += parser.flush()
    items += parser.flush()
    return [it for it in items if isinstance(it, MetricsLine)], parser


def check_order(items):
    rows = [m for m in items if not m.summary]
    back = [i for i, (a, b) in enumerate(itertools.pairwise(rows), 1) if b.step < a.step]
    if back:  # a run killed and resumed from its checkpoint: each part in order
        check_order(rows[: back[0]])
        check_order(rows[back[0]:])
        return
    assert all(b.step >= a.step for a, b in itertools.pairwise(rows))
    by_kind: dict[bool, list[int]] = {}
    for m in rows:
        by_kind.setdefault(any(k.startswith("eval_") for k in m.values), []).append(m.step)
    for steps in by_kind.values():
        assert len(set(steps)) == len(steps), "two dicts of one kind share a step"


@pytest.mark.parametrize("name", WITH_BARS)
def test_every_dict_gets_the_trainers_global_step(trainer_logs, name):
    text = trainer_logs[name].read_bytes().decode("utf-8")
    want = expected(trainer_logs[name])
    items, parser = parse(text)
    assert [(m.step, m.summary) for m in items] == want
    assert all(m.step_known for m in items)
    assert parser.estimated == 0 and parser.mispredicted == 0
    check_order(items)
    assert len(want) >= 11  # enough logs for the check to mean something


def test_the_logs_have_the_stale_bars_of_real_runs(trainer_logs):
    """Before the fix a dict took the step of the last bar drawn before it: with the
    default rate limit that bar is behind for most dicts (the bug users saw)."""
    for name in ("sft_ls5", "grpo_ls1"):
        text = trainer_logs[name].read_bytes().decode("utf-8")
        last, before = None, []
        for line in text.split("\n"):
            for segment in line.split("\r"):
                bar = parse_progress(segment)
                if bar is not None and not bar.desc:
                    last = bar.step
                elif segment.startswith("{'loss'"):
                    before.append(last)
        truth = [s for s, summary in expected(trainer_logs[name]) if not summary]
        stale = sum(b != t for b, t in zip(before, truth))
        assert len(before) == len(truth) and stale >= len(truth) // 3, (name, stale)


@pytest.mark.parametrize("name", ["sft_no_bars", "sft_no_bars_eval"])
def test_progress_bars_off_steps_are_placed_by_the_end_line(trainer_logs, name):
    """disable_tqdm=True: the Trainer prints only the dicts. Each was given one step more
    than the one before (off by a factor of logging_steps); the end line (train_runtime x
    train_steps_per_second steps, the final epoch) and each dict's epoch place them within
    one logging interval, and every step still says it is an estimate."""
    text = trainer_logs[name].read_bytes().decode("utf-8")
    truth = expected(trainer_logs[name])
    items, _ = parse(text)
    assert [m.summary for m in items] == [summary for _, summary in truth]
    interval = RUNS[name]["logging_steps"]
    off = [abs(m.step - step) for m, (step, _) in zip(items, truth)]
    assert max(off) < interval, off
    assert not any(m.step_known for m in items if not m.summary)
    check_order(items)
    parser = TrainerLogParser(logging_steps=RUNS[name]["logging_steps"])
    hinted = [it for line in text.split("\n") for it in parser.feed(line)] + parser.flush()
    assert [m.step for m in hinted if not m.summary] == [s for s, summ in truth if not summ]


def _no_escapes(text: str) -> list[str]:
    return re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text).split("\n")


def _cr_as_newline(text: str) -> list[str]:
    return re.split(r"[\r\n]", text)


@pytest.mark.parametrize("split", [_no_escapes, _cr_as_newline,
                                   lambda t: [line.rstrip() for line in t.split("\n")]],
                         ids=["escapes-stripped", "cr-as-newline", "trailing-spaces-cut"])
def test_log_services_that_rewrite_lines(trainer_logs, split):
    """Logs passed through a service that strips terminal escapes, cuts trailing spaces,
    or turns carriage returns into line breaks: the same steps. (With carriage returns
    turned into line breaks, tqdm's clear-then-redraw can no longer be told from a clear
    and a later bar: the dicts of buffered stdout become flagged estimates.)"""
    for name in WITH_BARS:
        text = trainer_logs[name].read_bytes().decode("utf-8")
        items, _ = parse(text, split=split)
        want = expected(trainer_logs[name])
        assert [m.summary for m in items] == [summary for _, summary in want], name
        if split is _cr_as_newline and RUNS[name].get("buffered"):
            assert [m.step for m in items if m.step_known] == [], name
            check_order(items)
            continue
        assert [m.step for m in items] == [step for step, _ in want], name
        assert all(m.step_known for m in items), name


@pytest.mark.parametrize("name", WITH_BARS)
def test_flushing_after_every_line_never_claims_a_wrong_step(trainer_logs, name):
    """The worst case for a live caller: flushed whenever idle, here after every line.
    Steps may be estimated (flagged); a step given as known is the true one."""
    text = trainer_logs[name].read_bytes().decode("utf-8")
    want = expected(trainer_logs[name])
    items, parser = parse(text, flush_each=True)
    assert len(items) == len(want)
    wrong = [(m.step, w) for m, (w, summary) in zip(items, want)
             if m.step_known and not summary and m.step != w]
    assert wrong == [] and parser.mispredicted == 0
    check_order(items)
    estimated = sum(not m.step_known for m in items if not m.summary)
    if not RUNS[name].get("grad_accum"):  # (there epoch is not proportional to the step)
        assert estimated <= len(items) // 2 + 2, estimated  # most are still known


def test_real_logs_are_told_from_jsonl(trainer_logs):
    for path in trainer_logs.values():
        head = path.read_bytes()[:4096]
        assert looks_like_trainer_log(head), path.name


# -- the file source ------------------------------------------------------------------

def _steps(events):
    return [int(s) for e in events if isinstance(e, ScalarBatch) for s in e.steps]


def test_file_source_reads_a_finished_log(trainer_logs):
    path = trainer_logs["sft_save_eval"]
    source = TrainerLogSource(path, idle_flush_s=0.0)
    events = []
    for _ in range(3):
        events += source.poll()
    want = [s for s, summary in expected(path) if not summary]
    assert _steps(events) == want
    lines = [line for e in events if isinstance(e, LogLines) for line in e.lines]
    assert lines == path.read_bytes().decode("utf-8").split("\n")[: len(lines)]
    assert len(lines) == path.read_bytes().count(b"\n")
    progress = [e for e in events if isinstance(e, Progress)]
    assert progress[-1].step == 60 and progress[-1].total == 60
    metas = [e.meta for e in events if isinstance(e, RunMeta)]
    assert [m for m in metas if "steps_estimated" in m] == []
    summary = [m["train_summary"] for m in metas if "train_summary" in m]
    assert len(summary) == 1 and summary[0]["train_loss"] > 0
    evals = [float(v) for e in events if isinstance(e, ScalarBatch)
             for v in e.columns.get("eval/loss", []) if not math.isnan(v)]
    assert len(evals) == 3
    assert source.run.source == "trainer-log" and source.unused_input.total == 0
    assert not source.finished
    source.close()


@pytest.mark.parametrize("name", ["grpo_ls1", "grpo_ls1_buffered", "sft_resume"])
def test_file_source_follows_a_growing_log(trainer_logs, name, tmp_path):
    """The log is written in pieces of random size while the source polls: the same steps,
    every one known (nothing is idle long enough to be flushed before its bar)."""
    data = trainer_logs[name].read_bytes()
    target = tmp_path / "train.log"
    target.write_bytes(b"")
    source = TrainerLogSource(target, idle_flush_s=3600)
    events, pos, size = [], 0, 1
    while pos < len(data):
        size = size * 7 % 997 + 1
        with target.open("ab") as fh:
            fh.write(data[pos : pos + size])
        pos += size
        events += source.poll()
    source.idle_flush_s = 0.0
    events += source.poll()
    want = [s for s, summary in expected(trainer_logs[name]) if not summary]
    assert _steps(events) == want
    assert not any("steps_estimated" in e.meta for e in events if isinstance(e, RunMeta))
    source.close()


def test_file_source_idle_flush_marks_estimates(trainer_logs, tmp_path):
    """Polled while idle after every line: the last dict is released before its bar; where
    its step is only an estimate, the run's meta says so; known steps are the true ones."""
    data = trainer_logs["sft_ls7"].read_bytes()
    target = tmp_path / "nohup.out"
    target.write_bytes(b"")
    source = TrainerLogSource(target, idle_flush_s=0.0)
    events = []
    for line in data.split(b"\n"):
        with target.open("ab") as fh:
            fh.write(line + b"\n")
        events += source.poll()
        time.sleep(0)  # no idle time needed: idle_flush_s is 0
    events += source.poll()
    want = [s for s, summary in expected(trainer_logs["sft_ls7"]) if not summary]
    assert len(_steps(events)) == len(want)
    assert any(e.meta.get("steps_estimated") for e in events if isinstance(e, RunMeta))
    assert source.parser.mispredicted == 0
    source.close()


def test_file_source_waits_for_a_missing_file(tmp_path):
    from carl_tui.sources.base import SourceError

    source = TrainerLogSource(tmp_path / "later.out")
    with pytest.raises(SourceError, match="waiting for"):
        source.poll()


# -- the job source's conversion --------------------------------------------------------

def test_job_source_line_events(trainer_logs):
    """HfJobSource._line_events on a real log, without a Hub: exact steps, and the
    steps_estimated meta for a log whose steps could only be estimated."""
    pytest.importorskip("huggingface_hub")
    from carl_tui.sources.hf_jobs import HfJobSource

    for name, estimated in (("grpo_ls2", False), ("sft_no_bars", True)):
        src = HfJobSource("job", namespace="alice", api=object())
        lines = trainer_logs[name].read_bytes().decode("utf-8").split("\n")
        events = src._line_events(lines)
        src._logs_done = True
        events += src._line_events([])
        assert src.parser.pending == 0
        want = [s for s, summary in expected(trainer_logs[name]) if not summary]
        if not estimated:
            assert _steps(events) == want
        else:
            assert len(_steps(events)) == len(want)
        flagged = any(e.meta.get("steps_estimated") for e in events if isinstance(e, RunMeta))
        assert flagged == estimated, name


@pytest.mark.parametrize("name", ["sft_stop_resume", "sft_kill_resume"])
def test_a_run_resumed_into_the_same_log_keeps_its_global_step(trainer_logs, name):
    """A run stopped (or killed) after its checkpoint at 60 and resumed from it, both
    appending to one log: the resumed steps are 63..120, not the previous training's last
    step plus those (123..180, or 138 for the kill's 63). After a kill the steps logged
    after the checkpoint come again, as the Trainer logged them."""
    text = trainer_logs[name].read_bytes().decode("utf-8")
    items, parser = parse(text)
    rows = [m.step for m in items if not m.summary]
    stopped_at = 60 if name == "sft_stop_resume" else 75  # (the kill came at step 76)
    part_two = rows[rows.index(stopped_at) + 1:]
    assert part_two == list(range(63, 121, 3))
    assert [(m.step, m.summary) for m in items] == expected(trainer_logs[name])
    assert all(m.step_known for m in items) and parser.mispredicted == 0
