"""A file is told a JSONL stream or a Trainer log by the whole of its head, so one odd
line never flips a stream into a "Trainer log" (issue 23): the odd line is skipped and
counted, the rest read as a stream."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from carl_tui.events import ScalarBatch
from carl_tui.sources.auto_file import AutoFileSource
from carl_tui.sources.file_format import sniff_format
from carl_tui.sources.jsonl import JsonlSource
from carl_tui.sources.open import open_file

ODD = {
    "huge integer": '{"step": 99, "loss": ' + "9" * 4301 + "}",
    "lowercase nan": '{"step": 99, "loss": nan}',
    "control character": '{"step": 99, "note": "a\tb", "loss": 1.0}',
    "nan and U+2028": '{"step": 99, "note": "a\u2028b", "loss": nan}',
}


def _stream(odd: str, where: int) -> str:
    lines = [json.dumps({"step": i, "loss": 1.0 / i, "entropy": 2.0 - i / 10})
             for i in range(1, 12)]
    lines.insert(where, odd)
    return "\n".join(lines) + "\n"


def _read(src) -> tuple[list[int], int]:
    steps: list[int] = []
    for _ in range(100):
        steps += [int(s) for e in src.poll() if isinstance(e, ScalarBatch) for s in e.steps]
        if src.interval != 0:
            return steps, src.unused_input.total
    raise AssertionError("the source never caught up")


@pytest.mark.parametrize("where", [0, 5, 11])
@pytest.mark.parametrize("name", sorted(ODD))
def test_one_odd_line_keeps_a_stream_a_stream(tmp_path, name, where):
    path = tmp_path / "run.jsonl"
    path.write_text(_stream(ODD[name], where), encoding="utf-8")
    settled = open_file(path, settled=True)  # summary, export
    assert isinstance(settled, JsonlSource)
    assert _read(settled) == (list(range(1, 12)), 1)
    live = AutoFileSource(path)  # the dashboard
    assert _read(live) == (list(range(1, 12)), 1)
    assert isinstance(live.inner, JsonlSource)


def test_a_first_line_alone_that_fails_json_is_still_a_stream():
    assert sniff_format(b'{"step": 0, "loss": nan}\n') == "jsonl"
    assert sniff_format(b"{'loss': 0.5, 'epoch': 0.1}\n") == "trainer-log"


def test_a_trainer_log_with_a_json_line_stays_a_trainer_log():
    head = (b"Map: 100%|##########| 512/512 [00:00<00:00, 34716.91 examples/s]\n"
            b"{'loss': 0.5, 'epoch': 0.1}\n"
            b'{"model_type": "llama"}\n'
            b"{'loss': 0.4, 'epoch': 0.2}\n")
    assert sniff_format(head) == "trainer-log"


def test_summary_of_huge_values_prints_no_numpy_warning(tmp_path):
    path = tmp_path / "huge.jsonl"
    with path.open("w") as fh:
        for i in range(1, 12):
            fh.write(json.dumps({"step": i, "loss": 1.7e308 * (-1) ** i, "entropy": 1e308,
                                 "mean_token_accuracy": 1e308, "phi": -1.7e308}) + "\n")
    env = {**os.environ, "PYTHONWARNINGS": "default"}
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    for command in ("summary", "export"):
        done = subprocess.run(
            [sys.executable, "-m", "carl_tui", command, "--file-format", "jsonl", str(path)],
            capture_output=True, text=True, env=env, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        assert done.stderr == "", done.stderr
        assert "1.7" in done.stdout
