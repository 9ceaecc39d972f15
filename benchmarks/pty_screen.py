"""Run a terminal program in a real pseudo-terminal and watch its screen.

`Session(argv, env, size=(160, 45))` forks the program under a pty of that
size (TIOCSWINSZ before it starts), reads everything it writes and keeps a
screen: a small VT emulator that understands what full-screen apps write
(cursor moves, erases, SGR, alternate screen, OSC and private modes, UTF-8 text,
wide characters). `wait_until(predicate, timeout)` returns the time from the
fork at which the screen first satisfied the predicate, checked after every
read. Times are process-start times: imports, argument parsing, the first
query, everything the user waits for.

Also: the process's memory (`rss_mb`, `peak_mb` from /proc) and CPU time
(`cpu_s`), and `wait_exit()` for programs that print and end.
"""

from __future__ import annotations

import codecs
import fcntl
import os
import re
import select
import signal
import struct
import termios
import time
import unicodedata
from collections.abc import Callable, Mapping, Sequence

_TOKEN = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC
    r"|\x1bP[^\x1b]*\x1b\\"  # DCS
    r"|\x1b[()*+][0-~]"  # charset
    r"|\x1b[0-~]"  # other two-character escapes
    r"|[\r\n\b\t]"
    r"|[^\x1b\r\n\b\t\x00-\x08\x0b-\x1f\x7f]+"  # text
    r"|[\x00-\x08\x0b-\x1f\x7f]"  # other controls: ignored
)
_INCOMPLETE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*|\x1b?|P[^\x1b]*|[()*+])?$")


# Characters that may not be one cell wide (wide East Asian, emoji, combining marks).
_ODD_WIDTH = re.compile(
    "[\u0300-\u036f\u1100-\u115f\u2e80-\ua4cf\uac00-\ud7a3\uf900-\ufaff"
    "\ufe30-\ufe4f\uff00-\uff60\uffe0-\uffe6\U0001f300-\U0001faff]"
)


def _width(ch: str) -> int:
    if unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in "WF" else 1


class Screen:
    """The visible text of a terminal of `cols` x `rows` (no attributes kept)."""

    def __init__(self, cols: int, rows: int):
        self.cols, self.rows = cols, rows
        self.grid = [[" "] * cols for _ in range(rows)]
        self.x = self.y = 0
        self._pending = ""
        self._main: list[list[str]] | None = None  # saved main screen while in the alternate
        self.changed = 0

    def feed(self, text: str) -> None:
        text = self._pending + text
        m = _INCOMPLETE.search(text)
        if m and m.start() < len(text):
            self._pending, text = text[m.start():], text[: m.start()]
        else:
            self._pending = ""
        for tok in _TOKEN.findall(text):
            self._token(tok)
        self.changed += 1

    def _token(self, tok: str) -> None:
        c = tok[0]
        if c == "\x1b":
            if tok.startswith("\x1b["):
                self._csi(tok[2:-1], tok[-1])
            return
        if c == "\r":
            self.x = 0
        elif c == "\n":
            self.y = min(self.y + 1, self.rows - 1)
        elif c == "\b":
            self.x = max(0, self.x - 1)
        elif c == "\t":
            self.x = min(self.cols - 1, (self.x // 8 + 1) * 8)
        elif c >= " ":
            self._text(tok)

    def _text(self, text: str) -> None:
        row = self.grid[self.y]
        if not _ODD_WIDTH.search(text):  # one cell per character: the usual case
            n = max(0, min(len(text), self.cols - self.x))
            row[self.x : self.x + n] = text[:n]
            self.x += n
            return
        for ch in text:
            w = _width(ch)
            if w == 0:
                continue
            if self.x + w > self.cols:
                continue  # auto-wrap is off in full-screen apps (DECAWM reset)
            row[self.x] = ch
            if w == 2 and self.x + 1 < self.cols:
                row[self.x + 1] = ""
            self.x += w

    def _csi(self, params: str, final: str) -> None:
        private = params[:1] in "?<=>" if params else False
        nums = [int(p) if p.isdigit() else 0 for p in params.lstrip("?<=>").split(";")] \
            if params else []

        def n(i: int, default: int = 1) -> int:
            return nums[i] if i < len(nums) and nums[i] else default

        if private:
            if final in "hl" and nums and nums[0] in (1049, 47, 1047):
                self._alternate(final == "h")
            return
        if final in "Hf":
            self.y = min(self.rows, n(0)) - 1
            self.x = min(self.cols, n(1)) - 1
        elif final == "A":
            self.y = max(0, self.y - n(0))
        elif final == "B":
            self.y = min(self.rows - 1, self.y + n(0))
        elif final == "C":
            self.x = min(self.cols - 1, self.x + n(0))
        elif final == "D":
            self.x = max(0, self.x - n(0))
        elif final == "G":
            self.x = min(self.cols, n(0)) - 1
        elif final == "d":
            self.y = min(self.rows, n(0)) - 1
        elif final == "J":
            mode = nums[0] if nums else 0
            if mode == 2 or mode == 3:
                self.grid = [[" "] * self.cols for _ in range(self.rows)]
            elif mode == 0:
                self._erase_line(0)
                for r in range(self.y + 1, self.rows):
                    self.grid[r] = [" "] * self.cols
            elif mode == 1:
                self._erase_line(1)
                for r in range(self.y):
                    self.grid[r] = [" "] * self.cols
        elif final == "K":
            self._erase_line(nums[0] if nums else 0)
        elif final == "X":
            row = self.grid[self.y]
            for i in range(self.x, min(self.cols, self.x + n(0))):
                row[i] = " "

    def _erase_line(self, mode: int) -> None:
        row = self.grid[self.y]
        lo, hi = {0: (self.x, self.cols), 1: (0, self.x + 1), 2: (0, self.cols)}.get(
            mode, (0, 0))
        for i in range(lo, min(hi, self.cols)):
            row[i] = " "

    def _alternate(self, on: bool) -> None:
        if on and self._main is None:
            self._main = self.grid
            self.grid = [[" "] * self.cols for _ in range(self.rows)]
        elif not on and self._main is not None:
            self.grid, self._main = self._main, None

    def line(self, y: int) -> str:
        return "".join(self.grid[y])

    def text(self) -> str:
        return "\n".join(self.line(y) for y in range(self.rows))


class Session:
    """A program running in a pty of `size` (cols, rows); see the module doc."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], *,
                 size: tuple[int, int] = (160, 45), cwd: str | None = None):
        cols, rows = size
        self.screen = Screen(cols, rows)
        self.output = bytearray()
        self.exit_time: float | None = None
        self.returncode: int | None = None
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.t0 = time.perf_counter()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            try:
                os.close(master)
                os.setsid()
                fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
                for fd in (0, 1, 2):
                    os.dup2(slave, fd)
                if slave > 2:
                    os.close(slave)
                if cwd:
                    os.chdir(cwd)
                os.execvpe(argv[0], list(argv), dict(env))
            finally:
                os._exit(127)
        os.close(slave)
        os.set_blocking(master, False)
        self.pid, self.fd = pid, master
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    # -- reading ---------------------------------------------------------------------

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def _read(self, timeout: float) -> bool:
        """Read what is there (waiting up to `timeout`); False at the end of output."""
        if self.fd < 0:
            return False
        r, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
        if not r:
            self._reap()
            return True
        # Everything there is, as fast as a terminal takes it (a writer blocked on a
        # full pty would be timed waiting for us), then one update of the screen.
        chunks = []
        ended = False
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
            except OSError:
                data = b""
            if not data:
                ended = True
                break
            chunks.append(data)
        if chunks:
            data = b"".join(chunks)
            self.output += data
            self.screen.feed(self._decoder.decode(data))
        if ended:
            os.close(self.fd)
            self.fd = -1
            self._reap(block=True)
            return False
        return True

    def wait_until(self, predicate: Callable[[Screen], bool], timeout: float) -> float | None:
        """Seconds from the start to the first screen that satisfies `predicate`;
        None if it never did within `timeout` seconds from now."""
        deadline = time.perf_counter() + timeout
        while True:
            if predicate(self.screen):
                return self.elapsed()
            left = deadline - time.perf_counter()
            if left <= 0 or not self._read(min(left, 0.05)):
                return self.elapsed() if predicate(self.screen) else None

    def drain(self, seconds: float) -> None:
        """Keep reading (the program must never block on a full pty) for `seconds`."""
        end = time.perf_counter() + seconds
        while time.perf_counter() < end and self._read(end - time.perf_counter()):
            pass

    def wait_exit(self, timeout: float) -> float | None:
        """Seconds from the start to the end of the process (its output read)."""
        end = time.perf_counter() + timeout
        while self.fd >= 0 and time.perf_counter() < end:
            self._read(min(0.1, end - time.perf_counter()))
        while self.returncode is None and time.perf_counter() < end:
            self._reap(block=False)
            time.sleep(0.01)
        return self.exit_time

    def _reap(self, block: bool = False) -> None:
        if self.returncode is not None:
            return
        try:
            pid, status = os.waitpid(self.pid, 0 if block else os.WNOHANG)
        except ChildProcessError:
            pid, status = self.pid, 0
        if pid:
            self.exit_time = self.elapsed()
            self.returncode = os.waitstatus_to_exitcode(status)

    # -- the process -----------------------------------------------------------------

    def _pids(self) -> list[int]:
        """The process and its children (helper processes)."""
        pids = [self.pid]
        try:
            tasks = os.listdir(f"/proc/{self.pid}/task")
        except OSError:
            return pids
        for tid in tasks:  # a child started by any of its threads
            try:
                with open(f"/proc/{self.pid}/task/{tid}/children") as f:
                    pids += [int(p) for p in f.read().split()]
            except OSError:
                pass
        return pids

    def _status(self, field: str, children: bool = True) -> float:
        total = 0.0
        for pid in self._pids() if children else [self.pid]:
            try:
                with open(f"/proc/{pid}/status") as f:
                    for line in f:
                        if line.startswith(field + ":"):
                            total += int(line.split()[1]) / 1024
            except OSError:
                pass
        return total

    def rss_mb(self) -> float:
        """Resident memory now of the process and its children (helpers)."""
        return self._status("VmRSS")

    def peak_mb(self) -> float:
        """Peak resident memory (VmHWM) of the process itself."""
        return self._status("VmHWM", children=False)

    def cpu_s(self) -> float:
        """CPU seconds (user + system) used by the process so far."""
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        """End the program (SIGTERM, then SIGKILL) and release the pty."""
        if self.returncode is None:
            for sig, wait in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 2.0)):
                try:
                    os.kill(self.pid, sig)
                except ProcessLookupError:
                    break
                end = time.perf_counter() + wait
                while self.returncode is None and time.perf_counter() < end:
                    self._read(0.05)
                    self._reap()
                if self.returncode is not None:
                    break
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
