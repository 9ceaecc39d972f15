"""Ray jobs as sources: follow one (`carl-tui --ray-job ID`) or list a cluster's
(`carl-tui fleet --ray`), through the cluster dashboard's Jobs REST API (`engines/ray.py`).
The reading is engine-neutral (`sources/engine_job.py`); this module names the Ray kind."""

from __future__ import annotations

from carl_tui.engines.ray import RayEngine, ray_run
from carl_tui.sources.engine_job import EngineJobsListSource, EngineJobSource


def ray_job_source(job_id: str, address: str | None = None, *,
                   engine: RayEngine | None = None, interval: float = 1.0) -> EngineJobSource:
    """Follow the Ray job `job_id` (its submission id) of the cluster at `address`
    (default: `$RAY_ADDRESS`, else the local dashboard)."""
    engine = engine or RayEngine(address)
    return EngineJobSource(engine, job_id, run=ray_run(engine.url, job_id), interval=interval)


def ray_jobs_source(address: str | None = None, *, read_logs: bool = False,
                    engine: RayEngine | None = None,
                    interval: float = 5.0) -> EngineJobsListSource:
    """Every submitted job of the Ray cluster at `address`, one run each; `read_logs`
    (headless `fleet --ray --json`): each job's log read once."""
    return EngineJobsListSource(engine or RayEngine(address), read_logs=read_logs,
                                interval=interval)
