"""Hostile JSONL files and what a reader must make of them.

Each case is the file's bytes, the points that must come through (step and
metric values, in order) and the skips by reason. `python make_hostile.py`
writes the small files next to this script; the big one (a 10 MB line) is
only built at test time (`big_line_case`). Deterministic: same bytes every
run.
"""

from __future__ import annotations

import json
import math
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).parent


@dataclass
class Case:
    data: bytes
    points: list[tuple[int, dict[str, float]]]  # (step, {metric: value}) that must come through
    skips: dict[str, int] = field(default_factory=dict)  # reason -> count
    note: str = ""


class Stream:
    """Builds a realistic run: loss and entropy decay with noise, accuracy rises."""

    def __init__(self, seed: int, newline: bytes = b"\n"):
        self.rnd = random.Random(seed)
        self.newline = newline
        self.parts: list[bytes] = []
        self.points: list[tuple[int, dict[str, float]]] = []
        self.skips: dict[str, int] = {}

    def metrics(self, step: int) -> dict[str, float]:
        r = self.rnd
        return {
            "loss": round(2.3 * math.exp(-step / 40) + 0.1 + r.gauss(0, 0.03), 6),
            "entropy": round(2.9 * math.exp(-step / 55) + 0.15 + r.gauss(0, 0.04), 6),
            "mean_token_accuracy": round(min(0.999, 0.05 + step / 60 + r.gauss(0, 0.01)), 6),
            "learning_rate": 5e-5 * (1 - step / 400),
        }

    def good(self, step: int, *, prefix: bytes = b"") -> dict[str, float]:
        values = self.metrics(step)
        obj = {"step": step, "time": 1_732_350_000.0 + 0.41 * step, **values}
        self.raw(prefix + json.dumps(obj).encode())
        self.points.append((step, values))
        return values

    def raw(self, line: bytes) -> None:
        self.parts.append(line + self.newline)

    def bad(self, line: bytes, reason: str) -> None:
        self.raw(line)
        self.skips[reason] = self.skips.get(reason, 0) + 1

    def case(self, note: str = "") -> Case:
        return Case(b"".join(self.parts), self.points, self.skips, note)


def nul_bytes() -> Case:
    s = Stream(1)
    for i in range(5):
        s.good(i)
    s.bad(b'{"step": 5, "lo\x00ss": 0.5}', "not UTF-8")
    # A hole of NULs (a rotation truncated the file under a writer), then a line.
    s.good(6, prefix=b"\x00" * 4000)
    for i in range(7, 10):
        s.good(i)
    return s.case("NUL inside a line: skipped; NULs before a line: removed")


def utf16(encoding: str) -> Case:
    s = Stream(2)
    text = "".join(json.dumps({"step": i, **s.metrics(i)}) + "\n" for i in range(10))
    bom = b"\xff\xfe" if encoding == "utf-16-le" else b""
    return Case(bom + text.encode(encoding), [], {"not UTF-8": 10}, f"{encoding}: rejected")


def bom() -> Case:
    s = Stream(3)
    for i in range(5):
        s.good(i, prefix=b"\xef\xbb\xbf" if i == 0 else b"")
    for i in range(5, 10):  # a second file with its own BOM, appended
        s.good(i, prefix=b"\xef\xbb\xbf" if i == 5 else b"")
    return s.case("UTF-8 byte order marks at line starts are accepted")


def crlf() -> Case:
    s = Stream(4, newline=b"\r\n")
    s.raw(json.dumps({"event": "meta", "run_id": "crlf-run", "vocab_size": 32}).encode())
    for i in range(12):
        s.good(i)
        if i == 6:
            s.raw(b"")  # a blank CRLF line
    return s.case("CRLF line ends")


def binary_junk() -> Case:
    s = Stream(5)
    rnd = random.Random(55)
    for i in range(30):
        s.good(i)
        if i % 3 == 0:
            junk = bytes(b for b in rnd.randbytes(rnd.randint(8, 300)) if b != 0x0A)
            s.bad(junk + b"\xff\xfe\x80", "not UTF-8")  # always invalid UTF-8
        if i % 6 == 1:
            text = "".join(rnd.choice("abcdef #=:,[]{}") for _ in range(rnd.randint(3, 80)))
            s.bad(("#" + text).encode(), "not JSON")
    return s.case("random bytes between good lines")


def deep_nesting() -> Case:
    s = Stream(6)
    s.raw(json.dumps({"event": "meta", "run_id": "deep", "config": _nest(200)}).encode())
    s.good(0)
    s.bad(b'{"step": 1, "loss": ' + b"[" * 20_000 + b"]" * 20_000 + b"}", "not JSON")
    values = s.metrics(2)
    s.raw(json.dumps({"step": 2, **values, "hist": _nest(500)}).encode())
    s.points.append((2, values))
    s.skips["value not a number"] = 1  # hist
    deep = b"[" * 3000 + b"1" + b"]" * 3000  # deeper than either JSON reader goes
    s.bad(b'{"event": "marker", "kind": "k", "step": 2, "d": ' + deep + b"}", "not JSON")
    s.good(3)
    return s.case("nesting: 20,000 deep is not JSON; 500 deep is a skipped value")


def _nest(depth: int):
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def huge_numbers() -> Case:
    s = Stream(7)
    s.good(0)
    s.raw(b'{"step": 1, "loss": 1e400, "entropy": 1.25}')
    s.points.append((1, {"entropy": 1.25}))
    s.skips["value not a finite number"] = 1
    s.raw(b'{"step": 2, "loss": 123456789012345678901234567890}')
    s.points.append((2, {"loss": 1.2345678901234568e29}))
    s.raw(b'{"step": 3, "loss": 1' + b"0" * 400 + b', "entropy": 1e-320}')
    s.points.append((3, {"entropy": 1e-320}))
    s.skips["value not a number"] = 1  # an integer too large for a float
    s.raw(b'{"step": 4, "loss": -1.7976931348623157e308}')
    s.points.append((4, {"loss": -1.7976931348623157e308}))
    s.bad(b'{"step": 5, "loss": 1' + b"0" * 5000 + b"}", "not JSON")  # beyond int digits
    s.bad(b'{"step": 4611686018427387904, "loss": 0.3}', "invalid step")  # 2**62
    s.bad(b'{"step": 18446744073709551616, "loss": 0.3}', "invalid step")  # 2**64
    s.bad(b'{"step": -3, "loss": 0.3}', "negative step")
    s.raw(b'{"step": 4611686018427387903.0, "loss": 0.3}')  # 2**62 - 1 as a float is 2**62
    s.skips["invalid step"] += 1
    s.good(6)
    return s.case("numbers at and beyond the edges")


def duplicate_keys() -> Case:
    s = Stream(8)
    s.good(0)
    s.raw(b'{"step": 1, "loss": 0.5, "loss": 0.7}')
    s.points.append((1, {"loss": 0.7}))
    s.raw(b'{"step": 2, "step": 3, "loss": 0.6}')
    s.points.append((3, {"loss": 0.6}))
    s.raw(b'{"step": 4, "loss": 0.4, "train/loss": 0.45}')
    s.points.append((4, {"loss": 0.45}))
    s.good(5)
    return s.case("duplicate keys: the last one wins")


def invalid_steps() -> Case:
    s = Stream(9)
    bad = [(b"NaN", "invalid step"), (b"true", "invalid step"), (b'"nine"', "invalid step"),
           (b"10.5", "invalid step"), (b'{"a": 1}', "invalid step"), (b"[3]", "invalid step"),
           (b"null", "invalid step"), (b"-5", "negative step"), (b"Infinity", "invalid step")]
    for i in range(10):
        s.good(i)
        if i < len(bad):
            value, reason = bad[i]
            s.bad(b'{"step": ' + value + b', "loss": 0.25}', reason)
    values = s.metrics(10)
    s.raw(json.dumps(values).encode())  # no step key: previous + 1
    s.points.append((10, values))
    return s.case("invalid steps skip the line; a line without a step continues")


def not_objects() -> Case:
    s = Stream(10)
    for i, line in enumerate([b"null", b"[]", b"3", b'"text"', b"true", b"[{\"step\": 1}]"]):
        s.good(i)
        s.bad(line, "not an object")
    return s.case("JSON that is not an object")


def events() -> Case:
    s = Stream(11)
    s.good(0)
    s.bad(b'{"event": "bogus"}', "unknown event")
    s.bad(b'{"event": 5}', "unknown event")
    s.bad(b'{"event": "marker", "kind": "phase", "step": "x"}', "invalid step")
    s.bad(b'{"event": "marker", "kind": "phase", "step": -1}', "negative step")
    s.bad(b'{"event": "marker", "step": 1}', "marker without kind")
    s.bad(b'{"event": "log", "text": ["a"]}', "log without text")
    s.raw(b'{"event": "log", "text": "title \\u001b]0;pwned\\u0007 done"}')
    s.good(1)
    s.raw(b'{"step": 2, "\\u001b[31mloss": 0.5, "": 0.1, "entropy": 1.5}')
    s.points.append((2, {"entropy": 1.5}))
    s.skips["invalid metric name"] = 2
    s.good(3)
    return s.case("events, markers, logs; control characters in names and text")


def lone_surrogate() -> Case:
    s = Stream(12)
    s.good(0)
    s.bad(b'{"step": 1, "loss": 0.5, "tag": "\\ud800"}', "not UTF-8")
    s.raw(b'{"step": 2, "loss": 0.5, "tag": "\\ud83d\\ude00"}')  # a valid pair
    s.points.append((2, {"loss": 0.5}))
    s.skips["value not a number"] = 1
    s.good(3)
    return s.case("a lone surrogate escape cannot be UTF-8")


def no_final_newline() -> Case:
    s = Stream(13)
    for i in range(4):
        s.good(i)
    values = s.metrics(4)
    s.parts.append(json.dumps({"step": 4, **values}).encode())  # no newline: still being written
    return s.case("the last line waits for its newline")


def empty() -> Case:
    return Case(b"", [], {}, "an empty file")


def blank() -> Case:
    return Case(b"\n\n   \n\t\r\n\n", [], {}, "blank lines only")


def many_keys() -> Case:
    rnd = random.Random(14)
    values = {f"layer{i}/grad_norm": round(rnd.lognormvariate(0, 1), 6) for i in range(1000)}
    line = json.dumps({"step": 0, **values}).encode() + b"\n"
    return Case(line, [(0, values)], {}, "1000 metrics in one line")


CASES = {
    "nul_bytes.jsonl": nul_bytes,
    "utf16le_bom.jsonl": lambda: utf16("utf-16-le"),
    "utf16be.jsonl": lambda: utf16("utf-16-be"),
    "bom.jsonl": bom,
    "crlf.jsonl": crlf,
    "binary_junk.jsonl": binary_junk,
    "deep_nesting.jsonl": deep_nesting,
    "huge_numbers.jsonl": huge_numbers,
    "duplicate_keys.jsonl": duplicate_keys,
    "invalid_steps.jsonl": invalid_steps,
    "not_objects.jsonl": not_objects,
    "events.jsonl": events,
    "lone_surrogate.jsonl": lone_surrogate,
    "no_final_newline.jsonl": no_final_newline,
    "empty.jsonl": empty,
    "blank.jsonl": blank,
    "many_keys.jsonl": many_keys,
}


def big_line_case(size: int = 10 << 20) -> Case:
    """One 10 MB line (a huge string value) between good lines."""
    s = Stream(15)
    s.good(0)
    values = s.metrics(1)
    head = json.dumps({"step": 1, **values})[:-1].encode()
    s.raw(head + b', "note": "' + b"x" * size + b'"}')
    s.points.append((1, values))
    s.skips["value not a number"] = 1
    s.good(2)
    return s.case("a 10 MB line")


def write(folder: Path = HERE) -> None:
    for name, make in CASES.items():
        (folder / name).write_bytes(make().data)


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
