"""The file a rotation left beside the one being followed (NAME.1), for `tail.py`.

- Rotated before the first look: the reader started waiting for NAME, and before it
  read a line, logrotate moved NAME to NAME.1 (create mode) or copied it there and
  truncated NAME (copytruncate). NAME.1, changed after the reader started, holds the
  first lines: `open_predecessor` opens it, to be read to its end before NAME.
- Copied and truncated while being read: the lines written between the last read and
  the copy are only in NAME.1. When NAME.1 starts with the bytes read from NAME and
  holds them where they were read, `copy_rest` returns what follows them.

`holds_read` is that check (the file read from is checked the same way), on `pread`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

SUFFIX = ".1"  # where logrotate (and most rotations) put the previous file
CTIME_SLACK_S = 1.0  # file-system timestamps may lag the clock a little


def pread(fd: int, n: int, pos: int) -> bytes:
    """`n` bytes of `fd` at `pos`, the file offset left alone."""
    if hasattr(os, "pread"):
        return os.pread(fd, n, pos)
    os.lseek(fd, pos, os.SEEK_SET)  # pragma: no cover - platforms without pread
    return os.read(fd, n)  # pragma: no cover


def holds_read(fd: int, head: bytes, tail: bytes, pos: int) -> bool:
    """Whether the file `fd` holds what was read up to `pos` where it was read: its first
    bytes are `head` and the bytes before `pos` end with `tail` (an empty one says nothing)."""
    return ((not head or pread(fd, len(head), 0) == head)
            and (not tail or pread(fd, len(tail), pos - len(tail)) == tail))


def open_predecessor(path: Path, st: os.stat_result | None, since: float,
                     flags: int) -> tuple[int, os.stat_result] | None:
    """NAME.1 opened (fd, its stat) when it was changed after `since` (epoch seconds), holds
    data and is not the file at `path` (`st`); else None."""
    pre = path.with_name(path.name + SUFFIX)
    try:
        pst = os.stat(pre)
    except OSError:
        return None
    if (not stat.S_ISREG(pst.st_mode) or pst.st_size == 0
            or pst.st_ctime < since - CTIME_SLACK_S
            or (st is not None and (st.st_dev, st.st_ino) == (pst.st_dev, pst.st_ino))):
        return None
    try:
        fd = os.open(pre, flags)
    except OSError:
        return None
    return fd, os.fstat(fd)


def copy_rest(path: Path, ident: tuple[int, int] | None, head: bytes, tail: bytes, pos: int,
              chunk: int, flags: int) -> list[bytes] | None:
    """The bytes of NAME.1 after `pos`, in pieces of at most `chunk` bytes, when NAME.1 is a
    copy of what was read from the file `ident` (its first bytes are `head`, the bytes
    before `pos` end with `tail`); None when it is not."""
    try:
        fd = os.open(path.with_name(path.name + SUFFIX), flags)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) == ident
                or st.st_size <= pos or not head or not holds_read(fd, head, tail, pos)):
            return None
        out = []
        while pos < st.st_size:
            data = pread(fd, min(chunk, st.st_size - pos), pos)
            if not data:
                break
            out.append(data)
            pos += len(data)
        return out
    except OSError:
        return None
    finally:
        os.close(fd)
