"""The fleet of your Hugging Face jobs: 50 jobs on the loopback fake of the Jobs API
(tests/fakes/hub_jobs.py), through the real huggingface_hub client.

    python -m benchmarks fleet_jobs

The jobs: 5 queued, 10 running, 30 completed, 5 errored; every one that started has a
Trainer's console output of 46 logged steps (the running ones: 30 so far).

- `carl-tui fleet --jobs --json`, in a process of its own: the time until every row is
  printed, each job's steps and phase read from its log (each log read once, 16 at a
  time, the running ones first; a running job's read ends when nothing more came for
  2 s). Reference, in the same run: one `list_jobs` call, then each ended job's log
  fetched one after another (`fetch_job_logs(follow=False)`, the running ones left out:
  they never end).
- the fleet table (`fleet --jobs` in a terminal: the app under Textual's headless
  driver): the time until all 50 rows are on screen, beside a bare Textual app's first
  frame under the same driver plus one bare `list_jobs` call;
  the list requests a poll of the source (target 1) over a few seconds of polls; the log
  streams opened while the table is up (target 0) and once a job is opened with enter
  (target 1, only that job's), beside the 50 a stream per job would open; and one
  `inspect_job` per job, the other way to learn every job's state.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

from benchmarks.common import Row, best_time

JOBS = {"SCHEDULING": 5, "RUNNING": 10, "COMPLETED": 30, "ERROR": 5}
STEPS = 46
TOKEN = "hf_BenchFleetJobsToken01"


def trainer_lines(n: int, upto: int | None = None) -> list[str]:
    """A Trainer's console output: each logged dict, then its progress bar (its step)."""
    lines = []
    for step in range(1, (upto or n) + 1):
        acc = min(0.99, 0.05 + step / n)
        lines.append(str({"loss": f"{3 * (1 - acc) + 0.01:.4g}",
                          "mean_token_accuracy": f"{acc:.4g}", "entropy": f"{2 - acc:.4g}",
                          "epoch": f"{step / n:.3g}"}))
        lines.append(f" {100 * step // n}%|#####| {step}/{n} [00:01<00:00,  9.50it/s]")
    return lines


def fill(state) -> list[str]:
    """The 50 jobs of alice; returns their ids."""
    now, ids = time.time(), []
    for stage, count in JOBS.items():
        for i in range(count):
            job = f"{stage.lower()}-{i:02d}"
            state.add_job(job, flavor="a10g-small", created_at=now - 4000)
            if stage != "SCHEDULING":
                state.set_stage(job, "RUNNING")
                state.append_log(job, *trainer_lines(STEPS, 30 if stage == "RUNNING" else None))
            if stage in ("COMPLETED", "ERROR"):
                state.set_stage(job, stage)
            ids.append(job)
    return ids


def _headless(url: str) -> tuple[float, list[dict]]:
    env = {**os.environ, "HF_ENDPOINT": url, "HF_TOKEN": TOKEN, "HF_HUB_OFFLINE": "0"}
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "carl_tui", "fleet", "--jobs", "--json",
                          "--timeout", "60"], env=env, capture_output=True, text=True,
                         check=True)
    return time.perf_counter() - t0, json.loads(out.stdout)


def _reference(api, ids: list[str]) -> float:
    """One list call, then every ended job's log, one after another."""
    t0 = time.perf_counter()
    infos = list(api.list_jobs(namespace="alice"))
    for info in infos:
        if str(info.status.stage) in ("COMPLETED", "ERROR", "JobStage.COMPLETED",
                                      "JobStage.ERROR"):
            list(api.fetch_job_logs(job_id=info.id, namespace="alice", follow=False))
    return time.perf_counter() - t0


async def _screen(srv, api) -> dict[str, float]:
    from textual.widgets import DataTable

    from carl_tui.sources.hf_jobs_list import HfJobsListSource
    from carl_tui.ui.app import DashboardConfig, Settings, build_app
    from carl_tui.ui.screens.fleet_table import FleetScreen

    def rows() -> int:
        found = app.screen.query("#fleet-table") if isinstance(app.screen, FleetScreen) else []
        return found[0].row_count if found else -1

    def logs() -> int:
        return len(srv.requests_to("GET", r"^/api/jobs/alice/[^/]+/logs"))

    async def until(predicate, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError("the fleet table did not show it in time")
            await asyncio.sleep(0.01)

    def logs_of(job: str) -> int:
        return len(srv.requests_to("GET", rf"^/api/jobs/alice/{job}/logs"))

    before_logs, before_own = logs(), logs_of("running-00")
    before_lists = len(srv.requests_to("GET", r"^/api/jobs/alice(\?.*)?$"))
    src = HfJobsListSource("alice", api=api, interval=0.5)
    # The server's count of list requests as each poll returns: the requests a poll made
    # are the difference between two (a request is counted before it is answered).
    at_return: list[int] = []
    poll = src.poll

    def counted_poll():
        try:
            return poll()
        finally:
            at_return.append(len(srv.requests_to("GET", r"^/api/jobs/alice(\?.*)?$")))
    src.poll = counted_poll  # type: ignore[method-assign]
    app = build_app(DashboardConfig(sources=[src], settings=Settings(fleet=True)))
    t0 = time.perf_counter()
    async with app.run_test(size=(160, 45)) as pilot:
        await until(lambda: rows() == 50)
        shown = time.perf_counter() - t0
        first = len(at_return)
        await until(lambda: len(at_return) >= first + 6)
        per_poll = [b - a for a, b in zip([before_lists, *at_return], at_return)]
        out = {"rows_s": shown, "lists_per_poll": max(per_poll), "polls": len(per_poll),
               "logs_table": logs() - before_logs}
        table = app.screen.query_one("#fleet-table", DataTable)
        table.move_cursor(row=table.get_row_index("hf-job:alice:running-00"))
        await pilot.press("enter")
        await until(lambda: app.snapshot is not None and app.snapshot.last_step == 30)
        out["logs_opened"] = logs() - before_logs
        out["logs_other_jobs"] = out["logs_opened"] - (logs_of("running-00") - before_own)
    return out


async def _bare_first_frame() -> float:
    """A bare Textual app's first frame under the same driver (the floor of any screen)."""
    from benchmarks.bare_app import BareApp

    t0 = time.perf_counter()
    async with BareApp().run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        return time.perf_counter() - t0


def run() -> list[Row]:
    from huggingface_hub import HfApi

    from tests.fakes.hub_jobs import JobsState, install_jobs_routes
    from tests.fakes.hub_repos import install_job_launch_routes
    from tests.fakes.server import FakeServer

    state = JobsState(user="alice", token=TOKEN)
    srv = FakeServer()
    install_jobs_routes(srv, state)
    install_job_launch_routes(srv, state)
    with srv:
        ids = fill(state)
        api = HfApi(endpoint=srv.url, token=TOKEN)
        headless_s, printed = _headless(srv.url)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "carl_tui", "fleet", "--help"], check=True,
                       capture_output=True)
        start_s = time.perf_counter() - t0
        reference_s = _reference(api, ids)
        list_s = best_time(lambda: list(api.list_jobs(namespace="alice")), repeat=5)
        inspect_s = best_time(lambda: [api.inspect_job(job_id=j, namespace="alice")
                                       for j in ids], repeat=1)
        bare_s = asyncio.run(_bare_first_frame())
        screen = asyncio.run(_screen(srv, api))
    with_steps = sum(r["last_step"] is not None for r in printed)
    started = sum(n for stage, n in JOBS.items() if stage != "SCHEDULING")
    return [
        Row("fleet --jobs --json, 50 jobs: every row printed", headless_s, reference_s, "s",
            "", f"{len(printed)} rows, {with_steps} of {started} started with steps; with "
            f"the process start ({start_s:.2f} s: `fleet --help`) and the 2 s quiet of the "
            "running jobs' logs; ref: list + each ended job's log, one after another"),
        Row("fleet table, 50 jobs: every row on screen", screen["rows_s"], bare_s + list_s,
            "s", "", f"ref: a bare Textual app's first frame ({bare_s:.2f} s) + one "
            f"list_jobs call ({list_s * 1000:.0f} ms)"),
        Row("fleet table, 50 jobs: one inspect_job per job", inspect_s, list_s, "s", "",
            "reference: one list_jobs call (what a poll costs)"),
        Row("fleet table, 50 jobs: list requests a poll", screen["lists_per_poll"], 50.0, "",
            "1", f"the most of {screen['polls']} polls; reference: one request per job"),
        Row("fleet table, 50 jobs: log streams, table up", screen["logs_table"], 50.0, "",
            "0", "reference: a stream per job"),
        Row("fleet table, 50 jobs: log streams, one opened", screen["logs_opened"], 50.0, "",
            "1 (its own)", f"streams of other jobs: {screen['logs_other_jobs']}"),
    ]
