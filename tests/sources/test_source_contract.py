"""The written source contract (`sources.base.Source`) and the one polling engine
(`sources.base.Poller`): every source subclasses the contract, nothing probes a source
for what it offers, and each source says its runs' lives (`RunLife`) as it learns them."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import pathlib
import pkgutil
import time

import pytest

import carl_tui
import carl_tui.sources
from carl_tui.errors import SourceError
from carl_tui.events import RunLife, RunRef, ScalarBatch
from carl_tui.report.collect import collect
from carl_tui.sources.base import WAIT_POLL_S, WAITING, Poller, Source, SourceRunner
from carl_tui.sources.jsonl import JsonlSource
from carl_tui.sources.replay import ReplaySource
from carl_tui.sources.trainer_file import TrainerLogSource
from carl_tui.store import RunStore
from carl_tui.training.stream import StreamWriter
from tests.conftest import ScriptedSource

ROOT = pathlib.Path(carl_tui.__file__).parent
TRAINER_LOG = pathlib.Path(__file__).parents[1] / "data" / "trainer_stdout.txt"
SOURCES = {"JsonlSource", "TrainerLogSource", "AutoFileSource", "ReplaySource", "HfJobSource",
           "TrackioLocalSource", "TrackioRemoteSource", "TensorBoardSource", "WandbSource"}


def source_classes() -> dict[str, type]:
    """Every class in carl_tui.sources that polls (has `poll`), by name (the engine,
    which polls sources, aside)."""
    found: dict[str, type] = {}
    for info in pkgutil.walk_packages(carl_tui.sources.__path__, "carl_tui.sources."):
        module = importlib.import_module(info.name)
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if (cls.__module__ == info.name and callable(getattr(cls, "poll", None))
                    and cls is not Poller):
                found[name] = cls
    return found


def test_every_source_class_subclasses_the_contract():
    classes = source_classes()
    assert SOURCES <= set(classes)  # the check sees every source
    classes["ScriptedSource"] = ScriptedSource  # the tests' double keeps it too
    outside = sorted(n for n, cls in classes.items() if not issubclass(cls, Source))
    assert outside == []
    # What a source offers is declared, never forwarded by attribute lookup.
    forwarding = sorted(n for n, cls in classes.items() if "__getattr__" in vars(cls))
    assert forwarding == []


PROBED = {"source", "src", "inner", "self.source", "self.inner", "r.source", "p.source",
          "runner.source"}


def probes(path: pathlib.Path, root: pathlib.Path = ROOT) -> list[str]:
    """getattr/hasattr calls on a source in `path`."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr") and node.args
                and ast.unparse(node.args[0]) in PROBED):
            out.append(f"{path.relative_to(root)}:{node.lineno} {ast.unparse(node)}")
    return out


def test_no_module_probes_a_source_for_what_it_offers():
    offenders = [p for f in sorted(ROOT.rglob("*.py")) for p in probes(f)]
    assert offenders == []


def test_the_probe_check_sees_a_probe(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f(source, src):\n    return getattr(source, 'x', 0) + hasattr(src, 'y')\n")
    assert len(probes(bad, tmp_path)) == 2


# -- the defaults ------------------------------------------------------------------------


class Bare(Source):
    """A source that declares nothing beyond `poll`."""

    name = "bare"

    def poll(self):
        return []


def test_the_contract_gives_every_member_a_default():
    src = Bare()
    assert (src.finished, src.limitation, src.threaded, src.path, src.job_id) == (
        False, "", False, None, None)
    assert src.drain() == [] and src.skipped == 0 and src.unused_input.total == 0
    src.unused_input.skip("not JSON", "x")
    assert src.skipped == 1
    src.want_preview()
    assert src.preview is False  # it cannot preview: the wish is ignored
    src.close()


# -- the engine --------------------------------------------------------------------------


class Failing(Source):
    name = "failing"

    def __init__(self, error: Exception):
        self.error = error

    def poll(self):
        raise self.error


def test_the_engine_tells_a_wait_a_retry_and_a_fault_apart():
    waiting = Poller(Failing(SourceError("waiting for x.jsonl", kind=WAITING))).poll()
    assert (waiting.state, waiting.delay, waiting.message) == (
        "retrying", WAIT_POLL_S, "waiting for x.jsonl")
    poller = Poller(Failing(SourceError("connection refused")))
    delays = [poller.poll().delay for _ in range(3)]
    assert delays[0] < delays[1] < delays[2]  # backoff grows
    fault = Poller(Failing(SourceError("a directory", retry=False))).poll()
    assert (fault.state, fault.retry, fault.delay) == ("error", False, 30.0)


def test_the_engine_places_a_life_after_its_runs_data():
    """A run's life comes after its events: the store orders runs by their latest event,
    and a life must not move one run ahead of another."""
    a, b = RunRef("t", "p", "a"), RunRef("t", "p", "b")
    src = ScriptedSource()
    batch = ScalarBatch.from_rows
    src.push([batch(a, [(1, {"loss": 1.0})]), batch(b, [(1, {"loss": 1.0})])])
    out = Poller(src).poll()
    assert [(type(e).__name__, e.run.run_id) for e in out.events] == [
        ("ScalarBatch", "a"), ("RunLife", "a"), ("ScalarBatch", "b"), ("RunLife", "b")]
    assert out.data
    store = RunStore()
    store.apply(out.events)
    assert store.most_recent() == b
    assert Poller(src).poll().events == []  # said once: nothing new, nothing said


class Threaded(ScriptedSource):
    threaded = True


def test_collect_waits_for_a_threaded_source_to_settle():
    """A source fed by threads may bring nothing on one poll and data on the next: collect
    waits `settle` seconds for it, where it stops a file at its first empty poll."""
    run = RunRef("t", "p", "r")
    for cls, want in ((Threaded, [1, 2]), (ScriptedSource, [1])):
        src = cls()
        src.push([ScalarBatch.from_rows(run, [(1, {"loss": 1.0})])])
        src.push([])
        src.push([ScalarBatch.from_rows(run, [(2, {"loss": 0.5})])])
        store = RunStore()
        collect([src], store, timeout=5, settle=0.5)
        assert store.snapshot(run.key).series["loss"].steps.tolist() == want


# -- each source says its runs' lives --------------------------------------------------


def life(store: RunStore, run: RunRef | None = None) -> RunLife | None:
    run = run or store.most_recent()
    assert run is not None
    return store._state(run).life


def test_a_trainer_log_read_to_its_end_says_its_run_finished():
    store = RunStore()
    collect([TrainerLogSource(TRAINER_LOG)], store, timeout=10, patient=False)
    assert life(store).state == "finished"


def test_a_stream_is_live_until_its_end_of_training_line(tmp_path):
    path = tmp_path / "run.jsonl"
    writer = StreamWriter(path)
    for step in range(1, 4):
        writer.write({"step": step, "time": time.time(), "loss": 2.0 / step})
    poller = Poller(JsonlSource(path))
    lives = [e for e in poller.poll().events if isinstance(e, RunLife)]
    assert [x.state for x in lives] == ["live"]
    # The Trainer's last log: its summary (what the training callback writes on_log).
    writer.write({"step": 3, "time": time.time(), "train_runtime": 12.5, "train_loss": 1.1,
                  "train_steps_per_second": 0.24, "epoch": 1.0})
    writer.close()
    lives = [e for e in poller.poll().events if isinstance(e, RunLife)]
    assert [x.state for x in lives] == ["finished"]
    assert lives[0].run == poller.source.parser.run


def test_a_replay_at_its_end_says_its_run_finished(tmp_path):
    path = tmp_path / "rec.jsonl"
    path.write_text("".join(json.dumps({"step": i, "time": 1e9 + i, "loss": 1.0 / (i + 1)})
                            + "\n" for i in range(5)))
    store = RunStore()
    runner = SourceRunner(ReplaySource(path, speed=0), store.apply)
    runner.run()  # returns once the replay is finished
    assert life(store).state == "finished"
    assert store.snapshot(store.most_recent().key).last_step == 4


@pytest.fixture
def hub():
    pytest.importorskip("huggingface_hub")
    from huggingface_hub import HfApi

    from tests.fakes.hub_jobs import JobsState, install_jobs_routes
    from tests.fakes.server import FakeServer

    state = JobsState(user="alice", token="hf_dummy")
    srv = FakeServer()
    install_jobs_routes(srv, state)
    with srv:
        yield state, HfApi(endpoint=srv.url, token="hf_dummy")


def poll_lives(poller: Poller, store: RunStore, want: str, timeout: float = 20.0) -> RunLife:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        store.apply(poller.poll().events)
        run = store.most_recent()
        if run is not None and life(store, run) is not None and life(store, run).state == want:
            return life(store, run)
        time.sleep(0.02)
    raise AssertionError(f"the job never said {want!r}")


@pytest.mark.timeout(60)
def test_a_job_says_its_life_by_its_stage(hub):
    from carl_tui.sources.hf_jobs import HfJobSource

    state, api = hub
    state.add_job("job1")
    poller = Poller(HfJobSource("job1", namespace="alice", api=api, status_interval=0.05))
    store = RunStore()
    assert poller.source.threaded and poller.source.job_id == "job1"
    poll_lives(poller, store, "queued")
    state.set_stage("job1", "RUNNING")
    poll_lives(poller, store, "live")
    state.set_stage("job1", "ERROR", "CUDA out of memory")
    failed = poll_lives(poller, store, "failed")
    assert failed.reason == "job ERROR: CUDA out of memory"
    assert failed.updated_at is not None
    poller.source.close()


def lives_after_collect(source) -> dict[str, str]:
    store = RunStore()
    collect([source], store, timeout=20, patient=False)
    return {run.label: life(store, run).state for run in store.runs()}


def test_a_trackio_projects_runs_are_live(tmp_path):
    """Trackio (0.43) records no end of a run: its runs are live."""
    from carl_tui.sources.trackio.local import TrackioLocalSource
    from tests.sources.test_source_trackio_local import trackio_write

    trackio_write(tmp_path, [{"project": "p", "name": name, "rows": [{"loss": 1.0}]}
                             for name in ("a", "b")])
    assert lives_after_collect(TrackioLocalSource("p", root=tmp_path)) == {
        "a": "live", "b": "live"}


def test_a_tensorboard_run_is_live(tmp_path):
    pytest.importorskip("torch")  # its SummaryWriter writes the run (the [train] extra)
    from torch.utils.tensorboard import SummaryWriter

    from carl_tui.sources.tensorboard import TensorBoardSource

    writer = SummaryWriter(str(tmp_path / "sft"))
    for step in range(3):
        writer.add_scalar("train/loss", 1.0 / (step + 1), step)
    writer.close()
    assert lives_after_collect(TensorBoardSource(tmp_path)) == {"sft": "live"}


def test_a_wandb_run_whose_exit_was_read_is_finished(tmp_path):
    from carl_tui.sources.wandb_run import WandbSource
    from tests.sources.test_source_wandb import _has_wandb, sft_rows, start_writer

    if not _has_wandb():
        pytest.skip("wandb is not installed")
    proc = start_writer(tmp_path, {"runs": [{"project": "p", "name": "sft",
                                              "rows": sft_rows(5)}]})
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err.decode()
    assert lives_after_collect(WandbSource(tmp_path / "wandb")) == {"sft": "finished"}
