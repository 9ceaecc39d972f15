"""Follow a file another process writes, line by line, without losing a line.

`FileFollower(path).read()` returns the complete lines added since the last
read (without their newlines; lines are split on b"\\n" only, so a CRLF line
keeps its "\\r"). A half-written last line waits in memory for its newline.
Every file source (JSONL stream, Trainer stdout log) reads through it.

What it does about files that change under it:

- Growing: byte-offset tailing, at most `max_bytes_per_poll` bytes per read;
  `backlog` says more is waiting (the caller reads again at once).
- Truncated, or truncated and written again past the old offset between two
  reads (a writer that restarts and writes fast): told apart from growth by a
  fingerprint (the first `HEAD_BYTES` bytes of the file and the last
  `TAIL_BYTES` bytes read), checked after every read, so data read from a
  rewritten file is never taken for the old file's continuation. The file is
  read again from the start: a new `generation`. The unfinished last line of
  the old content, if any, is counted in `dropped`. (A rewrite that leaves
  both fingerprints byte-identical cannot be told from growth; then the
  content read so far is also identical where it was checked.)
- Replaced (renamed and recreated, log rotation; another (dev, inode) at the
  path): the old file stays open and is drained first, because its writer may
  still append to it before it reopens. The follower switches to the new file
  once the new file holds data and a read of the old one finds nothing more
  (it went quiet), or after `drain_limit_s` seconds if the old one never goes
  quiet (a note says lines written there later are not read). A single writer
  that writes its last lines to the old file and then the new one loses
  nothing, whatever the timing.
- Deleted: the open copy is still read (a writer may still append to it);
  when nothing more comes, `SourceError("waiting for PATH (it was deleted)")`.
  A file that appears at the path later is a replacement (above).
- A FIFO is opened non-blocking and read as it comes (no offsets to check).
  Nothing ever blocks: the reading thread can always be stopped.
- Rotated before the first line was read (the reader waited for a missing or
  empty file, and logrotate moved it to NAME.1 or copied it there and truncated
  it): NAME.1, changed after the reader started (`since`), is read to its end
  first, then NAME. Copied and truncated while being read (copytruncate): the
  lines written between the last read and the copy are read from NAME.1 when it
  holds what was read here (see `rotated.py`), then NAME from its start.
- A directory, a device or a socket: `SourceError(..., retry=False)` with a
  plain message; but a directory where a file was read is waited for (a script
  may remove it and write the file again). A missing file: `SourceError("waiting
  for PATH", kind="waiting")`: the poller looks again within a second.
- A line longer than `max_line_bytes` is skipped (reported in `dropped`, and
  in a note) without holding more than that in memory.
- A UTF-8 byte order mark at the start of the file is removed, and so are
  NUL bytes at the start of a line (the hole a `copytruncate` rotation leaves
  when the writer does not append): a hole of any size costs no memory.

Lines returned by one `read()` all belong to one generation
(`FollowRead.generation`); `notes` are plain sentences about restarts, meant
for the user. `close()` releases the file (thread-safe against a `read()` in
another thread); a later `read()` reopens it and continues where it stopped if
it is still the same file.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from carl_tui.sources import rotated
from carl_tui.sources.base import WAITING, SourceError
from carl_tui.sources.rotated import pread as _pread

HEAD_BYTES = 1024
TAIL_BYTES = 256
BOM = b"\xef\xbb\xbf"
EXAMPLE_BYTES = 80
DEFAULT_MAX_LINE_BYTES = 32 << 20

_O_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


@dataclass(slots=True)
class FollowRead:
    """What one `FileFollower.read()` found."""

    lines: list[bytes]  # complete lines, oldest first, without their newlines
    notes: list[str]  # plain sentences about restarts and skipped lines
    backlog: bool  # more data is waiting: read again at once
    generation: int = 0  # the file generation these lines belong to
    dropped: list[tuple[str, bytes]] = field(default_factory=list)  # (reason, first bytes)
    # (file offset, bytes): `lines` as they lie in the file, joined by their newlines (the
    # last one left off), in runs a skipped line or a byte order mark breaks: for readers
    # that index lines by offset, searched without a Python step per line
    runs: list[tuple[int, bytes]] = field(default_factory=list)

    def drop_long(self, example: bytes, max_line_bytes: int, name: str) -> None:
        self.dropped.append(("line too long", example))
        self.notes.append(f"a line of more than {max_line_bytes / 2**20:g} MB in {name} "
                          "was skipped")


_KINDS = ((stat.S_ISDIR, "directory"), (stat.S_ISCHR, "character device"),
          (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"),
          (stat.S_ISFIFO, "pipe (FIFO)"), (stat.S_ISREG, "file"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "special file")


def unusable(path: Path | str, st: os.stat_result, *, fifo_ok: bool = True) -> SourceError | None:
    """The error for a path that is not a file that can be followed, else None."""
    mode = st.st_mode
    if stat.S_ISREG(mode) or (fifo_ok and stat.S_ISFIFO(mode)):
        return None
    if stat.S_ISDIR(mode):
        return SourceError(f"{path} is a directory, not a file; give the path of a file",
                           retry=False, kind="invalid")
    what = "a file or a pipe" if fifo_ok else "a file"
    return SourceError(f"{path} is a {_kind(mode)}, not {what} that can be read",
                       retry=False, kind="invalid")


def stat_path(path: Path | str) -> os.stat_result | None:
    """os.stat of `path`; None when it does not exist (yet)."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except PermissionError:
        raise SourceError(f"cannot read {path}: permission denied") from None
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc.strerror or exc}") from None


def _gone(path: Path, predecessor: bool) -> SourceError:
    if predecessor:
        return SourceError(f"waiting for {path} ({path.name}{rotated.SUFFIX}, rotated away "
                           "before it was read, was read)", kind=WAITING)
    return SourceError(f"waiting for {path} (it was deleted)", kind=WAITING)


def _ident_of(st: os.stat_result | None) -> tuple[int, int] | None:
    return None if st is None else (st.st_dev, st.st_ino)


def _changed(fd: int, size: int, pos: int, head: bytes, tail: bytes) -> str | None:
    """How a file read up to `pos` changed (its fingerprint `head`, `tail`); None: it grew."""
    if pos == 0:
        return None
    if size < pos:
        return "was truncated"
    if not rotated.holds_read(fd, head, tail, pos):
        return "was truncated and written again"
    return None


def _open_file(path: Path, st: os.stat_result, *, was_a_file: bool
               ) -> tuple[int, os.stat_result]:
    """`path` opened for following (fd, its stat), or the SourceError that says why not."""
    err = unusable(path, st)
    if err is not None and was_a_file and stat.S_ISDIR(st.st_mode):
        # It was a file: a directory there now may go again (a script that cleans up)
        raise SourceError(f"{path} is a directory now; waiting for the file to come back",
                          kind=WAITING)
    if err is not None:
        raise err
    try:
        fd = os.open(path, _O_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        raise SourceError(f"waiting for {path}", kind=WAITING) from None
    except PermissionError:
        raise SourceError(f"cannot read {path}: permission denied") from None
    except OSError as exc:
        raise SourceError(f"cannot read {path}: {exc.strerror or exc}") from None
    fst = os.fstat(fd)
    err = unusable(path, fst)  # it may have changed since the stat
    if err is not None:
        os.close(fd)
        raise err
    return fd, fst


class FileFollower:
    """Byte-offset tailing of one file. See the module docstring."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        max_bytes_per_poll: int = 8 << 20,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        drain_limit_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        since: float | None = None,
    ):
        self.path = Path(path)
        # When the reader started (epoch s): a NAME.1 rotated after it holds unread lines
        self.since = time.time() if since is None else since
        self.max_bytes_per_poll = max(1024, int(max_bytes_per_poll))
        self.max_line_bytes = max(self.max_bytes_per_poll, int(max_line_bytes))
        self.drain_limit_s = drain_limit_s
        self.clock = clock
        self.offset = 0  # byte offset of the first line not yet returned
        self.generation = 0  # how many times the file started over (0: the first file)
        self.restarts = 0  # same count: truncations, rewrites and replacements seen
        self.bytes_read = 0  # read in order, all generations (a file is read once)
        self.ranges_read = 0  # lines read again on demand (`read_range`)
        self._pos = 0  # next byte to read (offset + len(_buf), unless skipping a long line)
        self._buf = bytearray()  # bytes of the unfinished last line
        self._skip_long = False  # inside a line longer than max_line_bytes
        self._head = b""
        self._tail = b""
        self._fd: int | None = None
        self._fifo = False
        self._ident: tuple[int, int] | None = None  # (dev, inode) of the file being read
        self._replaced_at: float | None = None  # when the path was first seen elsewhere
        self._force_switch = False
        self._looked_back = False  # NAME.1 was checked when the first data appeared
        self._predecessor = False  # the open file is NAME.1, read to its end first
        self._followed = False  # a file at the path was read once
        self._old_generation_read = False  # this read's lines end the previous generation
        self._notes: list[str] = []  # for the next read
        self._dropped: list[tuple[str, bytes]] = []  # for the next read
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.path.name

    # -- public --------------------------------------------------------------------------

    def read(self) -> FollowRead:
        with self._lock:
            out = FollowRead([], self._notes, False, self.generation, self._dropped)
            self._notes, self._dropped = [], []
            try:
                return self._read(out)
            except BaseException:
                # said with the next successful read
                self._notes = out.notes + self._notes
                self._dropped = out.dropped + self._dropped
                raise

    def take_unfinished(self) -> bytes:
        """The last line read so far that has no newline yet, handed over and
        consumed: for readers that stop here (a `summary`), not for tailing."""
        with self._lock:
            if self._skip_long:
                return b""
            line = bytes(self._buf)
            self.offset += len(line)
            self._buf = bytearray()
            return line

    def read_range(self, generation: int, start: int, end: int) -> bytes | None:
        """Bytes `start:end` of the file read as `generation`, again; None: not followed now."""
        with self._lock:
            if generation != self.generation or self._fifo or self._ident is None:
                return None
            fd = self._fd if self._fd is not None else os.open(self.path, _O_FLAGS)
            try:
                same = _ident_of(st := os.fstat(fd)) == self._ident and st.st_size >= end
                self.ranges_read += same
                return _pread(fd, end - start, start) if same else None
            finally:
                if fd != self._fd:
                    os.close(fd)

    def close(self) -> None:
        with self._lock:
            self._close_fd()

    # -- reading -------------------------------------------------------------------------

    def _read(self, out: FollowRead) -> FollowRead:
        st = stat_path(self.path)
        if not self._looked_back and self._pos == 0 and self.generation == 0:
            self._look_back(st, out)
        if self._fd is not None and _ident_of(st) != self._ident and self._follow_old(st, out):
            return out  # lines of the old copy of a replaced or deleted file
        if self._fd is None:
            if st is None:
                raise SourceError(f"waiting for {self.path}", kind=WAITING)
            self._open(st, out)
        self._read_current(out, allow_restart=True)
        if not self._old_generation_read:
            out.generation = self.generation
        self._old_generation_read = False
        return out

    def _look_back(self, st: os.stat_result | None, out: FollowRead) -> None:
        """Before the first line is read: lines rotated away to NAME.1 after the reader
        started are read first, to their end, then the file at the path."""
        pre = rotated.open_predecessor(self.path, st, self.since, _O_FLAGS)
        if pre is None:  # nothing rotated away (yet): keep looking until the path has data
            self._looked_back = st is not None and (st.st_size > 0
                                                    or not stat.S_ISREG(st.st_mode))
            return
        fd, fst = pre
        self._close_fd()
        self._looked_back = self._predecessor = True
        self._fd, self._ident, self._fifo = fd, (fst.st_dev, fst.st_ino), False
        self._replaced_at = None
        self._force_switch = False
        pre_name = self.name + rotated.SUFFIX
        out.notes.append(f"{self.name} was rotated to {pre_name} before it was read; "
                         f"reading {pre_name} first")

    def _follow_old(self, st: os.stat_result | None, out: FollowRead) -> bool:
        """The path no longer names the open file. Read the old one until it is
        quiet; True: `out` is complete (old lines); False: switched, read the new file."""
        now = self.clock()
        if self._replaced_at is None:
            self._replaced_at = now
        # Seen before the old file is read: a writer that wrote to the new file
        # had finished with the old one, so a read that finds nothing more is final.
        new_ready = st is not None and (not stat.S_ISREG(st.st_mode) or st.st_size > 0)
        if not self._force_switch:
            if self._read_current(out, allow_restart=False):
                if new_ready and now - self._replaced_at >= self.drain_limit_s:
                    self._force_switch = True  # switch at the next read, after these lines
                out.backlog = True
                out.generation = self.generation
                return True
            if st is None:
                raise _gone(self.path, self._predecessor)
            if not new_ready:
                out.generation = self.generation
                return True  # the new file is still empty: nothing to lose by waiting
        if st is None:
            raise _gone(self.path, self._predecessor)
        note = f"{self.name} was replaced by a new file; reading the new file from the start"
        if self._predecessor:
            note = f"{self.name}{rotated.SUFFIX} read to its end; reading {self.name}"
        if self._force_switch:
            note += (f" (its old copy was still being written after {self.drain_limit_s:g} s; "
                     "lines written there later are not read)")
        self._restart(note, out)
        self._close_fd()
        self._ident = None
        return False

    def _open(self, st: os.stat_result, out: FollowRead) -> None:
        fd, fst = _open_file(self.path, st, was_a_file=self._followed)
        ident = (fst.st_dev, fst.st_ino)
        if self._ident is not None and ident != self._ident:  # reopened after close()
            note = f"{self.name} was replaced by a new file; reading the new file from the start"
            self._restart(note, out)
        self._fd, self._ident = fd, ident
        self._fifo = stat.S_ISFIFO(fst.st_mode)
        self._replaced_at = None
        self._force_switch = False
        self._predecessor = False
        self._followed = True

    def _read_current(self, out: FollowRead, *, allow_restart: bool) -> int:
        """Read once from the open file into `out`; the number of bytes read."""
        assert self._fd is not None
        if self._fifo:
            try:
                data = os.read(self._fd, self.max_bytes_per_poll)
            except BlockingIOError:  # a writer is connected, nothing written yet
                data = b""
            except OSError as exc:
                raise SourceError(f"cannot read {self.path}: {exc.strerror or exc}") from None
            out.backlog = len(data) >= self.max_bytes_per_poll
            self._take(data, out)
            return len(data)
        try:
            data, size = self._read_checked(out, allow_restart)
        except OSError as exc:
            raise SourceError(f"cannot read {self.path}: {exc.strerror or exc}") from None
        out.backlog = size > self._pos + len(data)
        self._take(data, out)
        return len(data)

    def _read_checked(self, out: FollowRead, allow_restart: bool) -> tuple[bytes, int]:
        """Bytes after `_pos` of a regular file, checked against the fingerprint
        after they were read; restarts from the start when the file changed."""
        fd = self._fd
        assert fd is not None
        size = os.fstat(fd).st_size
        want = min(self.max_bytes_per_poll, size - self._pos)
        data = _pread(fd, want, self._pos) if want > 0 else b""
        why = _changed(fd, size, self._pos, self._head, self._tail)
        if why is None:
            return data, size
        if not allow_restart:
            return b"", size  # the old copy of a replaced file was rewritten: nothing to drain
        if self._catch_up_copy(out):
            # These lines end the old generation: the new one is read at the next read.
            out.generation, self._old_generation_read = self.generation, True
            self._restart(f"{self.name} was truncated after a copy to {self.name}"
                          f"{rotated.SUFFIX} (its last lines read there); reading it again "
                          "from the start", out)
            return b"", os.fstat(fd).st_size
        self._restart(f"{self.name} {why}; reading it again from the start", out)
        size = os.fstat(fd).st_size
        want = min(self.max_bytes_per_poll, size)
        return (_pread(fd, want, 0) if want > 0 else b""), size

    def _catch_up_copy(self, out: FollowRead) -> bool:
        """A copytruncate rotation: the lines written after the last read are in NAME.1."""
        chunks = rotated.copy_rest(self.path, self._ident, self._head, self._tail, self._pos,
                                   self.max_bytes_per_poll, _O_FLAGS)
        for data in chunks or ():
            self._take(data, out)
        return chunks is not None

    def _take(self, data: bytes, out: FollowRead) -> None:
        """Split `data` (the bytes at `_pos`) into complete lines."""
        if not data:
            return
        if len(self._head) < HEAD_BYTES:
            self._head += data[: HEAD_BYTES - len(self._head)]
        self._tail = (self._tail + data[-TAIL_BYTES:])[-TAIL_BYTES:]
        self._pos += len(data)
        self.bytes_read += len(data)
        if self._skip_long:
            nl = data.find(b"\n")
            if nl < 0:
                self.offset += len(data)
                return
            self.offset += nl + 1
            data = data[nl + 1 :]
            self._skip_long = False
        if not self._buf and data[:1] == b"\x00":
            # A hole of NULs at a line start (a rotation truncated the file under a
            # writer that did not append): dropped as it comes, never buffered.
            rest = data.lstrip(b"\x00")
            self.offset += len(data) - len(rest)
            data = rest
        end = data.rfind(b"\n")
        if end < 0:
            self._buf += data
            if len(self._buf) > self.max_line_bytes:
                out.drop_long(bytes(self._buf[:EXAMPLE_BYTES]), self.max_line_bytes, self.name)
                self.offset += len(self._buf)
                self._buf = bytearray()
                self._skip_long = True
            return
        start = self.offset
        if self._buf:
            self._buf += data[:end]
            block = bytes(self._buf)
        else:
            block = data[:end]
        self.offset += len(block) + 1
        self._buf = bytearray(data[end + 1 :])
        lines = block.split(b"\n")
        skip = 0
        if len(lines[0]) > self.max_line_bytes:
            out.drop_long(lines[0][:EXAMPLE_BYTES], self.max_line_bytes, self.name)
            skip = len(lines.pop(0)) + 1
        elif start == 0 and lines[0].startswith(BOM):
            lines[0] = lines[0][len(BOM) :]
            skip = len(BOM)
        if lines:  # `block` is the lines as read: no copy unless cut at its start
            out.runs.append((start + skip, block[skip:] if skip else block))
        out.lines.extend(lines)

    def _restart(self, note: str, out: FollowRead) -> None:
        """Start over at the beginning of the file (a new generation)."""
        if self._buf.strip():
            out.dropped.append(("unfinished line", bytes(self._buf[:EXAMPLE_BYTES])))
        self.generation += 1
        self.restarts += 1
        self.offset = self._pos = 0
        self._buf = bytearray()
        self._skip_long = False
        self._head = self._tail = b""
        if out.lines:
            self._notes.append(note)  # said with the first lines of the new generation
        else:
            out.notes.append(note)

    def _close_fd(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            finally:
                self._fd = None


@dataclass(slots=True)
class Sample:
    """Lines picked from a file without reading it all (`sample_lines`)."""

    head: list[bytes]  # the first complete lines (a stream's identity is there)
    lines: list[bytes]  # one complete line near each of `count` evenly spaced offsets
    tail: list[bytes]  # the last complete lines
    tail_end: int  # offset just past the last complete line


def sample_lines(path: str | os.PathLike, start: int, end: int, *, count: int,
                 tail_bytes: int, head_bytes: int = 1 << 16,
                 probe_bytes: int = 1 << 13) -> Sample:
    """Newest first, coarse to fine: the lines of a regular file between byte offsets
    `start` and `end` read from the end (`tail_bytes`) and at `count` evenly spaced
    offsets before it (the first whole line after each), plus the head, in point
    reads: the cost does not grow with the file. A line longer than `probe_bytes`
    at a sampled offset is passed over."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        head = _pread(fd, min(head_bytes, end - start), start)
        head_lines = head.split(b"\n")[:-1]
        tail_from = max(start, end - tail_bytes)
        tail = _pread(fd, end - tail_from, tail_from)
        last_nl = tail.rfind(b"\n")
        if last_nl < 0:
            return Sample(head_lines, [], [], start)
        first = 0 if tail_from == start else tail.find(b"\n") + 1
        tail_lines = tail[first:last_nl].split(b"\n") if first <= last_nl else []
        tail_start = tail_from + first
        lines: list[bytes] = []
        span = tail_start - start
        last_at = -1
        for k in range(count if span > 0 else 0):
            pos = start + (k * span) // count
            buf = _pread(fd, probe_bytes, pos)
            a = 0 if pos == start else buf.find(b"\n") + 1
            b = buf.find(b"\n", a) if a > 0 or pos == start else -1
            if b > a and pos + b < tail_start and pos + a != last_at:
                last_at = pos + a
                lines.append(buf[a:b])
        return Sample(head_lines, lines, tail_lines, tail_from + last_nl + 1)
    finally:
        os.close(fd)
