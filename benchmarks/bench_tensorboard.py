"""Reading TensorBoard event files: our reader against the candidates, on the same file.

Data: an event file written by torch's real `SummaryWriter`, 200,000 scalar
values (8 TRL-shaped tags a step, one event per value as SummaryWriter writes
them), then appended to in pieces of 1,000 values while the readers follow.

Rows:
- ours (`TensorBoardSource`, polled until caught up) against TensorBoard's own
  `EventAccumulator` (the reference; without TensorFlow it frames records and
  checks CRCs in Python), reading the whole file, and one poll / one `Reload()`
  after 1,000 new values were flushed (median of 5);
- the other candidates on the whole file: tensorboardX's generated protobuf
  classes (`Event.FromString`) with our framing, tbparse's `SummaryReader`;
- CRC32C of every record of the file: google-crc32c (C extension), crc32c (C
  extension), our numpy fallback, a table-driven Python loop;
- weight: install size (the distribution and what it pulls in beyond numpy and
  protobuf) and import time in a fresh interpreter.

Candidates that are not installed are left out with a note.
"""

from __future__ import annotations

import importlib.util
import math
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import numpy as np

from benchmarks.common import Row, best_time
from carl_tui.sources import tfevents as tfe
from carl_tui.sources.tensorboard import TensorBoardSource, _Run
from carl_tui.sources.unused_input import UnusedInput

TAGS = (
    "train/loss", "train/reward", "train/entropy", "train/kl", "train/learning_rate",
    "train/grad_norm", "train/rewards/accuracy_reward/mean", "train/completions/mean_length",
)  # fmt: skip
N_VALUES = 200_000
N_NEW = 1_000


def _have(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


class Writer:
    """torch's SummaryWriter writing TRL-shaped scalars, step after step."""

    def __init__(self, logdir: Path):
        from torch.utils.tensorboard import SummaryWriter

        self.w = SummaryWriter(str(logdir), max_queue=1000, flush_secs=3600)
        self.rng = random.Random(0)
        self.i = 0

    def write(self, n: int) -> None:
        rng, w = self.rng, self.w
        for _ in range(n):
            step, k = divmod(self.i, len(TAGS))
            w.add_scalar(TAGS[k], math.exp(-step / 5000) * (1 + k) + rng.gauss(0, 0.05), step)
            self.i += 1
        w.flush()

    def close(self) -> None:
        self.w.close()


def ours_read(logdir: Path) -> int:
    src = TensorBoardSource(logdir)
    n = 0
    while True:
        n += sum(int((~np.isnan(c)).sum()) for e in src.poll() for c in getattr(e, "columns",
                                                                              {}).values())
        if src.interval > 0:
            return n


def accumulator(logdir: Path):
    from tensorboard.backend.event_processing import event_accumulator as ea

    return ea.EventAccumulator(str(logdir), size_guidance={ea.SCALARS: 0})


def accumulator_read(acc) -> int:
    acc.Reload()
    return sum(len(acc.Scalars(t)) for t in acc.Tags()["scalars"])


def tensorboardx_read(path: Path) -> int:
    """Our framing and CRC checks, tensorboardX's protobuf classes for the records."""
    from tensorboardX.proto.event_pb2 import Event

    buf = path.read_bytes()
    scan = tfe.scan_records(buf, at_eof=True, file_start=True)
    items = tfe.Items()
    for s, e in zip(scan.starts, scan.ends):
        ev = Event.FromString(buf[s:e])
        for v in ev.summary.value:
            if v.WhichOneof("value") == "simple_value":
                items.kind.append(tfe.SCALAR)
                items.tag.append(v.tag)
                items.value.append(v.simple_value)
                items.step.append(ev.step)
                items.wall.append(ev.wall_time)
    batches = _Run("bench", "bench", path.parent).events(items, UnusedInput())
    return sum(int((~np.isnan(c)).sum()) for b in batches for c in b.columns.values())


def tbparse_read(logdir: Path) -> int:
    from tbparse import SummaryReader

    return len(SummaryReader(str(logdir)).scalars)


def _records(path: Path) -> tuple[bytes, list[int], list[int]]:
    buf = path.read_bytes()
    scan = tfe.scan_records(buf, at_eof=True, file_start=True)
    return buf, scan.starts, scan.ends


def crc_rows(path: Path) -> list[Row]:
    buf, starts, ends = _records(path)
    slices = [buf[s:e] for s, e in zip(starts, ends)]
    st = np.asarray(starts, dtype=np.int64)
    ln = np.asarray(ends, dtype=np.int64) - st
    arr = np.frombuffer(buf, dtype=np.uint8)
    want = [tfe._crc_python(b) for b in slices]
    ref = best_time(lambda: [tfe._crc_python(b) for b in slices], repeat=1, warmup=0)
    out: list[Row] = []
    cands: list[tuple[str, Callable[[], list[int]]]] = []
    if _have("google_crc32c"):
        import google_crc32c

        cands.append((f"google-crc32c ({google_crc32c.implementation})",
                      lambda: list(map(google_crc32c.value, slices))))
    if _have("crc32c"):
        import crc32c

        cands.append(("crc32c", lambda: list(map(crc32c.crc32c, slices))))
    cands.append(("numpy (our fallback)", lambda: tfe._crc_lanes(arr, st, ln).tolist()))
    for name, fn in cands:
        assert fn() == want, name
        out.append(Row(f"tensorboard: crc32c {len(slices) // 1000}k records, {name}",
                       best_time(fn, repeat=3, warmup=1), ref,
                       note="ref: table-driven Python loop"))
    return out


def import_time(module: str, repeat: int = 3) -> float:
    code = f"import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    times = []
    for _ in range(repeat):
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True)
        times.append(float(res.stdout.strip().splitlines()[-1]))
    return min(times)


def _requires(dist: metadata.Distribution) -> list[str]:
    out = []
    for req in dist.requires or []:
        if "extra ==" in req:
            continue
        if ";" in req:  # an environment marker that does not hold here is left out
            from packaging.requirements import Requirement

            if not Requirement(req).marker.evaluate():
                continue
        name = req.split(";")[0].strip()
        for sep in "<>=!~[ (":
            name = name.split(sep)[0]
        out.append(name)
    return out


def install_size(name: str, exclude: frozenset[str] = frozenset({"numpy", "protobuf"})) -> float:
    """MB on disk of a distribution and everything it requires (transitively), less `exclude`."""
    seen: set[str] = set()
    todo = [name]
    total = 0
    while todo:
        n = todo.pop().lower().replace("_", "-")
        if n in seen or n in exclude:
            continue
        seen.add(n)
        try:
            dist = metadata.distribution(n)
        except metadata.PackageNotFoundError:
            continue
        for f in dist.files or []:
            p = Path(dist.locate_file(f))
            if p.is_file():
                total += p.stat().st_size
        todo.extend(_requires(dist))
    return total / 1e6


def _module_size() -> float:
    here = Path(tfe.__file__).parent
    return sum((here / f).stat().st_size for f in ("tensorboard.py", "tfevents.py")) / 1e6


def run() -> list[Row]:
    if not _have("tensorboard"):
        return [Row("tensorboard: skipped (pip install tensorboard)", 0.0, note="needs torch's "
                    "SummaryWriter and the reference EventAccumulator")]
    out: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="carl-bench-tb-") as tmp:
        logdir = Path(tmp) / "run"
        writer = Writer(logdir)
        writer.write(N_VALUES)
        (path,) = logdir.glob("*tfevents*")
        size = path.stat().st_size / 1e6

        # whole file
        assert ours_read(logdir) == N_VALUES
        ours = best_time(lambda: ours_read(logdir), repeat=3, warmup=0)
        acc_n = []
        ref = best_time(lambda: acc_n.append(accumulator_read(accumulator(logdir))), repeat=1,
                        warmup=0)
        assert acc_n == [N_VALUES]
        out.append(Row(f"tensorboard: read {N_VALUES // 1000}k-value file whole", ours, ref,
                       target="< 1 s", note=f"{size:.1f} MB; ref: EventAccumulator; "
                       f"crc: {tfe.CRC_IMPLEMENTATION}"))
        saved = tfe._C_CRC
        tfe._C_CRC = None
        try:
            fallback = best_time(lambda: ours_read(logdir), repeat=3, warmup=0)
        finally:
            tfe._C_CRC = saved
        out.append(Row("tensorboard: same, numpy CRC (no google-crc32c)", fallback, ref,
                       target="< 1 s", note="ref: EventAccumulator"))

        # following: 1,000 new values a poll
        src = TensorBoardSource(logdir)
        while src.poll() or src.interval == 0:
            pass
        acc = accumulator(logdir)
        accumulator_read(acc)
        ours_t, ref_t = [], []
        for _ in range(5):
            writer.write(N_NEW)
            t0 = time.perf_counter()
            got = src.poll()
            ours_t.append(time.perf_counter() - t0)
            n = sum(int((~np.isnan(c)).sum()) for e in got for c in e.columns.values())
            assert n == N_NEW, n
            t0 = time.perf_counter()
            acc.Reload()
            ref_t.append(time.perf_counter() - t0)
        writer.close()
        out.append(Row(f"tensorboard: poll with {N_NEW:,} new values", statistics.median(ours_t),
                       statistics.median(ref_t), target="< 20 ms",
                       note="median of 5; ref: EventAccumulator.Reload()"))

        # the other candidates on the same whole file
        if _have("tensorboardX"):
            assert tensorboardx_read(path) == N_VALUES + 5 * N_NEW
            t = best_time(lambda: tensorboardx_read(path), repeat=2, warmup=0)
            out.append(Row("tensorboard: tensorboardX protobuf + our framing", t, ref,
                           note=f"{N_VALUES + 5 * N_NEW:,} values; ref: EventAccumulator"))
        if _have("tbparse"):
            t = best_time(lambda: tbparse_read(logdir), repeat=1, warmup=0)
            out.append(Row("tensorboard: tbparse SummaryReader", t, ref,
                           note=f"{N_VALUES + 5 * N_NEW:,} values; ref: EventAccumulator"))
        out.extend(crc_rows(path))

    # weight
    ref_imp = import_time("tensorboard.backend.event_processing.event_accumulator")
    out.append(Row("tensorboard: import, our source module",
                   import_time("carl_tui.sources.tensorboard"), ref_imp,
                   note="fresh interpreter; ref: EventAccumulator's module"))
    for label, module in (("tensorboardX protobuf", "tensorboardX.proto.event_pb2"),
                          ("tbparse", "tbparse"), ("google_crc32c", "google_crc32c"),
                          ("crc32c", "crc32c")):
        if _have(module.split(".")[0]):
            out.append(Row(f"tensorboard: import, {label}", import_time(module), ref_imp,
                           note="ref: EventAccumulator's module"))
    ref_size = install_size("tensorboard")
    out.append(Row("tensorboard: install, our reader (2 modules)", _module_size(), ref_size,
                   unit="MB", note="needs numpy only; ref: tensorboard + its requirements"))
    for dist in ("google-crc32c", "crc32c", "tensorboardX", "tbparse"):
        try:
            metadata.distribution(dist)
        except metadata.PackageNotFoundError:
            continue
        extra = "" if dist != "tbparse" else " (pandas, tensorboard)"
        out.append(Row(f"tensorboard: install, {dist}{extra}", install_size(dist),
                       ref_size, unit="MB", note="with requirements beyond numpy, protobuf"))
    return out


if __name__ == "__main__":
    from benchmarks.common import HEADER

    print(HEADER)
    for row in run():
        print(row.format(), flush=True)
