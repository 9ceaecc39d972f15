"""Writing the JSONL stream the dashboard reads, with nothing heavy imported.

`StreamWriter` appends whole lines (one `os.write` each, on a file opened for
appending), so a reader tailing the file never sees a torn line. This module
imports only the standard library: a training process can open its stream and
say what it is doing before torch and transformers are loaded (the demo writes
its first lines within a fraction of a second). `CarlCallback`
(`training/callback.py`) writes through the same class.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def finite(value: Any) -> float | int | None:
    """`value` as an int or a finite float; None for anything else (bools included)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    try:  # numpy / torch scalars
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def json_safe(obj: Any, depth: int = 0) -> Any:
    """A JSON-encodable copy of `obj` (non-finite floats and unknown types dropped)."""
    if obj is None or isinstance(obj, (str, bool)):
        return obj
    if isinstance(obj, (int, float)):
        return finite(obj)
    if depth < 4 and isinstance(obj, Mapping):
        out = {}
        for k, v in obj.items():
            sv = json_safe(v, depth + 1)
            if sv is not None:
                out[str(k)] = sv
        return out
    if depth < 4 and isinstance(obj, (list, tuple)):
        return [x for x in (json_safe(v, depth + 1) for v in obj) if x is not None]
    return None


def phi_of(entropy: float, vocab_size: int) -> float:
    """phi = 1 - entropy / ln V, clipped to [0, 1]."""
    return min(1.0, max(0.0, 1.0 - float(entropy) / math.log(vocab_size)))


class StreamWriter:
    """Append whole JSON lines to a file; safe to share between threads."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()
        self.lines = 0  # lines written by this writer

    def write(self, obj: Mapping[str, Any]) -> None:
        data = (json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n").encode()
        with self._lock:
            if self._fd is None:
                return
            view = memoryview(data)
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
            self.lines += 1

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
