"""Trackio's system metrics and alerts, read alike by the local and the remote source.

Trackio 0.43 keeps them in two tables of the project database:

    system_metrics(id INTEGER PRIMARY KEY AUTOINCREMENT, run_id, timestamp TEXT,
                   run_name, metrics TEXT|BLOB (JSON), log_id, space_id)
    alerts(id INTEGER PRIMARY KEY AUTOINCREMENT, run_id, timestamp TEXT, run_name,
           title TEXT, text TEXT, level TEXT ('info'|'warn'|'error'), step INTEGER, alert_id)

`trackio.init(auto_log_gpu=True)` (NVIDIA, through NVML) and `trackio.log_gpu()`
write one system row per sample with keys `gpu/<i>/utilization` (percent),
`gpu/<i>/allocated_memory` and `gpu/<i>/total_memory` (GiB), `gpu/<i>/power` (W),
`gpu/<i>/temp` (deg C) and more; `auto_log_cpu=True` / `trackio.log_cpu()` write
separate rows with `cpu/utilization` (percent) and `memory/used`, `memory/total`
(GiB). `trackio.log_system(dict)` writes any dict. Each row becomes one
`SystemSample` (memory in MiB); a row with none of these keys (disk or network
only) becomes none. Rows have no step: they are dated by their timestamp.

`trackio.alert(title, text, level)` stores Trackio's own step (the highest step
logged so far), which counts every `trackio.log` call; a Trainer run's x axis
is `train/global_step`. The alert is placed where the source places the run's
metrics row logged just before it: the alert query takes that row's
`train/global_step`, else its step. Which row that was is not stored; the query
takes the first row at the alert's step (that row existed when the alert was
raised: it set the step), else the newest row below it. Rows at the alert's
step logged after it are only those with an explicit step, like TRL's
profiling rows; for plain `trackio.log` calls (one row per step) the choice is
exact, for a TRL run it is the Trainer's row the alert followed. An alert
becomes `Marker(run, "alert", step, detail)` with detail `title`, `text`,
`level`, `trackio_step` and `wall_time`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from carl_tui.events import GpuSample, Marker, RunRef, SystemSample
from carl_tui.metric_names import valid_number
from carl_tui.sources.rows import clean_text, iso_to_epoch
from carl_tui.sources.unused_input import UnusedInput

X_KEY = "train/global_step"  # the Trainer's step in a row's metrics (TRL's report_to)
GIB_TO_MIB = 1024.0
MAX_GPU_INDEX = 1023
ALERT_LEVELS = ("info", "warn", "error")
_GPU_KEY = re.compile(r"gpu/(\d{1,4})/([a-z_]+)")
# Trackio's per-GPU key -> (GpuSample field, factor to our unit)
_GPU_FIELDS = {
    "utilization": ("utilization", 1.0),
    "allocated_memory": ("memory_used_mb", GIB_TO_MIB),
    "total_memory": ("memory_total_mb", GIB_TO_MIB),
    "power": ("power_w", 1.0),
    "temp": ("temperature_c", 1.0),
}


def load_json(blob: Any) -> dict | None:
    """A metrics cell (JSON text or bytes, or an already-decoded dict) as a dict, else None."""
    if isinstance(blob, dict):
        return blob
    if not isinstance(blob, (str, bytes, bytearray, memoryview)):
        return None
    try:
        obj = orjson.loads(bytes(blob) if isinstance(blob, memoryview) else blob)
    except orjson.JSONDecodeError:
        return None
    return obj if type(obj) is dict else None



def system_event(ref: RunRef, blob: Any, stamp: Any, unused_input: UnusedInput,
                 example: object = None) -> SystemSample | None:
    """A system_metrics row (its metrics cell and timestamp) as a sample; a cell that is
    not a JSON object, and values that are not finite, are counted in `unused_input` (the cell
    shown as `example`, itself by default)."""
    metrics = load_json(blob)
    if metrics is None:
        unused_input.skip("system metrics not a JSON object", blob if example is None else example)
        return None
    sample, bad = system_sample(ref, metrics, iso_to_epoch(stamp))
    unused_input.skip("system value not a finite number", ref.run_id, bad)
    return sample

def system_sample(
    run: RunRef, metrics: Mapping[str, Any], wall_time: float | None
) -> tuple[SystemSample | None, int]:
    """One system row -> (SystemSample or None when it holds nothing shown, the number
    of shown fields whose value was not a finite number)."""
    bad = 0

    def num(value: Any) -> float | None:
        nonlocal bad
        v = valid_number(value)
        if v is None and value is not None:
            bad += 1
        return v

    gpus: dict[int, dict[str, float]] = {}
    for key, value in metrics.items():
        m = _GPU_KEY.fullmatch(key)
        if m is None or m.group(2) not in _GPU_FIELDS:
            continue
        index = int(m.group(1))
        if index > MAX_GPU_INDEX:
            continue
        v = num(value)
        if v is None:
            continue
        field, factor = _GPU_FIELDS[m.group(2)]
        gpus.setdefault(index, {})[field] = v * factor
    cpu = num(metrics.get("cpu/utilization"))
    used = num(metrics.get("memory/used"))
    total = num(metrics.get("memory/total"))
    if not gpus and cpu is None and used is None and total is None:
        return None, bad
    sample = SystemSample(
        run=run,
        step=None,
        wall_time=wall_time,
        gpus=tuple(GpuSample(i, **gpus[i]) for i in sorted(gpus)),
        cpu_percent=cpu,
        memory_mb=used * GIB_TO_MIB if used is not None else None,
        memory_total_mb=total * GIB_TO_MIB if total is not None else None,
    )
    return sample, bad


def system_sql(key: str, last_id: int, limit: int, where: str = "") -> str:
    """New system rows after `last_id`, oldest first. `key` is the table's run column."""
    return (
        f"SELECT id, {key} AS run_id, run_name, timestamp, metrics FROM system_metrics "
        f"WHERE id > {int(last_id)}{where} ORDER BY id LIMIT {int(limit)}"
    )


def alerts_sql(key: str, metrics_key: str, last_id: int, limit: int, where: str = "") -> str:
    """New alerts after `last_id`, each with the metrics row that places it on the run's
    x axis (see the module doc: the first row at its Trackio step, else the newest
    below; two index look-ups per alert). `key` / `metrics_key`: the run column of the
    alerts / metrics table; `where` filters alerts by run."""
    k = f"m.{metrics_key} = alerts.{key}"
    first_at = f"(SELECT MIN(m.id) FROM metrics AS m WHERE {k} AND m.step = alerts.step)"
    newest_below = (
        f"(SELECT m.id FROM metrics AS m WHERE {k} AND m.step < alerts.step "
        f"ORDER BY m.step DESC, m.id DESC LIMIT 1)"
    )
    return (
        f"SELECT id, {key} AS run_id, run_name, title, text, level, step, timestamp, "
        f"(SELECT r.metrics FROM metrics AS r WHERE r.id = COALESCE({first_at}, {newest_below})) "
        f"AS at_metrics "
        f"FROM alerts WHERE id > {int(last_id)}{where} ORDER BY id LIMIT {int(limit)}"
    )


_EXTRA_COLUMNS = ("id", "run_id", "run_name", "timestamp", "metrics", "title", "text", "level",
                  "step", "at_metrics")


def extras_sql(
    *,
    system: tuple[str, int, int, str] | None,
    alerts: tuple[str, str, int, int, str] | None,
) -> str:
    """New system rows and alerts in one query (one round trip to a server): a `kind`
    column ('system' or 'alert') and the union of both tables' columns, NULL where a
    table has none. `system`: (run column, last id, limit, run filter); `alerts`:
    (run column, metrics run column, last id, limit, run filter)."""
    parts = []
    if system is not None:
        have = {"id", "run_id", "run_name", "timestamp", "metrics"}
        cols = ", ".join(c if c in have else f"NULL AS {c}" for c in _EXTRA_COLUMNS)
        parts.append(f"SELECT 'system' AS kind, {cols} FROM ({system_sql(*system)})")
    if alerts is not None:
        cols = ", ".join("NULL AS metrics" if c == "metrics" else c for c in _EXTRA_COLUMNS)
        parts.append(f"SELECT 'alert' AS kind, {cols} FROM ({alerts_sql(*alerts)})")
    if not parts:
        raise ValueError("extras_sql needs system or alerts")
    return " UNION ALL ".join(parts)


def _int_step(value: Any) -> int | None:
    v = valid_number(value)
    if v is None or v < 0 or v != int(v):
        return None
    return int(v)


def alert_marker(
    run: RunRef,
    *,
    title: Any,
    text: Any,
    level: Any,
    step: Any,
    timestamp: Any,
    at_metrics: Any,
    fallback_step: int | None = None,
) -> Marker:
    """One alerts row -> Marker(kind="alert"). The step is the run's x-axis step at the
    alert (see the module doc); with no step at all, `fallback_step` (the newest step
    the source saw for the run), else 0, and `detail["step_known"]` is False."""
    trackio_step = _int_step(step)
    row = load_json(at_metrics) if at_metrics is not None else None
    x = _int_step(row.get(X_KEY)) if row else None
    known = True
    if x is None:
        x = trackio_step
    if x is None:
        x, known = (fallback_step if fallback_step is not None else 0), False
    lvl = str(level).strip().lower() if level is not None else "warn"
    detail = {
        "title": clean_text(str(title)) if title is not None else "",
        "text": clean_text(str(text)) if text is not None else "",
        "level": lvl if lvl in ALERT_LEVELS else clean_text(lvl[:20]),
        "trackio_step": trackio_step,
        "wall_time": iso_to_epoch(timestamp),
    }
    if not known:
        detail["step_known"] = False
    return Marker(run, "alert", x, detail)


def is_missing_table(message: str) -> bool:
    return "no such table" in message.lower()

