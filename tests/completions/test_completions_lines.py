"""Completions lines at the edges, read by the real CLI: a line bigger than a read
(read whole, never blocking what follows), a lone surrogate (exported, not a
traceback), a line that is not UTF-8 (counted as skipped)."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)


def completions(step: int, rows: list[dict]) -> bytes:
    return json.dumps({"event": "completions", "step": step, "rows": rows}).encode() + b"\n"


def row(prompt: str, completion: str, reward: float = 1.0) -> dict:
    return {"prompt": prompt, "completion": completion, "rewards": {"r": reward}}


def export(path: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "carl_tui", "export", str(path),
                           "--completions", *extra], capture_output=True, timeout=240,
                          check=False)


def test_a_lone_surrogate_survives_export_in_jsonl_and_csv(tmp_path):
    stream = tmp_path / "s.jsonl"
    stream.write_bytes(b'{"step": 1, "loss": 0.5}\n'
                       + b'{"event": "completions", "step": 1, "rows": [{"prompt": "p", '
                         b'"completion": "a\\ud800b", "rewards": {"r": 1}}]}\n'
                       + completions(2, [row("p2", "later step")]))
    res = export(stream)
    assert res.returncode == 0 and b"Traceback" not in res.stderr, res.stderr
    rows = [json.loads(line) for line in res.stdout.decode("utf-8").splitlines()]
    assert [(r["step"], r["completion"]) for r in rows] == [(1, "a\ud800b"), (2, "later step")]
    res = export(stream, "--format", "csv")
    assert res.returncode == 0 and b"Traceback" not in res.stderr, res.stderr
    got = list(csv.DictReader(io.StringIO(res.stdout.decode("utf-8"))))
    assert [(r["step"], r["completion"]) for r in got] == [("1", "a\ufffdb"), ("2", "later step")]


def big_step(n: int) -> bytes:
    """One step of `n` completions (about 140 bytes each): 100,000 make 14 MB."""
    return completions(10, [row(f"prompt {i} " + "x" * 60, f"completion {i} " + "y" * 40,
                                i / n) for i in range(n)])


def test_a_completions_line_bigger_than_a_read_is_read_whole_and_what_follows_too(tmp_path):
    from carl_tui.completions import files

    line = big_step(100_000)
    assert len(line) > files.CHUNK  # 14 MB, where a read is 8 MiB
    stream = tmp_path / "s.jsonl"
    stream.write_bytes(b'{"step": 1, "loss": 0.5}\n' + completions(5, [row("p5", "c5")])
                       + line + completions(40, [row("p40", "step forty")]))
    res = export(stream)
    assert res.returncode == 0, res.stderr
    rows = [json.loads(x) for x in res.stdout.splitlines()]
    assert [r["step"] for r in rows] == [5] + [10] * 100_000 + [40]
    assert rows[-1]["completion"] == "step forty" and rows[100_000]["completion"].startswith(
        "completion 99999 ")
    assert b"skipped" not in res.stderr


def test_every_tail_reader_skips_and_counts_a_line_past_its_limit_and_reads_on(tmp_path,
                                                                                 monkeypatch):
    """Past MAX_LINE a line is skipped and counted (here both limits are made small to
    reach that branch); the stream's and the stdout's readers both go on to what follows;
    a line that is not UTF-8 is counted too."""
    from carl_tui.completions import files
    from carl_tui.completions.log import CompletionLog

    monkeypatch.setattr(files, "CHUNK", 1 << 10)
    monkeypatch.setattr(files, "MAX_LINE", 4 << 10)
    stream = tmp_path / "s.jsonl"
    stream.write_bytes(completions(1, [row("p1", "c1")])
                       + completions(2, [row("p2", "z" * 3000)])  # over CHUNK: read whole
                       + completions(3, [row("p3", "z" * 9000)])  # over MAX_LINE: skipped
                       + b'{"event": "completions", "step": 4, "rows": [{"prompt": "\xff"}]}\n'
                       + completions(5, [row("p5", "c5")]))
    log = CompletionLog([files.StreamReader(stream)])
    log.poll()
    assert log.steps == [1, 2, 5]
    assert log.table(2).rows[0].completion == "z" * 3000
    assert log.skipped() == {files.LINE_TOO_LONG: 1, files.NOT_UTF8: 1}
    assert log.skipped_text() == ("skipped 2 completions lines (1 line too long, "
                                  "1 not UTF-8)")

    pytest.importorskip("trl")
    from tests.completions.test_completions import printed  # a panel, as TRL prints it

    out = tmp_path / "train.log"
    out.write_text("x" * 9000 + "\n" + printed(["p7"], ["c7"], {"r": [1.0]}, [0.5], 7) + "\n")
    log = CompletionLog([files.StdoutReader(out)])
    log.poll()
    assert log.steps == [7] and log.skipped() == {files.LINE_TOO_LONG: 1}


def test_a_completions_line_that_is_not_utf8_is_counted_not_dropped_silently(tmp_path):
    stream = tmp_path / "s.jsonl"
    stream.write_bytes(b'{"step": 1, "loss": 0.5}\n' + completions(1, [row("p1", "c1")])
                       + b'{"event": "completions", "step": 2, "rows": [{"prompt": "\xff\xfe"}]}\n'
                       + completions(3, [row("p3", "c3")]))
    res = export(stream)
    assert res.returncode == 0, res.stderr
    assert [json.loads(x)["step"] for x in res.stdout.splitlines()] == [1, 3]
    assert "carl-tui: skipped 1 completions line (1 not UTF-8)" in res.stderr.decode()
