"""The `.wandb` transaction log's chunk format, read front to back or newest first.

The format (LevelDB's log format with W&B's file header): 7 bytes `":W&B"`, magic
0xBEE1 (little-endian), version 0; then 32 KiB blocks of chunks, each
`crc32 (u32) | length (u16) | type (u8) | data`, type 1 a whole record, 2/3/4 the
first/middle/last piece of a longer one; a chunk never straddles a block and a
block's last < 7 bytes are zero padding. The checksum is zlib's CRC-32 of the type
byte followed by the data. `scan_chunks` reads records front to back (what a
follower of the log uses); see `wandb_run.py` for the records themselves.

Newest first: since no chunk straddles a block, records can be found again from
any block boundary: `resync` skips the middle and last pieces of a record begun in
an earlier block, up to the first whole record or first piece. `read_preview`
uses it to read a long log's head (the run record: identity, config, step
metric), its tail (the latest rows and summary) and one record from each of a
strided sample of blocks between them (the whole run's shape), in a few dozen
small reads whatever the log's size.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from carl_tui.sources.base import SourceError
from carl_tui.sources.unused_input import UnusedInput

FILE_IDENT = b":W&B"
FILE_MAGIC = 0xBEE1
FILE_HEADER = struct.Struct("<4sHB")
CHUNK_HEADER = struct.Struct("<IHB")
HEADER_LEN = 7
BLOCK_LEN = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
_CRC_SEED = [zlib.crc32(bytes([t])) for t in range(LAST + 1)]

CORRUPT = "corrupt record"


# -- front to back -------------------------------------------------------------------


@dataclass
class Scan:
    """What one pass over a piece of the log found."""

    records: list[bytes] = field(default_factory=list)
    end: int = 0  # resume offset: the end of the last complete record (or skipped damage)


def check_file_header(head: bytes, where: str) -> int:
    """The format version from the first 7 bytes; SourceError if it is no W&B log."""
    ident, magic, version = FILE_HEADER.unpack(head[:HEADER_LEN])
    if ident != FILE_IDENT or magic != FILE_MAGIC:
        raise SourceError(f"{where} is not a W&B transaction log (bad file header)", retry=False)
    return version


def scan_chunks(
    buf: bytes, start: int, *, at_eof: bool, unused_input: UnusedInput, where: str = ""
) -> Scan:
    """Records in `buf`, the log's bytes from file offset `start` (past the
    file header). `at_eof`: `buf` reaches the end of the file as it is now, so
    a damaged-looking last chunk may still be being written and is waited for."""
    return _ChunkScan(buf, start, at_eof, unused_input, where).run()


class _ChunkScan:
    """One pass of `scan_chunks`: walks the chunks, joins the pieces of each record,
    and keeps the resume offset (`committed`: the end of the last complete record)."""

    def __init__(self, buf: bytes, start: int, at_eof: bool, unused_input: UnusedInput, where: str):
        self.buf, self.start, self.at_eof = buf, start, at_eof
        self.unused_input, self.where = unused_input, where
        self.pos = self.committed = start
        self.parts: list[bytes] | None = None  # pieces of the record being joined
        self.damaged = False  # inside a damaged record: its later pieces are not counted again
        self.out = Scan(end=start)

    def run(self) -> Scan:
        buf, start = self.buf, self.start
        end_abs = start + len(buf)
        while True:
            pos = self.pos
            left = BLOCK_LEN - pos % BLOCK_LEN
            if left < HEADER_LEN:  # the block's zero padding
                if end_abs - pos < left:
                    break
                self.pos = pos + left
                if self.parts is None:
                    self.committed = self.pos
                continue
            if end_abs - pos < HEADER_LEN:
                break
            i = pos - start
            crc, length, kind = CHUNK_HEADER.unpack_from(buf, i)
            if not FULL <= kind <= LAST or length > left - HEADER_LEN:
                if self._unwritten(i + HEADER_LEN):
                    break
                self._bad_header(kind == crc == length == 0, left)
                continue
            chunk_end = pos + HEADER_LEN + length
            if chunk_end > end_abs:
                break
            data = buf[i + HEADER_LEN : i + HEADER_LEN + length]
            if zlib.crc32(data, _CRC_SEED[kind]) != crc:
                if self._unwritten(chunk_end - start):
                    break  # the last chunk may still be settling
                self._bad_checksum(kind, chunk_end)
                continue
            self.pos = chunk_end
            self._piece(kind, data, pos)
        self.out.end = self.committed
        return self.out

    def _unwritten(self, i: int) -> bool:
        """Only zeros from buffer index `i` to the end of the file: the rest of
        a record not written yet (or a crash's zero fill), to be waited for."""
        return self.at_eof and not self.buf[i:].strip(b"\0")

    def _corrupt(self, what: str, at: int, *, new_record: bool = True) -> None:
        if new_record or not self.damaged:
            where = f" of {self.where}" if self.where else ""
            self.unused_input.skip(CORRUPT, f"{what} at byte {at}{where}")

    def _bad_header(self, zeros: bool, left: int) -> None:
        """A chunk header that cannot be one: the rest of the block is dropped (LevelDB's rule)."""
        what = "a zero-filled region" if zeros else "a bad chunk header"
        self._corrupt(what, self.pos, new_record=not self.damaged)
        self.pos += left
        self.parts, self.committed, self.damaged = None, self.pos, True

    def _bad_checksum(self, kind: int, chunk_end: int) -> None:
        self._corrupt("a checksum mismatch", self.pos, new_record=kind in (FULL, FIRST))
        self.pos = chunk_end
        self.parts, self.committed, self.damaged = None, chunk_end, kind in (FIRST, MIDDLE)

    def _piece(self, kind: int, data: bytes, chunk_start: int) -> None:
        """A good chunk: a whole record, or a piece of one (first, middle, last)."""
        if kind == FULL or kind == FIRST:
            if self.parts is not None:  # the pieces before are lost; resume here from now on
                self._corrupt("a record cut short", chunk_start)
                self.committed = chunk_start
            self.damaged = False
            if kind == FULL:
                self.out.records.append(data)
                self.parts, self.committed = None, self.pos
            else:
                self.parts = [data]
        elif self.parts is None:  # a middle or last piece without its first
            self._corrupt("a record piece without its start", self.pos, new_record=False)
            self.committed, self.damaged = self.pos, kind == MIDDLE
        else:
            self.parts.append(data)
            if kind == LAST:
                self.out.records.append(b"".join(self.parts))
                self.parts, self.committed = None, self.pos

# -- newest first ---------------------------------------------------------------------

HEAD_BYTES = 64 << 10  # the head first read (more until it holds a history record)
HEAD_MAX_BYTES = 4 << 20
TAIL_BYTES = 128 << 10  # the newest records of the preview (more while they hold no row)
TAIL_MAX_BYTES = 16 << 20
SAMPLE_BYTES = 2 << 10  # read at each sampled block for its first history record


def resync(buf: bytes, start: int) -> int | None:
    """The file offset of the first chunk in `buf` (the log's bytes from the block
    boundary `start`) that begins a record (a whole record or a first piece),
    past the middle and last pieces of a record begun in an earlier block; None
    if `buf` holds none. A block whose chunk headers make no sense is passed over
    whole (LevelDB's rule)."""
    pos, end = start, start + len(buf)
    while True:
        left = BLOCK_LEN - pos % BLOCK_LEN
        if left < HEADER_LEN:  # the block's zero padding
            pos += left
            continue
        if end - pos < HEADER_LEN:
            return None
        _crc, length, kind = CHUNK_HEADER.unpack_from(buf, pos - start)
        if kind in (FULL, FIRST):
            return pos
        if kind in (MIDDLE, LAST) and length <= left - HEADER_LEN:
            pos += HEADER_LEN + length
        else:
            pos += left


@dataclass
class LogPreview:
    """The records of a long log read newest first, each list in file order."""

    head: list[bytes]  # from the start: the run record, config, step metric, first rows
    sample: list[bytes]  # one history record from each sampled block between head and tail
    tail: list[bytes]  # the newest records
    tail_end: int  # the end of the last whole record of the tail


class _Kinds:
    """Record types, parsed with wandb's `Record` class (damaged records are passed over)."""

    def __init__(self, record_cls: type):
        self.rec = record_cls()

    def of(self, raw: bytes) -> str | None:
        try:
            self.rec.ParseFromString(raw)
        except Exception:  # noqa: BLE001 - protobuf's DecodeError and kin
            return None
        return self.rec.WhichOneof("record_type")

    def has(self, records: list[bytes], kind: str) -> bool:
        return any(self.of(raw) == kind for raw in records)


def read_preview(
    log: Path, record_cls: type, *, samples: int, min_bytes: int
) -> LogPreview | None:
    """The head, a strided sample and the tail of a log longer than `min_bytes`;
    None for a shorter log, or one with no run record at its head (the run
    could not be named as the read in order will name it)."""
    kinds = _Kinds(record_cls)
    with open(log, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size - HEADER_LEN < max(min_bytes, 1) or f.read(4) != FILE_IDENT:
            return None
        head, head_end = _head(f, size, kinds)
        if not kinds.has(head, "run"):
            return None
        tail, tail_start, tail_end = _tail(f, size, head_end, kinds)
        sample = _sample(f, head_end, tail_start, samples, kinds)
    return LogPreview(head, sample, tail, tail_end)


def _scan(f, start: int, size: int, want: int, resync_at: bool) -> tuple[list[bytes], int, int]:
    """(records, their first offset, the end of the last whole one) of the log from
    `start` (a block boundary to resync at, or a record boundary), `want` bytes."""
    f.seek(start)
    buf = f.read(want)
    at = resync(buf, start) if resync_at else start
    if at is None:
        return [], start + len(buf), start + len(buf)
    scan = scan_chunks(buf[at - start :], at, at_eof=start + len(buf) >= size,
                       unused_input=UnusedInput())
    return scan.records, at, scan.end


def _head(f, size: int, kinds: _Kinds) -> tuple[list[bytes], int]:
    """The records from the start, up to a history record at least: what comes
    before the first row (the run record, a config update, the step metric)."""
    want = HEAD_BYTES
    while True:
        records, _, end = _scan(f, HEADER_LEN, size, want, resync_at=False)
        if kinds.has(records, "history") or HEADER_LEN + want >= size or want >= HEAD_MAX_BYTES:
            return records, end
        want *= 4


def _tail(f, size: int, head_end: int, kinds: _Kinds) -> tuple[list[bytes], int, int]:
    """(records, first offset, end) of the newest records, back far enough to hold
    a history record (or to the head)."""
    want = TAIL_BYTES
    while True:
        block = (size - want) // BLOCK_LEN * BLOCK_LEN
        if block <= head_end:
            return _scan(f, head_end, size, size - head_end, resync_at=False)
        records, start, end = _scan(f, block, size, size - block, resync_at=True)
        if kinds.has(records, "history") or want >= TAIL_MAX_BYTES:
            return records, start, end
        want *= 4


def _sample(f, head_end: int, tail_start: int, count: int, kinds: _Kinds) -> list[bytes]:
    """The first history record of each of `count` evenly spaced blocks between
    the head and the tail (every block when there are fewer)."""
    first = -(-head_end // BLOCK_LEN)
    n = tail_start // BLOCK_LEN - first
    if n <= 0 or count <= 0:
        return []
    blocks = range(first, first + n) if n <= count else [first + i * n // count
                                                        for i in range(count)]
    out = []
    for b in blocks:
        start = b * BLOCK_LEN
        for want in (SAMPLE_BYTES, BLOCK_LEN):  # a few records; the block if they hold no row
            records, _, _ = _scan(f, start, tail_start, min(want, tail_start - start),
                                  resync_at=True)
            row = next((raw for raw in records if kinds.of(raw) == "history"), None)
            if row is not None:
                out.append(row)
                break
    return out
