"""Per-run system state: the newest machine sample and a bounded series per GPU.

Fed by `SystemSample` events (Trackio's system metrics, a job's metrics
stream). Trackio logs GPU rows and CPU rows apart, so the view keeps the
newest value of each part: the GPUs of the newest sample that had GPUs, the
CPU and RAM of the newest that had them. Each GPU keeps its last `points`
samples of utilization, memory and power by wall time (system samples have
no step). Memory use is bounded: at most `MAX_GPUS` GPUs, `points` samples each.
The job bar's totals (`JobUsage`) are read from the view: no event of their own.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from carl_tui.events import GpuSample, SystemSample

SERIES_POINTS = 600  # per GPU: 10 minutes at one sample a second
MAX_GPUS = 64


@dataclass(frozen=True)
class GpuView:
    index: int
    latest: GpuSample
    updated_at: float | None  # wall time of its newest sample
    times: np.ndarray  # wall time of each sample (NaN = unknown), oldest first
    utilization: np.ndarray  # percent, NaN where not reported
    memory_used_mb: np.ndarray
    power_w: np.ndarray


@dataclass(frozen=True, slots=True)
class JobUsage:
    """The totals the job bar shows, from the newest machine samples: mean utilization
    of the GPUs, their memory in use together (MiB), CPU percent and RAM in use (MiB);
    None where no sample said."""

    cpu_percent: float | None = None
    memory_mb: float | None = None
    gpu_percent: float | None = None
    gpu_memory_mb: float | None = None


@dataclass(frozen=True)
class SystemView:
    latest: SystemSample  # the newest sample as it came
    gpus: tuple[GpuView, ...]  # by index
    cpu_percent: float | None  # newest known
    memory_mb: float | None
    memory_total_mb: float | None
    samples: int  # samples received in the whole run
    updated_at: float | None  # wall time of the newest sample

    @property
    def usage(self) -> JobUsage:
        utils = [g.latest.utilization for g in self.gpus if g.latest.utilization is not None]
        mems = [g.latest.memory_used_mb for g in self.gpus
                if g.latest.memory_used_mb is not None]
        return JobUsage(
            cpu_percent=self.cpu_percent,
            memory_mb=self.memory_mb,
            gpu_percent=sum(utils) / len(utils) if utils else None,
            gpu_memory_mb=sum(mems) if mems else None,
        )


def _nan(x: float | None) -> float:
    return math.nan if x is None else float(x)


class _GpuTrack:
    __slots__ = ("latest", "points", "updated_at")

    def __init__(self, points: int):
        self.latest: GpuSample | None = None
        self.updated_at: float | None = None
        self.points: deque[tuple[float, float, float, float]] = deque(maxlen=points)

    def add(self, gpu: GpuSample, wall_time: float | None) -> None:
        self.latest = gpu
        self.updated_at = wall_time
        self.points.append(
            (_nan(wall_time), _nan(gpu.utilization), _nan(gpu.memory_used_mb), _nan(gpu.power_w))
        )

    def view(self, index: int) -> GpuView:
        arr = np.array(self.points, dtype=np.float64).reshape(-1, 4)
        assert self.latest is not None
        return GpuView(
            index=index,
            latest=self.latest,
            updated_at=self.updated_at,
            times=arr[:, 0].copy(),
            utilization=arr[:, 1].copy(),
            memory_used_mb=arr[:, 2].copy(),
            power_w=arr[:, 3].copy(),
        )


class SystemTrack:
    def __init__(self, points: int = SERIES_POINTS):
        self._points = max(1, points)
        self._gpus: dict[int, _GpuTrack] = {}
        self.latest: SystemSample | None = None
        self.cpu_percent: float | None = None
        self.memory_mb: float | None = None
        self.memory_total_mb: float | None = None
        self.samples = 0

    def add(self, sample: SystemSample) -> None:
        self.latest = sample
        self.samples += 1
        for gpu in sample.gpus:
            track = self._gpus.get(gpu.index)
            if track is None:
                if len(self._gpus) >= MAX_GPUS:
                    continue
                track = self._gpus[gpu.index] = _GpuTrack(self._points)
            track.add(gpu, sample.wall_time)
        if sample.cpu_percent is not None:
            self.cpu_percent = sample.cpu_percent
        if sample.memory_mb is not None:
            self.memory_mb = sample.memory_mb
            self.memory_total_mb = sample.memory_total_mb
        elif sample.memory_total_mb is not None:
            self.memory_total_mb = sample.memory_total_mb

    def view(self) -> SystemView | None:
        if self.latest is None:
            return None
        return SystemView(
            latest=self.latest,
            gpus=tuple(self._gpus[i].view(i) for i in sorted(self._gpus)),
            cpu_percent=self.cpu_percent,
            memory_mb=self.memory_mb,
            memory_total_mb=self.memory_total_mb,
            samples=self.samples,
            updated_at=self.latest.wall_time,
        )
