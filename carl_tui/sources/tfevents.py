"""TensorBoard event files without TensorFlow: the record framing and a small protobuf reader.

An event file is a sequence of records, each

    uint64 length (little-endian) | uint32 masked CRC32C of those 8 bytes |
    data (length bytes)           | uint32 masked CRC32C of the data

(`masked(c) = ((c >> 15 | c << 17) + 0xA282EAD8) mod 2**32`), and each record's
data is a serialized `tensorboard.Event` protobuf message. The fields read here
(checked against tensorboard's event.proto, summary.proto and tensor.proto):

    Event:        wall_time=1 double, step=2 int64, file_version=3, graph_def=4,
                  summary=5 Summary, log_message=6, session_log=7,
                  tagged_run_metadata=8, meta_graph_def=9, source_metadata=10
    Summary:      value=1 repeated Value
    Value:        tag=1, simple_value=2 float, obsolete_old_style_histogram=3,
                  image=4, histo=5, audio=6, node_name=7, tensor=8 TensorProto,
                  metadata=9 SummaryMetadata
    SummaryMetadata: plugin_data=1 PluginData (plugin_name=1, content=2)
    TensorProto:  dtype=1, tensor_shape=2 (dim=2 repeated (size=1)),
                  tensor_content=4, float_val=5, double_val=6, int_val=7,
                  string_val=8, int64_val=10, bool_val=11, half_val=13,
                  uint32_val=16, uint64_val=17

A value is a scalar when it has `simple_value` (what `add_scalar` writes), or a
one-element numeric tensor of the "scalars" plugin, or a 0-d numeric tensor
without a plugin (`tf.summary.scalar` in TF2, `add_scalar(new_style=True)`).
TF2 writers send a tag's metadata only with its first value in a file, so the
plugin is remembered per tag (`EventDecoder.plugins`). Text (plugin "text", a
string tensor) is returned with its content; everything else (histograms,
images, audio, graphs, hparams, other plugins' tensors) is returned as a kind
to count, never as an error.

CRC32C: google-crc32c's C extension when it is installed; otherwise numpy runs
every record of a block side by side, one byte position at a time, and cuts a
long record (an image, a graph) into 1 KiB chunks run side by side and joined
(`_crc_long`). On scalar logs both take a small part of the read time (see
benchmarks/bench_tensorboard.py); the C extension is faster on large records.

The header CRCs are checked along with the data CRCs, for a whole block at a
time: the lengths are walked first, then every header and record is checked
at once, and only from the first failure on is the block looked at record by
record.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

HEADER_LEN = 12  # uint64 length + uint32 masked crc of it
FOOTER_LEN = 4  # uint32 masked crc of the data
MAX_RECORD = 1 << 31  # protobuf's own limit; a longer "length" is damage
_MASK_DELTA = 0xA282EAD8
_HEAD = struct.Struct("<QI")
_U32 = struct.Struct("<I")
_F32 = struct.Struct("<f")
_F64 = struct.Struct("<d")

# -- CRC32C ------------------------------------------------------------------------------

_POLY = 0x82F63B78  # CRC-32C (Castagnoli), reflected


def _table() -> list[int]:
    out = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        out.append(c)
    return out


_TABLE = _table()
_NP_TABLE = np.array(_TABLE, dtype=np.uint32)
_LANE_MAX = 2048  # longer records are cut into chunks in the numpy fallback


def _crc_python(data: bytes) -> int:
    crc = 0xFFFFFFFF
    t = _TABLE
    for b in data:
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _load_c_crc():
    try:
        # lazy: an optional C extension (the [tensorboard] extra); without it numpy checks
        import google_crc32c
    except ImportError:
        return None
    if getattr(google_crc32c, "implementation", "") != "c":
        return None  # its pure-Python fallback is slower than ours
    return google_crc32c.value


_C_CRC = _load_c_crc()
CRC_IMPLEMENTATION = "google-crc32c" if _C_CRC is not None else "numpy"


def crc32c(data: bytes) -> int:
    """CRC-32C of `data` (not masked)."""
    if _C_CRC is not None:
        return _C_CRC(bytes(data))
    return _crc_python(data)


def masked_crc32c(data: bytes) -> int:
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def _mask(c: np.ndarray) -> np.ndarray:
    c = c.astype(np.uint32, copy=False)
    return ((c >> np.uint32(15)) | (c << np.uint32(17))) + np.uint32(_MASK_DELTA)


def _crc_lanes(
    arr: np.ndarray,
    starts: np.ndarray,
    lens: np.ndarray,
    init: np.ndarray | None = None,
    final_xor: bool = True,
) -> np.ndarray:
    """CRC-32C of every `arr[s:s+l]`, all side by side: one numpy step per byte
    position. `init` (per piece) and `final_xor=False` give the raw CRC register."""
    out = np.empty(len(starts), dtype=np.uint32)
    if not len(starts):
        return out
    order = np.argsort(-lens, kind="stable")
    st, ln = starts[order], lens[order]
    if init is None:
        crc = np.full(len(st), 0xFFFFFFFF, dtype=np.uint32)
    else:
        crc = init[order].astype(np.uint32)
    # active[j]: how many pieces (longest first) are longer than j
    active = np.searchsorted(-ln, -np.arange(int(ln[0])), side="left")
    tab = _NP_TABLE
    eight = np.uint32(8)
    for j, k in enumerate(active.tolist()):
        c = crc[:k]
        crc[:k] = tab[(c ^ arr[st[:k] + j]) & 0xFF] ^ (c >> eight)
    out[order] = crc ^ np.uint32(0xFFFFFFFF) if final_xor else crc
    return out


_CHUNK = 1024  # long pieces are cut into chunks this long, run side by side, then joined
_SHIFT: list[list[int]] = []


def _shift_tables() -> list[list[int]]:
    """The CRC register after _CHUNK zero bytes, as a function of the register
    before, one table per byte of it (the map is linear over GF(2))."""
    if not _SHIFT:
        inits = np.array([b << (8 * j) for j in range(4) for b in range(256)], dtype=np.uint32)
        zeros = np.zeros(_CHUNK, dtype=np.uint8)
        regs = _crc_lanes(
            zeros, np.zeros(1024, dtype=np.int64), np.full(1024, _CHUNK, dtype=np.int64),
            init=inits, final_xor=False,
        ).tolist()
        _SHIFT.extend(regs[256 * j : 256 * (j + 1)] for j in range(4))
    return _SHIFT


def _crc_long(arr: np.ndarray, starts: Sequence[int], lens: Sequence[int]) -> list[int]:
    """CRC-32C of long pieces. Each is cut into a short first chunk and _CHUNK-byte
    chunks; all chunks run side by side (the first from the usual initial
    register, the others from 0), and the registers are joined in order:
    R(s, chunk) = shift(s) ^ R(0, chunk), as the CRC register is linear."""
    t0, t1, t2, t3 = _shift_tables()
    c_starts: list[int] = []
    c_lens: list[int] = []
    c_init: list[int] = []
    counts: list[int] = []
    for s, n in zip(starts, lens):
        r = n % _CHUNK or _CHUNK
        c_starts.append(s)
        c_lens.append(r)
        c_init.append(0xFFFFFFFF)
        rest = range(s + r, s + n, _CHUNK)
        c_starts.extend(rest)
        c_lens.extend([_CHUNK] * len(rest))
        c_init.extend([0] * len(rest))
        counts.append(1 + len(rest))
    regs = _crc_lanes(
        arr, np.asarray(c_starts, dtype=np.int64), np.asarray(c_lens, dtype=np.int64),
        init=np.asarray(c_init, dtype=np.uint32), final_xor=False,
    ).tolist()
    out = []
    i = 0
    for k in counts:
        reg = regs[i]
        for c in regs[i + 1 : i + k]:
            reg = (t0[reg & 0xFF] ^ t1[(reg >> 8) & 0xFF] ^ t2[(reg >> 16) & 0xFF]
                   ^ t3[reg >> 24] ^ c)
        out.append(reg ^ 0xFFFFFFFF)
        i += k
    return out


def crc32c_many(buf: bytes, starts: Sequence[int], lens: Sequence[int]) -> np.ndarray:
    """CRC-32C (not masked) of each `buf[s:s+l]`, as uint32."""
    n = len(starts)
    if _C_CRC is not None and (n < 64 or int(np.max(lens)) > 16):  # short runs: lanes win
        f = _C_CRC
        return np.fromiter(
            (f(buf[s : s + ln]) for s, ln in zip(starts, lens)), dtype=np.uint32, count=n
        )
    st = np.asarray(starts, dtype=np.int64)
    ln = np.asarray(lens, dtype=np.int64)
    arr = np.frombuffer(buf, dtype=np.uint8)
    long_ = ln > _LANE_MAX
    if not long_.any():
        return _crc_lanes(arr, st, ln)
    out = np.empty(n, dtype=np.uint32)
    out[long_] = _crc_long(arr, st[long_].tolist(), ln[long_].tolist())
    short = ~long_
    out[short] = _crc_lanes(arr, st[short], ln[short])
    return out


# -- framing -----------------------------------------------------------------------------


@dataclass
class Scan:
    """What one pass over a piece of an event file found."""

    starts: list[int] = field(default_factory=list)  # where each record's data starts in buf
    ends: list[int] = field(default_factory=list)  # and where it ends
    end: int = 0  # bytes of buf done with: complete records and skipped damage
    damaged: list[tuple[int, int]] = field(default_factory=list)  # (start, end) skipped in buf
    not_event_file: bool = False  # the file's first record header is not a record header
    open_damage: bool = False  # the last damaged range reaches `end`: resync goes on next time


def _stored_crcs(arr: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The little-endian uint32 stored at each offset of `at`."""
    b = arr[at[:, None] + np.arange(4)].astype(np.uint32)
    return (b[:, 0] | (b[:, 1] << np.uint32(8)) | (b[:, 2] << np.uint32(16))
            | (b[:, 3] << np.uint32(24)))


def _frame(buf: bytes, pos: int) -> tuple[list[int], list[int], int]:
    """Walk the length fields from `pos` without checking them: the record starts
    and data lengths that fit in `buf`, and where the walk stopped."""
    starts: list[int] = []
    lens: list[int] = []
    unpack = _HEAD.unpack_from
    n = len(buf)
    add_s, add_l = starts.append, lens.append
    while pos + HEADER_LEN <= n:
        length = unpack(buf, pos)[0]
        end = pos + HEADER_LEN + length + FOOTER_LEN
        if end > n or length >= MAX_RECORD:
            break
        add_s(pos)
        add_l(length)
        pos = end
    return starts, lens, pos


def _unwritten(buf: bytes, i: int, at_eof: bool) -> bool:
    """Only zeros from `i` to the end of the file: a record not written yet."""
    return at_eof and not buf[i:].strip(b"\0")


def _find_header(buf: bytes, arr: np.ndarray, pos: int) -> int | None:
    """The first offset >= pos where 8 bytes are followed by their masked CRC32C
    (and, when the record is complete in buf, its data CRC matches too)."""
    n = len(buf)
    window = 1 << 16
    while pos + HEADER_LEN <= n:
        stop = min(n - HEADER_LEN + 1, pos + window)
        cand = np.arange(pos, stop, dtype=np.int64)
        crc = _mask(crc32c_many(buf, cand, np.full(len(cand), 8, dtype=np.int64)))
        hits = np.flatnonzero(crc == _stored_crcs(arr, cand + 8))
        for h in hits.tolist():
            p = pos + h
            length = _HEAD.unpack_from(buf, p)[0]
            if length >= MAX_RECORD:
                continue
            end = p + HEADER_LEN + length
            if end + FOOTER_LEN > n:
                return p  # complete later: its data CRC is checked then
            if masked_crc32c(buf[p + HEADER_LEN : end]) == _U32.unpack_from(buf, end)[0]:
                return p
        pos = stop
    return None


# What `_take_block` leaves at the offset it returns.
_DONE, _NEXT_BLOCK, _CHECK_HEADER = "done", "next block", "check header"


def scan_records(buf: bytes, *, at_eof: bool, file_start: bool = False) -> Scan:
    """The records in `buf`, a piece of an event file that starts at a record boundary.

    `at_eof`: `buf` reaches the end of the file as it is now, so a record cut
    short at the end (or zeros there) is still being written and is waited for.
    `file_start`: `buf` starts at offset 0; a first header that is no header,
    with no record after it in `buf` either, means the file is not an event
    file. A record whose data fails its CRC is skipped; after a header that
    fails its CRC (the length cannot be trusted) the reader resynchronises at
    the next offset where a header and its record check out. Skipped ranges
    are listed in `damaged`.
    """
    out = Scan()
    arr = np.frombuffer(buf, dtype=np.uint8)
    pos = 0
    while True:
        pos, look = _take_block(buf, arr, pos, at_eof, out)
        if look == _DONE:
            return out
        if look == _NEXT_BLOCK:
            continue
        # `pos` holds a header that is damaged, implausible, or not complete in buf
        resume = _resync(buf, arr, pos, at_eof, file_start, out)
        if resume is None:
            return out
        pos = resume


def _take_block(buf: bytes, arr: np.ndarray, pos: int, at_eof: bool,
                out: Scan) -> tuple[int, str]:
    """Frame the records from `pos` on and check their CRCs, a whole block at once;
    the good ones up to the first failure go to `out`. Returns where to go on from
    and what is there: `_DONE` (the end of what is complete in `buf`), `_NEXT_BLOCK`
    (a damaged record was skipped), `_CHECK_HEADER` (a header to look at)."""
    starts, lens, stop = _frame(buf, pos)
    k = len(starts)
    if not k:
        return pos, _CHECK_HEADER
    st = np.asarray(starts, dtype=np.int64)
    ln = np.asarray(lens, dtype=np.int64)
    head_ok = _mask(crc32c_many(buf, st, np.full(k, 8, dtype=np.int64))) == _stored_crcs(
        arr, st + 8
    )
    data_ok = _mask(crc32c_many(buf, st + HEADER_LEN, ln)) == _stored_crcs(
        arr, st + HEADER_LEN + ln
    )
    bad = np.flatnonzero(~(head_ok & data_ok))
    first_bad = int(bad[0]) if len(bad) else k
    data = st[:first_bad] + HEADER_LEN
    out.starts.extend(data.tolist())
    out.ends.extend((data + ln[:first_bad]).tolist())
    if first_bad == k:
        out.end = stop
        if stop + HEADER_LEN > len(buf):
            return stop, _DONE
        return stop, _CHECK_HEADER  # the walk stopped on an implausible length
    pos = out.end = starts[first_bad]
    if not head_ok[first_bad]:
        return pos, _CHECK_HEADER
    # a damaged body: its length is good, skip just it
    if _unwritten(buf, pos + HEADER_LEN, at_eof):
        return pos, _DONE
    rec_end = pos + HEADER_LEN + lens[first_bad] + FOOTER_LEN
    out.damaged.append((pos, rec_end))
    out.end = rec_end
    return rec_end, _NEXT_BLOCK


def _resync(buf: bytes, arr: np.ndarray, pos: int, at_eof: bool, file_start: bool,
            out: Scan) -> int | None:
    """`pos` holds a header that is damaged, implausible, or not complete in `buf`:
    the next offset where a record checks out (the range before it recorded as
    damaged), or None to stop here (a record still being written, no event file,
    or nothing found yet)."""
    n = len(buf)
    if pos + HEADER_LEN > n:
        return None  # a header still being written
    length, stored = _HEAD.unpack_from(buf, pos)
    if masked_crc32c(buf[pos : pos + 8]) == stored:
        if length < MAX_RECORD:
            return None  # a good header whose record is still being written
    elif _unwritten(buf, pos, at_eof):
        return None
    nxt = _find_header(buf, arr, pos + 1)
    if file_start and pos == 0 and nxt is None:
        out.not_event_file = True  # no record where one must start, and none after
        return None
    if nxt is None:
        # nothing found yet: a header may still start in the last 11 bytes
        resume = max(pos + 1, n - HEADER_LEN + 1)
        out.damaged.append((pos, resume))
        out.end = resume
        out.open_damage = True
        return None
    out.damaged.append((pos, nxt))
    out.end = nxt
    return nxt


# -- protobuf wire format ------------------------------------------------------------------


class DecodeError(ValueError):
    """A record's data is not a well-formed Event message."""


def _varint(d: bytes, i: int) -> tuple[int, int]:
    b = d[i]
    if b < 0x80:
        return b, i + 1
    result = b & 0x7F
    shift = 7
    i += 1
    while True:
        b = d[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i
        shift += 7
        if shift > 63:
            raise DecodeError("varint too long")


def _skip(d: bytes, i: int, wire: int) -> int:
    """The offset after a field of wire type `wire` whose key ends at `i`."""
    if wire == 0:
        return _varint(d, i)[1]
    if wire == 1:
        return i + 8
    if wire == 2:
        ln, i = _varint(d, i)
        return i + ln
    if wire == 5:
        return i + 4
    raise DecodeError(f"wire type {wire}")


def _signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _fields(d: bytes, i: int, end: int):
    """(field number, wire type, value start, value end) of each field in d[i:end];
    for wire type 0 the start is the decoded value."""
    while i < end:
        key, i = _varint(d, i)
        num, wire = key >> 3, key & 7
        if wire == 2:
            ln, i = _varint(d, i)
            j = i + ln
            if j > end:
                raise DecodeError("field runs past its message")
            yield num, wire, i, j
            i = j
        elif wire == 0:
            v, i = _varint(d, i)
            yield num, wire, v, i
        elif wire == 1:
            yield num, wire, i, i + 8
            i += 8
        elif wire == 5:
            yield num, wire, i, i + 4
            i += 4
        else:
            raise DecodeError(f"wire type {wire}")
    if i != end:
        raise DecodeError("field runs past its message")


# DataType numbers (tensorboard/compat/proto/types.proto) -> numpy dtype of tensor_content
_DTYPES = {
    1: "<f4", 2: "<f8", 3: "<i4", 4: "u1", 5: "<i2", 6: "i1", 9: "<i8", 10: "?", 17: "<u2",
    19: "<f2", 22: "<u4", 23: "<u8",
}
DT_STRING = 7
DT_BFLOAT16 = 14
DT_HALF = 19

# Event fields that are not summaries -> the kind counted
# (file_version=3, session_log=7 and source_metadata=10 are bookkeeping: not counted)
EVENT_KINDS = {4: "graph", 6: "log message", 8: "run metadata", 9: "meta graph"}
# Value oneof fields that are not scalars -> the kind counted
VALUE_KINDS = {3: "histogram", 4: "image", 5: "histogram", 6: "audio"}
# Tensor plugins -> the kind counted
PLUGIN_KINDS = {"histograms": "histogram", "images": "image", "audio": "audio", "text": "text",
                "hparams": "hparams", "pr_curves": "pr curve", "mesh": "mesh",
                "custom_scalars": "custom scalars layout", "graph_keras_model": "graph"}

SCALAR = "scalar"
TEXT = "text"
BAD = "bad"  # (BAD, tag, reason): a value that claims to be a scalar and is not


def _half(bits: int) -> float:
    return float(np.array([bits & 0xFFFF], dtype=np.uint16).view(np.float16)[0])


def _bfloat16(bits: int) -> float:
    return float(np.array([(bits & 0xFFFF) << 16], dtype=np.uint32).view(np.float32)[0])


@dataclass(slots=True)
class _Tensor:
    dtype: int = 0
    dims: list[int] = field(default_factory=list)
    content: bytes = b""
    values: list = field(default_factory=list)  # typed values in field order
    strings: list[bytes] = field(default_factory=list)

    @property
    def size(self) -> int:
        return math.prod(self.dims)


def _packed(d: bytes, num: int, wire: int, a: int, b: int, out: list) -> None:
    """Append the values of a repeated numeric tensor field (packed or not)."""
    if num in (5, 6):  # float_val, double_val
        fmt = "<f" if num == 5 else "<d"
        width = 4 if num == 5 else 8
        if wire == 2:
            if (b - a) % width:
                raise DecodeError("packed floats of odd length")
            out.extend(struct.unpack_from(f"{fmt[0]}{(b - a) // width}{fmt[1]}", d, a))
        else:
            out.append(struct.unpack_from(fmt, d, a)[0])
        return
    signed = num in (7, 10, 13)  # int_val, int64_val, half_val (int32s)
    if wire == 0:
        vals = [a]
    elif wire == 2:
        vals = []
        i = a
        while i < b:
            v, i = _varint(d, i)
            vals.append(v)
    else:
        raise DecodeError("integer tensor field of wrong wire type")
    out.extend(_signed64(v) if signed else v for v in vals)


def _tensor(d: bytes, i: int, end: int) -> _Tensor:
    t = _Tensor()
    for num, wire, a, b in _fields(d, i, end):
        if num == 1 and wire == 0:
            t.dtype = a
        elif num == 2 and wire == 2:
            for n2, w2, a2, b2 in _fields(d, a, b):
                if n2 == 2 and w2 == 2:  # dim
                    size = 0
                    for n3, w3, a3, _ in _fields(d, a2, b2):
                        if n3 == 1 and w3 == 0:
                            size = _signed64(a3)
                    t.dims.append(size)
        elif num == 4 and wire == 2:
            t.content = d[a:b]
        elif num in (5, 6, 7, 10, 11, 13, 16, 17):
            if num == 11:
                _packed(d, 16, wire, a, b, t.values)  # bools as varints
            else:
                _packed(d, num, wire, a, b, t.values)
        elif num == 8 and wire == 2:
            t.strings.append(d[a:b])
    return t


def tensor_scalar(t: _Tensor) -> float | None:
    """The one numeric value of a tensor, or None when it is not one number."""
    if t.size != 1 or t.dtype == DT_STRING:
        return None
    if t.values:
        v = t.values[0]
        if t.dtype == DT_HALF:
            return _half(v)
        if t.dtype == DT_BFLOAT16:
            return _bfloat16(v)
        return float(v)
    dt = _DTYPES.get(t.dtype)
    if t.content and dt is not None:
        arr = np.frombuffer(t.content, dtype=dt)
        return float(arr[0]) if arr.size == 1 else None
    if t.content and t.dtype == DT_BFLOAT16 and len(t.content) == 2:
        return _bfloat16(int.from_bytes(t.content, "little"))
    return None


def _tensor_item(d: bytes, tag: str, tensor: tuple[int, int] | None,
                 plugin: str | None) -> tuple:
    """(kind, tag, value) of a value without simple_value: a scalar tensor (of the
    "scalars" plugin, or 0-d without a plugin), a text, or a kind to count."""
    if tensor is None:
        # metadata alone (e.g. the hparams plugin's session records)
        return (PLUGIN_KINDS.get(plugin or "", plugin or "empty value"), tag, None)
    t = _tensor(d, tensor[0], tensor[1])
    if plugin == "scalars" or (plugin is None and not t.dims):  # one number, or 0-d
        v = tensor_scalar(t)
        if v is not None:
            return (SCALAR, tag, v)
        if plugin == "scalars":
            return (BAD, tag, "scalar tensor that is not one number")
    if plugin == "text" or (plugin is None and t.dtype == DT_STRING):
        return (TEXT, tag, b"".join(t.strings[:1]).decode("utf-8", "replace"))
    return (PLUGIN_KINDS.get(plugin or "", plugin or "tensor"), tag, None)


class Items:
    """Decoded values in arrival order as parallel lists, one entry per summary
    value (or per counted non-summary part of an event): `kind` is SCALAR (value a
    float), TEXT (value the text), BAD (value the reason) or the kind of valid
    data that is not a scalar ("histogram", "image", ..., value None). Flat lists,
    not an object per record, keep a large backlog cheap for the garbage collector."""

    __slots__ = ("kind", "step", "tag", "value", "wall")

    def __init__(self) -> None:
        self.kind: list[str] = []
        self.tag: list[str] = []
        self.value: list[Any] = []
        self.step: list[int] = []
        self.wall: list[float] = []

    def __len__(self) -> int:
        return len(self.kind)


class EventDecoder:
    """Decodes Event records of one file. Keeps what a TF2 writer says only once
    per tag (its plugin), and the tag strings it has seen."""

    __slots__ = ("_tags", "plugins")

    def __init__(self) -> None:
        self.plugins: dict[str, str] = {}
        self._tags: dict[bytes, str] = {}

    def decode(self, d: bytes, start: int, end: int, out: Items) -> None:
        """Append the values of the Event in d[start:end] to `out`. Raises
        DecodeError (or IndexError/struct.error) on malformed data, and then
        appends nothing."""
        # The shape of nearly every record SummaryWriter writes, checked byte by
        # byte: wall_time, a short step, one summary with one value, tag + simple_value:
        # 09 <f64> 10 <step> 2A <n+2> 0A <n> 0A <t> <tag> 15 <f32>, n = t + 7.
        if end - start > 17 and d[start] == 0x09 and d[start + 9] == 0x10:
            i = start + 10
            step = d[i]
            i += 1
            if step >= 0x80:
                step, i = _varint(d, i - 1)
                step = _signed64(step)
            if end - i > 6 and d[i] == 0x2A and d[i + 2] == 0x0A and d[i + 4] == 0x0A:
                t = d[i + 5]
                if (
                    d[i + 1] == t + 9
                    and d[i + 3] == t + 7
                    and t < 0x77
                    and i + t + 11 == end
                    and d[i + 6 + t] == 0x15
                ):
                    raw = d[i + 6 : i + 6 + t]
                    tag = self._tags.get(raw)
                    if tag is None:
                        tag = self._tags[raw] = raw.decode("utf-8", "replace")
                    out.kind.append(SCALAR)
                    out.tag.append(tag)
                    out.value.append(_F32.unpack_from(d, i + 7 + t)[0])
                    out.step.append(step)
                    out.wall.append(_F64.unpack_from(d, start + 1)[0])
                    return
        wall, step, items = self._decode(d, start, end)
        for kind, tag, value in items:
            out.kind.append(kind)
            out.tag.append(tag)
            out.value.append(value)
            out.step.append(step)
            out.wall.append(wall)

    def _decode(self, d: bytes, start: int, end: int) -> tuple[float, int, list[tuple]]:
        """(wall_time, step, [(kind, tag, value)]) of any Event."""
        wall = math.nan
        step = 0
        items: list[tuple] = []
        i = start
        while i < end:
            key = d[i]
            i += 1
            if key == 0x09:  # wall_time
                wall = _F64.unpack_from(d, i)[0]
                i += 8
            elif key == 0x10:  # step
                b = d[i]
                if b < 0x80:
                    step = b
                    i += 1
                else:
                    step, i = _varint(d, i)
                    step = _signed64(step)
            elif key == 0x2A:  # summary
                b = d[i]
                if b < 0x80:
                    ln = b
                    i += 1
                else:
                    ln, i = _varint(d, i)
                j = i + ln
                if j > end:
                    raise DecodeError("summary runs past the event")
                self._summary(d, i, j, items)
                i = j
            else:
                if key >= 0x80:
                    key, i = _varint(d, i - 1)
                num = key >> 3
                i = _skip(d, i, key & 7)
                kind = EVENT_KINDS.get(num)
                if kind is not None:
                    items.append((kind, "", None))
        if i != end:
            raise DecodeError("field runs past the event")
        return wall, step, items

    def _summary(self, d: bytes, i: int, end: int, items: list[tuple]) -> None:
        while i < end:
            key = d[i]
            i += 1
            if key != 0x0A:  # not a value: skip it
                if key >= 0x80:
                    key, i = _varint(d, i - 1)
                i = _skip(d, i, key & 7)
                continue
            b = d[i]
            if b < 0x80:
                ln = b
                i += 1
            else:
                ln, i = _varint(d, i)
            j = i + ln
            if j > end:
                raise DecodeError("value runs past the summary")
            self._value(d, i, j, items)
            i = j
        if i != end:
            raise DecodeError("field runs past the summary")

    def _value(self, d: bytes, i: int, end: int, items: list[tuple]) -> None:
        """Append the (kind, tag, value) of the Summary.Value in d[i:end]: its fields are
        read here (tag, simple_value, a non-scalar oneof field, tensor, plugin), a tensor
        is told apart by `_tensor_item`."""
        raw_tag = b""
        simple: float | None = None
        kind: str | None = None
        tensor: tuple[int, int] | None = None
        plugin: str | None = None
        while i < end:
            key = d[i]
            i += 1
            if key == 0x0A:  # tag
                ln = d[i]
                if ln < 0x80:
                    i += 1
                else:
                    ln, i = _varint(d, i)
                raw_tag = d[i : i + ln]
                i += ln
            elif key == 0x15:  # simple_value
                simple = _F32.unpack_from(d, i)[0]
                i += 4
            else:
                if key >= 0x80:
                    key, i = _varint(d, i - 1)
                num, wire = key >> 3, key & 7
                if wire != 2:
                    i = _skip(d, i, wire)
                    continue
                ln, i = _varint(d, i)
                j = i + ln
                if num == 8:
                    tensor = (i, j)
                elif num == 9:
                    plugin = self._plugin(d, i, j)
                elif num in VALUE_KINDS:
                    kind = VALUE_KINDS[num]
                i = j
        if i != end:
            raise DecodeError("field runs past the value")
        tag = self._tags.get(raw_tag)
        if tag is None:
            tag = self._tags[raw_tag] = raw_tag.decode("utf-8", "replace")
        if plugin is not None:
            self.plugins[tag] = plugin
        if simple is not None:
            items.append((SCALAR, tag, simple))
        elif kind is not None:
            items.append((kind, tag, None))
        else:
            items.append(_tensor_item(d, tag, tensor, self.plugins.get(tag, plugin)))

    @staticmethod
    def _plugin(d: bytes, i: int, end: int) -> str | None:
        """The plugin name in a SummaryMetadata message, if it names one."""
        for num, wire, a, b in _fields(d, i, end):
            if num == 1 and wire == 2:  # plugin_data
                for n2, w2, a2, b2 in _fields(d, a, b):
                    if n2 == 1 and w2 == 2:
                        return d[a2:b2].decode("utf-8", "replace") or None
        return None
