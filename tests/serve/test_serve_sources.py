"""`carl-tui serve` on every source: a tab's dashboard opens the run the options name,
as `carl-tui` with the same options would (real writers, loopback servers)."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from tests.serving import HF_SECRET, RECORDING, enter, open_tab, start_serving

pytest.importorskip("textual_serve")
aiohttp = pytest.importorskip("aiohttp")
pytest.importorskip("psutil")

TRAINER_LOG = Path(__file__).parents[1] / "data" / "trainer_stdout.txt"


async def shown_in_a_tab(args, *shown: str, env=None) -> str:
    served = start_serving(*args, env=env)
    try:
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as client:
            await enter(client, served)
            ws, drawn = await open_tab(client, served, *shown)
            await ws.close()
    finally:
        assert served.stop() == 0
    return drawn


async def test_a_stream_a_trainer_log_and_a_replay():
    drawn = await shown_in_a_tab(["--watch", str(RECORDING)], "tiny-reverse-seed0",
                                 "CRYSTALLISED")
    assert "0.9378" in drawn  # the recording's last phi, as the terminal shows it
    drawn = await shown_in_a_tab(["--watch", str(TRAINER_LOG)], "trainer_stdout.txt", "loss")
    assert "trainer_stdout.txt" in drawn
    drawn = await shown_in_a_tab(["replay", str(RECORDING), "--speed", "0"],
                                 "tiny-reverse-seed0")
    assert "tiny-reverse-seed0" in drawn


async def test_tensorboard(tmp_path):
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(tmp_path / "logs" / "grpo-tb"))
    for step in range(0, 100, 5):
        w.add_scalar("train/loss", 3.0 * math.exp(-step / 60), step)
    w.close()
    drawn = await shown_in_a_tab(["--tensorboard", str(tmp_path / "logs")], "grpo-tb", "loss")
    assert "grpo-tb" in drawn


async def test_local_trackio(tmp_path):
    pytest.importorskip("trackio")
    from tests.fakes.trackio_server import start_writer, wait_writer

    points = [{"train/loss": 2.5 * math.exp(-i / 30), "train/global_step": 10 * (i + 1)}
              for i in range(20)]
    wait_writer(start_writer(tmp_path, "proj-serve", "run-served", points))
    drawn = await shown_in_a_tab(["--project", "proj-serve", "--trackio-dir", str(tmp_path)],
                                 "run-served", "loss")
    assert "run-served" in drawn


async def test_remote_trackio(tmp_path):
    pytest.importorskip("trackio")
    from tests.fakes.trackio_server import TrackioServer, start_writer, wait_writer

    with TrackioServer(tmp_path / "trackio") as trackio:
        wait_writer(start_writer(trackio.data_dir, "remote-serve", "run-remote",
                                 [{"loss": 1.0 / (i + 1)} for i in range(10)]))
        drawn = await shown_in_a_tab(["--trackio", trackio.url, "--project", "remote-serve"],
                                     "run-remote", "loss")
    assert "run-remote" in drawn


async def test_a_hugging_face_job(server):
    pytest.importorskip("huggingface_hub")
    from tests.fakes.hub_jobs import JobsState, install_jobs_routes

    server.routes.clear()
    state = JobsState(token=HF_SECRET)  # the token the server's dashboards get
    install_jobs_routes(server, state)
    state.add_job("job-served", stage="RUNNING", flavor="a10g-small")
    rng = random.Random(3)
    state.append_log("job-served", *(f"{{'loss': {2 - i / 20 + rng.random() / 100:.4f}, "
                                     f"'epoch': {i / 10}}}" for i in range(10)))
    drawn = await shown_in_a_tab(["--job", "job-served", "--namespace", "alice"], "job-served",
                                 "RUNNING", env={"HF_ENDPOINT": server.url})
    assert "job-served" in drawn and HF_SECRET not in drawn


async def test_wandb_offline(tmp_path):
    from tests.sources.test_source_wandb import SFT_CONFIG, _has_wandb, sft_rows
    from tests.sources.test_source_wandb import start_writer as start_wandb

    if not _has_wandb():
        pytest.skip("wandb is not installed")
    proc = start_wandb(tmp_path, {"runs": [{"project": "p", "name": "sft-served",
                                            "config": SFT_CONFIG, "rows": sft_rows()}]})
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err.decode()
    await shown_in_a_tab(["--wandb", str(tmp_path / "wandb")], "sft-served", "loss")


@pytest.mark.slow
async def test_the_demo_trains_once_for_every_tab():
    """`serve demo`: one training, here; each tab watches its stream; stopping the server
    ends the training and the tabs' dashboards."""
    for module in ("torch", "transformers", "trl", "datasets"):
        pytest.importorskip(module)
    import psutil

    served = start_serving("--max-sessions", "2", "demo", timeout=120)
    try:
        trainers = [p for p in served.sessions() if "carl_tui.training.demo" in p.cmdline()]
        assert len(trainers) == 1
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as client:
            await enter(client, served)
            tabs = [await open_tab(client, served, "tiny-", "mean_token_accuracy",
                                   timeout=180) for _ in range(2)]
            dashboards = [p for p in served.sessions() if p.cmdline()[1:3] == ["-m", "carl_tui"]]
            assert len(dashboards) == 2
            for p in dashboards:
                assert "--watch" in p.cmdline() and p.cmdline()[-1] == "--read-only"
            assert [p for p in served.sessions()
                    if "carl_tui.training.demo" in p.cmdline()] == trainers
            assert served.stop() == 0
            for p in (*trainers, *dashboards):
                assert not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
            for ws, _ in tabs:
                await ws.close()
    finally:
        served.stop()
