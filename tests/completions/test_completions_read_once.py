"""The stream is read once: the completions view takes its lines from the read that feeds
the metrics (the source's `LineMarks`), through the one `FileFollower`, whose own
counters say how much of the file it read."""

from __future__ import annotations

import json

import pytest

from carl_tui.completions.files import NOT_UTF8, StreamReader
from carl_tui.completions.log import CompletionLog
from carl_tui.completions.readers import reader_factory
from carl_tui.sources.jsonl import JsonlSource
from carl_tui.sources.open import request
from carl_tui.sources.tail import BOM, FileFollower


def completions(step: int, text: str) -> bytes:
    rows = [{"prompt": f"p{step}", "completion": text, "rewards": {"r": 1.0}}]
    return json.dumps({"event": "completions", "step": step, "rows": rows}).encode() + b"\n"


def metrics(step: int) -> bytes:
    return json.dumps({"step": step, "loss": 1.0 / (step + 1)}).encode() + b"\n"


def caught_up(src: JsonlSource) -> None:
    src.poll()
    while src.behind:
        src.poll()


def test_the_completions_view_reads_the_lines_the_metrics_source_read(tmp_path):
    stream = tmp_path / "s.jsonl"
    stream.write_bytes(metrics(1) + completions(1, "one") + metrics(2)
                       + b'{"event": "completions", "step": 2, "rows": [{"prompt": "\xff"}]}\n'
                       + completions(3, "three") + b"x" * 300 + b"\n")
    src = JsonlSource(stream, max_bytes_per_poll=1024)  # several reads, lines across them
    caught_up(src)
    assert src.follower.bytes_read == stream.stat().st_size

    readers = reader_factory(request(watch=str(stream), file_format="jsonl"),
                             lambda: [src])(src.run)
    assert [r.origin for r in readers] == ["stream"]
    log = CompletionLog(readers)
    assert log.poll() == 2
    assert log.steps == [1, 3] and log.skipped() == {NOT_UTF8: 1}
    assert [log.table(s).rows[0].completion for s in log.steps] == ["one", "three"]

    with open(stream, "ab") as f:
        f.write(metrics(3) + completions(4, "four"))
    caught_up(src)
    assert log.poll() == 1 and log.table(4).rows[0].completion == "four"
    # Read once, in order: no byte twice; each table looked at read back as one line.
    assert src.follower.bytes_read == stream.stat().st_size
    assert src.follower.ranges_read == 3


def test_a_reader_given_a_path_follows_it_with_the_one_follower(tmp_path):
    stream = tmp_path / "s.jsonl"
    reader = StreamReader(stream)
    assert reader.scan() == []  # not there yet: waited for, not an error
    stream.write_bytes(completions(5, "five") + completions(6, "six")[:20])
    assert [s for s, _, _ in reader.scan()] == [5]
    with open(stream, "ab") as f:
        f.write(completions(6, "six")[20:])
    found = reader.scan()
    assert [s for s, _, _ in found] == [6] and reader.load(found[0][1]).rows[0].completion == "six"


def test_each_run_of_lines_starts_where_its_first_line_is_in_the_file(tmp_path):
    """The offsets readers index lines by: past a byte order mark and a skipped line."""
    path = tmp_path / "f.txt"
    data = BOM + b"first\n" + b"y" * 5000 + b"\nsecond\nthird\n"
    path.write_bytes(data)
    follower = FileFollower(path, max_bytes_per_poll=1024, max_line_bytes=2048)
    runs, dropped = [], []
    while True:
        got = follower.read()
        runs += [(off, data.split(b"\n")) for off, data in got.runs]
        dropped += got.dropped
        if not got.backlog:
            break
    assert [lines for _, lines in runs] == [[b"first"], [b"second", b"third"]]
    assert [off for off, _ in runs] == [len(BOM), data.index(b"second")]
    assert dropped == [("line too long", b"y" * 80)]
    assert follower.read_range(0, runs[1][0], runs[1][0] + 6) == b"second"
    assert follower.read_range(1, runs[1][0], runs[1][0] + 6) is None  # not that file
    assert follower.bytes_read == len(data)


def test_after_a_rotation_the_view_reads_the_new_file_and_never_an_old_range_there(tmp_path):
    stream = tmp_path / "s.jsonl"
    stream.write_bytes(completions(1, "one") + metrics(1) + completions(3, "three"))
    src = JsonlSource(stream)
    caught_up(src)
    log = CompletionLog([StreamReader(src.completions_lines)])
    assert log.poll() == 2 and log.table(1).rows[0].completion == "one"
    stream.rename(tmp_path / "s.jsonl.1")  # logrotate's create mode
    stream.write_bytes(completions(2, "two, in the new file") + completions(1, "one again"))
    caught_up(src)
    assert src.generation == 1
    assert log.poll() == 2 and log.steps == [1, 2, 3]
    assert log.table(2).rows[0].completion == "two, in the new file"
    assert log.table(1).rows[0].completion == "one again"
    # step 3's line lies in the old file: its range is not read from the new one
    assert log.table(3) is None
    both = (tmp_path / "s.jsonl.1").stat().st_size + stream.stat().st_size
    assert src.follower.bytes_read == both  # each file read once


def test_a_trainer_logs_tables_are_read_from_the_read_of_its_metrics(tmp_path):
    pytest.importorskip("trl")
    from carl_tui.completions.files import StdoutReader
    from carl_tui.sources.trainer_file import TrainerLogSource
    from tests.completions.test_completions import printed  # a panel, as TRL prints it

    log_file = tmp_path / "train.log"
    panel = printed(["p7"], ["c7"], {"r": [1.0]}, [0.5], 7) + "\n"
    log_file.write_text("{'loss': 0.5, 'epoch': 0.1}\n" + panel[:len(panel) // 2])
    src = TrainerLogSource(log_file, max_bytes_per_poll=1024)
    readers = reader_factory(request(watch=str(log_file), file_format="trainer-log"),
                             lambda: [src])(src.run)
    assert [type(r) for r in readers] == [StdoutReader]
    log = CompletionLog(readers)
    src.poll()
    assert log.poll() == 0  # half a table: it waits for its end
    with open(log_file, "a") as f:
        f.write(panel[len(panel) // 2:] + "{'loss': 0.4, 'epoch': 0.2}\n")
    while src.poll() or src.behind:
        pass
    assert log.poll() == 1 and log.table(7).rows[0].completion == "c7"
    follower = src.completions_lines.follower  # the source's own
    assert follower.bytes_read == log_file.stat().st_size
    assert follower.ranges_read == 1
