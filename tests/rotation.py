"""Following a file at its edges, measured: a real writer (carl-tui's StreamWriter, in a
process of its own) writes N steps while the real logrotate rotates the file, and the
dashboard's own polling (SourceRunner over the source `--watch` opens) reads it. The
result is how many of the N steps never reached the reader.

Scenarios (`run_scenario(name, ...)`):

- "copytruncate": the file is missing when the dashboard starts; after `rotate_at`
  steps logrotate copies it to NAME.1 and truncates it; the writer goes on appending.
- "create": the same with logrotate's create mode: NAME is moved to NAME.1 and a new
  NAME created; the writer reopens NAME and writes the rest there.
- "directory": once the reader has read the first `rotate_at` steps, the file is
  removed and a directory made at the path; once the reader has seen the directory, it
  is removed and the writer writes the rest to a new file at the path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from carl_tui.events import ScalarBatch, SourceStatus
from carl_tui.sources.base import SourceRunner
from carl_tui.sources.open import open_file

LOGROTATE = shutil.which("logrotate") or (
    "/usr/sbin/logrotate" if os.access("/usr/sbin/logrotate", os.X_OK) else None)

WRITER = r'''
import os, subprocess, sys, time
from carl_tui.training.stream import StreamWriter

mode, path, n, rotate_at, conf, state, logrotate, pause_at = sys.argv[1:9]
n, rotate_at, pause_at = int(n), int(rotate_at), int(pause_at)
w = StreamWriter(path)
for i in range(n):
    if i == pause_at:
        print("written", flush=True)
        sys.stdin.readline()  # the reader has read them
    if i == rotate_at:
        if mode in ("copytruncate", "create"):
            subprocess.run([logrotate, "-s", state, "-f", conf], check=True)
            if mode == "create":
                w.close()
                w = StreamWriter(path)  # a writer that reopens its log after a rotation
        elif mode == "directory":
            w.close()
            os.unlink(path)
            os.mkdir(path)
            print("directory", flush=True)
            sys.stdin.readline()  # the reader has seen it
            os.rmdir(path)
            w = StreamWriter(path)
    w.write({"step": i, "loss": 1.0 / (i + 1)})
    time.sleep(0.001)
w.close()
print("done", flush=True)
'''


CONF = """{path} {{
    rotate 3
    {mode}
    missingok
    nocompress
}}
"""


class Reader:
    """The dashboard's polling of `--watch PATH`: one SourceRunner in its thread."""

    def __init__(self, path: Path):
        self.steps: set[int] = set()
        self.statuses: list[SourceStatus] = []
        self.changed = threading.Condition()
        self.runner = SourceRunner(open_file(path), self._emit)

    def _emit(self, events) -> None:
        with self.changed:
            for ev in events:
                if isinstance(ev, ScalarBatch):
                    self.steps.update(int(s) for s in ev.steps)
                elif isinstance(ev, SourceStatus):
                    self.statuses.append(ev)
            self.changed.notify_all()

    def wait_for(self, test, timeout: float) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: test(self), timeout)


def start_writer(name: str, tmp: Path, *, n: int = 1000, rotate_at: int = 400,
                 pause_at: int = -1) -> subprocess.Popen:
    """The writer process (see WRITER), with logrotate's config for `name` in `tmp`."""
    path = tmp / "train.jsonl"
    conf = tmp / "logrotate.conf"
    conf.write_text(CONF.format(path=path, mode=name if name != "directory" else "create"))
    script = tmp / "writer.py"
    script.write_text(WRITER)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.Popen(
        [sys.executable, str(script), name, str(path), str(n), str(rotate_at),
         str(conf), str(tmp / "logrotate.state"), LOGROTATE or "logrotate", str(pause_at)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)


def expect(proc: subprocess.Popen, said: str) -> None:
    """Wait for the writer to say `said` (it then waits for `go`)."""
    assert proc.stdout.readline().strip() == said


def go(proc: subprocess.Popen) -> None:
    proc.stdin.write("go\n")
    proc.stdin.flush()


def finish(proc: subprocess.Popen) -> None:
    try:
        assert proc.stdout.readline().strip() == "done"
    finally:
        proc.wait(30)
        proc.stdin.close()
        proc.stdout.close()


def run_scenario(name: str, tmp: Path, *, n: int = 1000, rotate_at: int = 400,
                 looks: int = 3, settle_s: float = 20.0) -> tuple[int, Reader]:
    """Steps lost of `n` (and the reader, for its statuses). The writer starts once the
    reader has looked `looks` times for the missing file; the reader then has
    `settle_s` seconds after the writer is done."""
    reader = Reader(tmp / "train.jsonl")
    reader.runner.start()
    try:
        # The dashboard started before the file exists and has looked for it.
        reader.wait_for(lambda r: sum(s.state == "retrying" for s in r.statuses) >= looks, 30)
        pause_at = rotate_at if name == "directory" else -1
        proc = start_writer(name, tmp, n=n, rotate_at=rotate_at, pause_at=pause_at)
        try:
            if name == "directory":
                expect(proc, "written")
                assert reader.wait_for(lambda r: len(r.steps) >= rotate_at, 60)
                go(proc)
                expect(proc, "directory")
                reader.wait_for(lambda r: any("directory" in s.message
                                              for s in r.statuses[-1:]), 40)
                go(proc)
        finally:
            finish(proc)
        reader.wait_for(lambda r: len(r.steps) >= n, settle_s)
    finally:
        reader.runner.stop()
    return n - len(reader.steps & set(range(n))), reader


def main() -> None:  # pragma: no cover - the figures for a report
    import tempfile

    for name in sys.argv[1:] or ["copytruncate", "create", "directory"]:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.monotonic()
            lost, _ = run_scenario(name, Path(tmp))
            print(f"{name}: lost {lost} of 1000 ({time.monotonic() - t0:.1f} s)", flush=True)


if __name__ == "__main__":  # pragma: no cover
    main()
