"""Shared fixtures. Keep this small: fakes live in tests/fakes/."""

from __future__ import annotations

import os

# One torch thread per process: the suite trains tiny models on 2 cores, where a second
# thread per step fights every other process for the same cores (set before torch loads).
os.environ.setdefault("OMP_NUM_THREADS", "1")

import math
import threading

import pytest
from hypothesis import settings

from carl_tui.events import Event, RunMeta, RunRef, ScalarBatch
from carl_tui.sources.base import Source
from tests.ray_cluster import ray_head  # noqa: F401  (a real Ray head, once a session)

# In CI the property tests draw the same examples on every run, so that a change, never
# the luck of a draw, fails a build; a local run draws new examples each time and finds
# what CI's draw misses (then add the case as a plain test).
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")


class ScriptedSource(Source):
    """An in-memory source: each poll returns the next queued list of events."""

    interval = 0.02

    def __init__(self, name: str = "scripted"):
        self.name = name
        self._queue: list[list[Event]] = []
        self._lock = threading.Lock()

    def push(self, events: list[Event]) -> None:
        with self._lock:
            self._queue.append(list(events))

    def poll(self) -> list[Event]:
        with self._lock:
            return self._queue.pop(0) if self._queue else []


async def wait_for(pilot, predicate, timeout: float = 5.0, what: str = "condition") -> None:
    """Let the app run until `predicate()` holds; fail saying `what` after `timeout` s."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await pilot.pause(0.05)
        if predicate():
            return
    raise AssertionError(f"{what} not met in time")


def wait_until(predicate, what: str = "condition", timeout: float = 20.0):
    """Poll `predicate()` from a plain thread (a process, a file, a server) until it is
    truthy; return its value, or fail saying `what` after `timeout` s. A generous bound: a
    stuck process fails, a slow machine does not. Inside a Textual test, use `wait_for`."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not met within {timeout} s")
        time.sleep(0.02)


def plain_text(widget, width: int = 120) -> str:
    """What a Static-based widget shows, as plain text."""
    import io

    from rich.console import Console

    console = Console(width=width, file=io.StringIO(), color_system=None)
    console.print(widget.content)
    return console.file.getvalue()


def spec_trajectory(n: int = 46, seed: int = 0) -> list[tuple[int, dict[str, float]]]:
    """A run shaped like the reference phase table (docs/maths.md, "Phases of a run"):
    accuracy and entropy per step."""
    import random

    rnd = random.Random(seed)
    rows = []
    for step in range(n):
        if step < 10:
            acc, ent = 0.03, 1.0
        elif step < 20:
            acc, ent = 0.08, 9.3
        elif step < 25:
            acc, ent = 0.65, 4.1
        elif step < 35:
            acc, ent = 0.99 + 0.004 * rnd.random(), 0.4
        else:
            acc, ent = 0.993, 0.12
        ent *= 1 + 0.03 * (rnd.random() - 0.5)
        rows.append(
            (step, {"mean_token_accuracy": acc, "entropy": ent, "loss": 3.0 * (1 - acc) + 0.01})
        )
    return rows


@pytest.fixture(scope="module")
def server():
    """A loopback fake server, one per test module (stopping one takes half a second);
    each test installs the routes it needs."""
    from tests.fakes.server import FakeServer

    with FakeServer() as srv:
        yield srv


@pytest.fixture
def run_ref() -> RunRef:
    return RunRef(source="test", project="proj", run_id="run-1", name="spec-run")


@pytest.fixture
def spec_events(run_ref):
    rows = spec_trajectory()
    return [
        RunMeta(run_ref, {"model": "tiny-llama", "method": "sft", "vocab_size": 20}),
        ScalarBatch.from_rows(run_ref, rows, wall_time=1_700_000_000.0),
    ]


@pytest.fixture
def ln20() -> float:
    return math.log(20)


@pytest.fixture(scope="session")
def trainer_logs(tmp_path_factory):
    """Stdout of real tiny TRL runs with the true step of every printed dict beside each
    (tests/data/make_trainer_stdout.py), made once per session: name -> log path."""
    pytest.importorskip("trl")
    from tests.data.make_trainer_stdout import generate

    return generate(tmp_path_factory.mktemp("trainer-stdout"), workers=2)


@pytest.fixture(scope="session")
def grpo_completions(tmp_path_factory):
    """A real tiny GRPO run with log_completions=True (tests/data/make_grpo_completions.py):
    its stdout, parquet folder, Trackio store, W&B offline run and CARL stream."""
    pytest.importorskip("trl")
    from tests.data.make_grpo_completions import generate

    return generate(tmp_path_factory.mktemp("grpo-completions"))


@pytest.fixture(autouse=True)
def _private_user_files(tmp_path_factory, monkeypatch):
    """Each test has its own cache (the registry of local runs), state (the guards' audit
    log) and no user config."""
    home = tmp_path_factory.mktemp("user")
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "state"))
    monkeypatch.setenv("CARL_TUI_CONFIG", str(home / "config.toml"))


def dashboard_config(sources, **kw):
    """A `DashboardConfig` from keywords, each given to what it belongs to by its name: the
    config itself (store, local_jobs, on_exit), the user's `Settings` or the `Services`."""
    from dataclasses import fields

    from carl_tui.ui.app import DashboardConfig, Services, Settings

    def pick(cls):
        return {f.name: kw.pop(f.name) for f in fields(cls) if f.name in kw}

    settings, services = Settings(**pick(Settings)), Services(**pick(Services))
    return DashboardConfig(sources=sources, settings=settings, services=services, **kw)


def notices_said(app) -> list[str]:
    """The text of every notification `app` raises from now on, in order (a spy on its
    `notify`; Textual's own list forgets a notification once its toast times out)."""
    said: list[str] = []
    notify = app.notify

    def spy(message, *args, **kw):
        said.append(str(message))
        return notify(message, *args, **kw)

    app.notify = spy
    return said
