"""FileFollower against real writer processes: appends, fast rewrites, rotation,
FIFOs, deletion, and paths that are not files. Every line is accounted for."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections import defaultdict

import pytest

from carl_tui.events import LogLines, ScalarBatch
from carl_tui.sources.base import Source, SourceError, SourceRunner
from carl_tui.sources.jsonl import JsonlSource
from carl_tui.sources.replay import ReplaySource
from carl_tui.sources.tail import FileFollower

HANG_GUARD_S = 60  # only against a hang: no assertion depends on speed

WRITER = r'''
import json, math, os, random, sys, time

mode, path, n, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
extra = [int(a) for a in sys.argv[5:]]
rnd = random.Random(seed)
t0 = 1_732_350_000.0 + seed


def line(gen, i):
    loss = 2.4 * math.exp(-i / 180) + 0.05 + rnd.gauss(0, 0.02)
    ent = 3.1 * math.exp(-i / 250) + 0.2 + rnd.gauss(0, 0.03)
    obj = {"gen": gen, "step": i, "time": round(t0 + gen * 1000 + 0.37 * i, 3),
           "loss": loss, "entropy": ent, "learning_rate": 5e-5 * (1 - i / (n + 1))}
    return (json.dumps(obj) + "\n").encode()


def put(fd, data):
    # Two writes per line: a reader sometimes sees half a line.
    cut = rnd.randrange(1, len(data))
    os.write(fd, data[:cut])
    if rnd.random() < 0.05:
        time.sleep(0.0005)
    os.write(fd, data[cut:])


def pace(i):
    if i % 50 == 0:
        time.sleep(0.002)


APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT

if mode == "append":
    fd = os.open(path, APPEND)
    for i in range(n):
        put(fd, line(0, i))
        pace(i)

elif mode == "rewrite":  # extra: generations; truncate and rewrite fast, again and again
    for gen in range(extra[0]):
        # One fast burst, longer than the last: the size never shrinks between two reads.
        data = b"".join(line(gen, i) for i in range(n + 30 * gen))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.write(fd, data)
        os.close(fd)
        time.sleep(rnd.uniform(0, 0.02))

elif mode == "handshake":  # gen 0, wait for "go", then truncate and rewrite at once
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.write(fd, b"".join(line(0, i) for i in range(n)))
    print("ready", flush=True)
    sys.stdin.readline()
    keep = extra[0] if extra else 0  # restarts from a checkpoint: first lines identical
    data = b"".join(line(0, i) if i < keep else line(1, i) for i in range(n + 7))
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, data)
    print("done", flush=True)

elif mode == "copytruncate":  # the file is truncated under a writer that does not append
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.write(fd, b"".join(line(0, i) for i in range(n)))
    print("ready", flush=True)
    sys.stdin.readline()
    os.write(fd, b"".join(line(1, i) for i in range(n)))  # at its own offset: a hole
    print("done", flush=True)

elif mode == "rotate":  # extra: late lines, written to the old file after the rename
    late = extra[0]
    fd = os.open(path, APPEND)
    for i in range(n - late):
        put(fd, line(0, i))
        pace(i)
    os.rename(path, path + ".1")
    for i in range(n - late, n):
        put(fd, line(0, i))
        time.sleep(0.001)
    os.close(fd)
    fd = os.open(path, APPEND)
    for i in range(n):
        put(fd, line(1, i))
        pace(i)

elif mode == "delete":  # extra: lines written after the file was deleted
    fd = os.open(path, APPEND)
    for i in range(n):
        put(fd, line(0, i))
        pace(i)
    os.unlink(path)
    for i in range(n, n + extra[0]):
        put(fd, line(0, i))
        pace(i)

elif mode == "fifo":
    fd = os.open(path, os.O_WRONLY)
    for i in range(n):
        put(fd, line(0, i))
        pace(i)
    os.close(fd)
'''


@pytest.fixture
def writer(tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    procs = []

    def start(mode, path, n, seed=0, *extra, stdin=None):
        args = [sys.executable, str(script), mode, str(path), str(n), str(seed), *map(str, extra)]
        proc = subprocess.Popen(args, stdin=stdin, stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stdout:
            proc.stdout.close()
        if proc.stdin:
            proc.stdin.close()


def follow(f: FileFollower, proc: subprocess.Popen, *, idle_reads: int = 3):
    """Read until the writer has exited and the follower has nothing more.
    Returns (reads, errors)."""
    reads, errors = [], []
    quiet = 0
    deadline = time.monotonic() + HANG_GUARD_S
    while quiet < idle_reads:
        assert time.monotonic() < deadline, "hang guard: the follower never caught up"
        exited = proc.poll() is not None
        try:
            r = f.read()
        except SourceError as exc:
            errors.append(str(exc))
            r = None
        if r is not None:
            reads.append(r)
        busy = r is not None and (r.lines or r.backlog or r.notes)
        quiet = quiet + 1 if exited and not busy else 0
        if not (r is not None and r.backlog):
            time.sleep(0.001)
    return reads, errors


def by_generation(reads):
    """{follower generation: [(writer gen, step), ...]} in reading order."""
    out = defaultdict(list)
    for r in reads:
        for line in r.lines:
            obj = json.loads(line)
            out[r.generation].append((obj["gen"], obj["step"]))
    return dict(out)


def test_real_writer_appending_every_line_once(tmp_path, writer):
    path = tmp_path / "run.jsonl"
    f = FileFollower(path, max_bytes_per_poll=4096)  # small pieces: many backlog reads
    proc = writer("append", path, 3000, 1)
    reads, errors = follow(f, proc)
    assert proc.wait() == 0
    assert by_generation(reads) == {0: [(0, i) for i in range(3000)]}
    assert all("waiting for" in e for e in errors)  # only before the writer created it
    assert f.offset == path.stat().st_size and f.restarts == 0
    assert not any(r.notes or r.dropped for r in reads)
    assert any(r.backlog for r in reads)


def test_truncated_and_rewritten_past_the_offset_between_two_reads(tmp_path, writer):
    path = tmp_path / "run.jsonl"
    proc = writer("handshake", path, 300, 2, stdin=subprocess.PIPE)
    assert proc.stdout.readline() == "ready\n"
    f = FileFollower(path)
    first = f.read()
    assert len(first.lines) == 300 and not first.backlog
    proc.stdin.write("go\n")
    proc.stdin.flush()
    assert proc.stdout.readline() == "done\n"
    assert os.path.getsize(path) > f.offset  # the size alone cannot tell
    second = f.read()
    assert second.notes == [
        "run.jsonl was truncated and written again; reading it again from the start"
    ]
    assert second.generation == f.generation == f.restarts == 1
    assert by_generation([first, second]) == {
        0: [(0, i) for i in range(300)], 1: [(1, i) for i in range(307)]
    }
    assert f.read().lines == []


def test_rewrite_from_a_checkpoint_with_the_same_first_lines(tmp_path, writer):
    """The first 1.5 kB of the new content are byte-identical: the tail
    fingerprint (the bytes just before the offset) tells the rewrite."""
    path = tmp_path / "run.jsonl"
    proc = writer("handshake", path, 300, 3, 40, stdin=subprocess.PIPE)
    assert proc.stdout.readline() == "ready\n"
    f = FileFollower(path)
    first = f.read()
    proc.stdin.write("go\n")
    proc.stdin.flush()
    assert proc.stdout.readline() == "done\n"
    with open(path, "rb") as fh:
        assert fh.read(1024) == path.read_bytes()[:1024]
    second = f.read()
    assert f.restarts == 1 and "written again" in second.notes[0]
    gens = by_generation([first, second])
    assert gens[1] == [(0, i) for i in range(40)] + [(1, i) for i in range(40, 307)]


def test_copytruncate_rotation_leaves_a_hole_that_costs_nothing(tmp_path, writer):
    path = tmp_path / "run.jsonl"
    proc = writer("copytruncate", path, 300, 10, stdin=subprocess.PIPE)
    assert proc.stdout.readline() == "ready\n"
    f = FileFollower(path, max_bytes_per_poll=4096, max_line_bytes=8192)
    reads = [f.read() for _ in range(200)]
    size = path.stat().st_size
    assert size > 8192 and f.offset == size
    os.truncate(path, 0)  # logrotate's copytruncate
    proc.stdin.write("go\n")
    proc.stdin.flush()
    assert proc.stdout.readline() == "done\n"
    assert path.read_bytes()[:size] == b"\0" * size  # the writer left a hole
    reads += [f.read() for _ in range(200)]
    assert by_generation(reads) == {
        0: [(0, i) for i in range(300)], 1: [(1, i) for i in range(300)]
    }
    assert [n for r in reads for n in r.notes] == [
        "run.jsonl was truncated and written again; reading it again from the start"
    ]
    assert not any(r.dropped for r in reads)
    assert f.offset == path.stat().st_size


def test_plain_truncation_and_the_unfinished_line(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_bytes(b'{"step": 0}\n{"step": 1}\n{"step": 2, "lo')
    f = FileFollower(path)
    assert f.read().lines == [b'{"step": 0}', b'{"step": 1}']
    path.write_bytes(b'{"step": 0}\n')
    r = f.read()
    assert r.lines == [b'{"step": 0}'] and r.generation == 1
    assert r.notes == ["run.jsonl was truncated; reading it again from the start"]
    assert r.dropped == [("unfinished line", b'{"step": 2, "lo')]


@pytest.mark.parametrize("seed", [4, 5])
def test_writer_rewriting_fast_again_and_again(tmp_path, writer, seed):
    """Whatever the interleaving: no follower generation mixes two writer
    generations, each is read from its start without gaps or repeats, and the
    last one is read whole."""
    path = tmp_path / "run.jsonl"
    f = FileFollower(path, max_bytes_per_poll=16384)
    proc = writer("rewrite", path, 400, seed, 12)
    reads, _ = follow(f, proc)
    assert proc.wait() == 0
    gens = by_generation(reads)
    assert gens, "nothing read"
    writer_gens = []
    for g, items in gens.items():
        wgens = {w for w, _ in items}
        assert len(wgens) == 1, f"follower generation {g} mixes writer generations {wgens}"
        assert [s for _, s in items] == list(range(len(items)))
        writer_gens.append(wgens.pop())
    assert writer_gens == sorted(set(writer_gens))  # each writer generation once, in order
    last = max(gens)
    assert gens[last] == [(11, i) for i in range(400 + 30 * 11)]
    assert f.restarts == f.generation == last


def test_rename_and_recreate_with_late_lines_to_the_old_file(tmp_path, writer):
    path = tmp_path / "run.jsonl"
    f = FileFollower(path, max_bytes_per_poll=8192)
    proc = writer("rotate", path, 200, 6, 10)
    reads, errors = follow(f, proc)
    assert proc.wait() == 0
    assert by_generation(reads) == {
        0: [(0, i) for i in range(200)],  # the 10 late lines included
        1: [(1, i) for i in range(200)],
    }
    notes = [n for r in reads for n in r.notes]
    assert notes == ["run.jsonl was replaced by a new file; reading the new file from the start"]
    assert f.restarts == 1
    assert all("waiting for" in e for e in errors)


def test_deleted_file_still_being_written(tmp_path, writer):
    path = tmp_path / "run.jsonl"
    f = FileFollower(path)
    proc = writer("delete", path, 150, 7, 50)
    reads, errors = follow(f, proc)
    assert proc.wait() == 0
    assert by_generation(reads) == {0: [(0, i) for i in range(200)]}
    assert errors[-1] == f"waiting for {path} (it was deleted)"
    path.write_bytes(b'{"gen": 1, "step": 0}\n')  # it comes back
    r = f.read()
    assert r.generation == 1 and r.lines == [b'{"gen": 1, "step": 0}']
    assert "replaced" in r.notes[0]


def test_fifo_with_a_writer_process(tmp_path, writer):
    path = tmp_path / "pipe"
    os.mkfifo(path)
    f = FileFollower(path)
    first = f.read()  # opens it without waiting for a writer
    assert first.lines == [] and not first.backlog
    proc = writer("fifo", path, 2000, 8)
    reads, errors = follow(f, proc)
    assert proc.wait() == 0 and errors == []
    assert by_generation(reads) == {0: [(0, i) for i in range(2000)]}
    f.close()


def test_fifo_without_a_writer_never_blocks_the_runner(tmp_path):
    """`carl-tui --watch FIFO`: the poller thread stops when asked."""
    path = tmp_path / "pipe"
    os.mkfifo(path)
    emitted = []
    runner = SourceRunner(JsonlSource(path, interval=0.05), emitted.extend).start()
    deadline = time.monotonic() + HANG_GUARD_S
    while not any(getattr(e, "state", "") == "live" for e in emitted):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    runner.stop(timeout=HANG_GUARD_S)
    assert not runner._thread.is_alive()
    assert [e.state for e in emitted][:2] == ["connecting", "live"]


class ClosedUnderPoll(Source):
    """A source whose poll is in flight when it is closed, and then fails, as an HTTP
    client closed under a request does."""

    name = "closed-under-poll"
    interval = 0.01

    def __init__(self) -> None:
        self.polling = threading.Event()
        self.closed = threading.Event()
        self.polls = 0

    def poll(self):
        self.polls += 1
        if self.polls == 1:
            return []
        self.polling.set()
        self.closed.wait(HANG_GUARD_S)
        raise RuntimeError("Cannot send a request, as the client has been closed.")

    def close(self) -> None:
        self.closed.set()


def test_a_poll_cut_short_by_stop_is_not_reported_as_a_fault():
    emitted = []
    src = ClosedUnderPoll()
    runner = SourceRunner(src, emitted.extend).start()
    assert src.polling.wait(HANG_GUARD_S)
    runner.stop(timeout=HANG_GUARD_S)
    assert not runner._thread.is_alive()
    assert [e.state for e in emitted] == ["connecting", "live"]
    assert runner.last_state == "live"


def test_fifo_through_the_jsonl_source(tmp_path):
    path = tmp_path / "pipe"
    os.mkfifo(path)
    src = JsonlSource(path)
    assert src.poll() == []
    fd = os.open(path, os.O_WRONLY)
    os.write(fd, b'{"step": 3, "loss": 0.71}\n{"step": 4, "lo')
    (batch,) = src.poll()
    assert batch.steps.tolist() == [3]
    os.write(fd, b'ss": 0.69}\n')
    os.close(fd)
    (batch,) = src.poll()
    assert batch.steps.tolist() == [4] and batch.columns["loss"].tolist() == [0.69]
    assert src.poll() == [] and src.skipped == 0


def test_directory_is_refused_without_retry(tmp_path):
    for make in (FileFollower, JsonlSource, ReplaySource):
        obj = make(tmp_path)
        poll = obj.read if isinstance(obj, FileFollower) else obj.poll
        with pytest.raises(SourceError) as info:
            poll()
        assert info.value.retry is False
        assert str(info.value) == f"{tmp_path} is a directory, not a file; give the path of a file"


def test_devices_sockets_and_replayed_fifos_are_refused(tmp_path):
    with pytest.raises(SourceError, match="is a character device, not a file or a pipe") as info:
        FileFollower("/dev/null").read()
    assert info.value.retry is False
    sock_path = tmp_path / "s.sock"
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(sock_path))
        with pytest.raises(SourceError, match="is a socket") as info:
            JsonlSource(sock_path).poll()
        assert info.value.retry is False
    finally:
        sock.close()
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(SourceError, match="follow it with --watch") as info:
        ReplaySource(fifo).poll()  # must not block in open()
    assert info.value.retry is False


def test_missing_file_waits_with_retry(tmp_path):
    with pytest.raises(SourceError, match="waiting for") as info:
        FileFollower(tmp_path / "later.jsonl").read()
    assert info.value.retry is True


def test_over_long_line_is_skipped_without_holding_it(tmp_path):
    path = tmp_path / "run.jsonl"
    big = b'{"step": 1, "note": "' + b"x" * 50_000 + b'"}'
    path.write_bytes(b'{"step": 0}\n' + big[:20_000])
    f = FileFollower(path, max_bytes_per_poll=4096, max_line_bytes=8192)
    lines, dropped, notes = [], [], []
    for _ in range(20):
        r = f.read()
        lines += r.lines
        dropped += r.dropped
        notes += r.notes
        assert len(f._buf) <= 8192
    with open(path, "ab") as fh:
        fh.write(big[20_000:] + b'\n{"step": 2}\n')
    for _ in range(20):
        r = f.read()
        lines += r.lines
        dropped += r.dropped
    assert lines == [b'{"step": 0}', b'{"step": 2}']
    assert dropped == [("line too long", big[:80])]
    assert notes == ["a line of more than 0.0078125 MB in run.jsonl was skipped"]
    assert f.offset == path.stat().st_size


def test_bom_at_the_start_of_the_file_is_removed(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"step": 0}\r\n{"step": 1}\r\n')
    assert FileFollower(path).read().lines == [b'{"step": 0}\r', b'{"step": 1}\r']


def test_close_then_read_continues_or_restarts(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"a\nb\n")
    f = FileFollower(path)
    assert f.read().lines == [b"a", b"b"]
    f.close()
    with open(path, "ab") as fh:
        fh.write(b"c\n")
    assert f.read().lines == [b"c"]  # the same file: where it stopped
    f.close()
    tmp = tmp_path / "new"
    tmp.write_bytes(b"x\n")
    os.replace(tmp, path)
    r = f.read()
    assert r.lines == [b"x"] and r.generation == 1 and "replaced" in r.notes[0]


def test_close_from_another_thread_while_reading(tmp_path):
    """SourceRunner.stop closes the source from the UI thread while the
    poller may be reading: close waits for the read, nothing breaks."""
    path = tmp_path / "run.jsonl"
    path.write_bytes(b"".join(b'{"step": %d}\n' % i for i in range(200_000)))
    f = FileFollower(path, max_bytes_per_poll=1 << 16)
    stop = threading.Event()
    errors = []

    def reader():
        while not stop.is_set():
            try:
                f.read()
            except Exception as exc:  # noqa: BLE001
                errors.append(exc)

    t = threading.Thread(target=reader)
    t.start()
    for _ in range(50):
        f.close()
    stop.set()
    t.join()
    assert errors == []
    assert f.generation == 0


def test_jsonl_source_restarts_show_in_events_and_status(tmp_path, writer):
    """Through the source: steps of each generation exactly once, a LogLines
    note per restart, `restarts` and `limitation` for the status bar."""
    path = tmp_path / "run.jsonl"
    proc = writer("rotate", path, 120, 9, 10)
    src = JsonlSource(path, max_bytes_per_poll=4096)
    events = []
    deadline = time.monotonic() + HANG_GUARD_S
    quiet = 0
    while quiet < 3:
        assert time.monotonic() < deadline
        exited = proc.poll() is not None
        try:
            got = src.poll()
        except SourceError:
            got = []
        events += got
        quiet = quiet + 1 if exited and not got and src.interval else 0
        time.sleep(0.001)
    steps = [int(s) for e in events if isinstance(e, ScalarBatch) for s in e.steps]
    assert steps == list(range(120)) * 2
    notes = [e for e in events if isinstance(e, LogLines)]
    assert len(notes) == 1 and "replaced" in notes[0].lines[0]
    first_new = next(i for i, e in enumerate(events) if e is notes[0])
    before = [int(s) for e in events[:first_new] if isinstance(e, ScalarBatch) for s in e.steps]
    assert before == list(range(120))  # the old copy (with its late lines) before the note
    assert src.restarts == 1 and "started over once" in src.limitation
    assert src.skipped == 0
