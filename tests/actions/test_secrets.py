"""Secrets never leak.

Distinct secrets (an HF token, an Anthropic key, a Bearer header value, a W&B API key and the
value of a custom MY_SERVICE_TOKEN set in the environment) are planted in every input the
product reads: a JSONL stream (log lines, the run's name/project/id, metric names, config,
marker details, a bad line), a Trainer stdout log, an HF Job (log, status message, command, a
Hub server error), a remote Trackio server (a run name, its config, a server error) and Claude
(an answer and an error). The real app is driven with keys and the real CLI is run; everything
that comes out is scanned: the screen at every step, every notice, every file written, every
request the loopback servers received (bodies, URLs, headers but the credential a client must
send to its own server), the CLI's stdout/stderr and what was logged. No secret, nor any
10-character piece of one, may appear; where one was planted, `[REDACTED]` must show instead.
"""

from __future__ import annotations

import functools
import html
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

for _extra in ("huggingface_hub", "anthropic", "trackio"):  # every source and client, for real
    pytest.importorskip(_extra)

from huggingface_hub import HfApi

from carl_tui.actions.diagnosis import Diagnoser
from carl_tui.sources.hf_jobs import HfJobSource
from carl_tui.sources.open import open_file
from carl_tui.sources.trackio.remote import TrackioRemoteSource
from carl_tui.ui.app import DashboardConfig, Services, Settings, build_app
from carl_tui.ui.screens.diagnosis import DiagnosisScreen
from carl_tui.ui.screens.jobs import JobsScreen
from carl_tui.ui.screens.launch import LaunchScreen
from carl_tui.ui.screens.run_card import RunCardScreen
from tests.conftest import wait_for as pilot_wait
from tests.fakes.anthropic_api import AnthropicState, Reply, install_messages_routes
from tests.fakes.hub_jobs import JobsState, install_jobs_routes
from tests.fakes.hub_repos import HubState, install_job_launch_routes, install_repo_routes
from tests.fakes.server import FakeServer, Request, Response
from tests.fakes.trackio_server import FaultProxy, TrackioServer, start_writer, wait_writer
from tests.ui.test_fleet_screen import row_count

pytestmark = pytest.mark.timeout(120)

MASK = "[REDACTED]"
HF = "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"  # hf_ and 34 letters, as the Hub makes them
ANT = "sk-ant-api03-Wm4Rt8Yq2Kz6Nb1Xv5Hc9Ls3Jd7Fg0Pe-Ua_QoTiEwZn4BxAAA"
BEARER = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJjYXJsLXR1aSJ9.Vq3Zk8Pm2Rx7Lc5Nw1Gt"
WANDB = "5c1e9a7f3b2d8046e1a9c7b5d3f2e8a6c4b0d9f1"  # 40 hex digits, as W&B makes them
SERVICE = "svc-Rb8Kq3Zt6Xm1Wp9Lc4Vn7Jd2"  # only its variable's name says it is secret
SECRETS = {"hf": HF, "anthropic": ANT, "bearer": BEARER, "wandb": WANDB, "service": SERVICE}
# The part of each secret no ordinary text shares (sk-ant-api03- is in the no-key message).
_CORES = {"hf": HF[3:], "anthropic": ANT[13:], "bearer": BEARER, "wandb": WANDB,
          "service": SERVICE[4:]}
PIECE = 10  # no piece of a secret this long may show (a token cut by a truncation, a wrap)
PIECES = {name: {core[i:i + PIECE] for i in range(len(core) - PIECE + 1)}
          for name, core in _CORES.items()}

SIZE = (180, 50)
USER = "alice"


def leaks(text: str) -> list[str]:
    """Which planted secrets `text` shows, whole or in part."""
    return [name for name, pieces in PIECES.items() if any(p in text for p in pieces)]


def test_the_scan_sees_every_secret_whole_or_cut_and_nothing_else():
    from carl_tui.actions.diagnosis import NO_KEY_MESSAGE

    for name, value in SECRETS.items():
        assert leaks(f"x {value} y") == [name]
        assert leaks(f"{value[:len(value) // 2]}…") == [name]  # cut by a truncation
        assert leaks(f"…{value[-PIECE:]}") == [name]  # or by an elision
    assert leaks(f"{NO_KEY_MESSAGE} {MASK} hf_ sk-ant-api03- Bearer {HF[:5]}") == []
    assert svg_text('<text class="a" clip-path="url(#t-line-1)">b&#160;</text>'
                    '<text class="a" clip-path="url(#t-line-0)">a</text>'
                    '<text class="a" clip-path="url(#t-line-1)">c</text>') == "a\nb c"


class Scan:
    """Everything that came out, by place; `leaked` lists (place, secret, excerpt)."""

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}
        self.leaked: list[tuple[str, str, str]] = []

    def __call__(self, place: str, text: str | bytes) -> str:
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        self.seen[place] = self.seen.get(place, "") + "\n" + text
        for name in leaks(text):
            value = next(p for p in PIECES[name] if p in text)
            i = text.find(value)
            self.leaked.append((place, name, text[max(0, i - 60): i + 60]))
        return text

    def check(self) -> None:
        assert not self.leaked, "secrets leaked:\n" + "\n".join(map(repr, self.leaked))


def svg_text(svg: str) -> str:
    """The text an SVG screenshot shows, line by line (spans of a line joined)."""
    lines: dict[int, list[str]] = {}
    for m in re.finditer(r"<text([^>]*)>(.*?)</text>", svg, re.DOTALL):
        line = re.search(r"-line-(\d+)\)", m.group(1))
        lines.setdefault(int(line.group(1)) if line else -1, []).append(m.group(2))
    return "\n".join(html.unescape("".join(lines[k])).replace("\xa0", " ")
                     for k in sorted(lines))


def screen(app, scan: Scan, step: str) -> str:
    """Scan the whole screen (as an SVG and as its text) and every notice so far."""
    svg = app.export_screenshot()
    text = svg_text(svg)
    scan(f"screen: {step}", text)
    scan(f"screen svg: {step}", html.unescape(svg))
    for n in app._notifications:
        scan(f"notice: {step}", f"{n.title}\n{n.message}")
    return text


wait_for = functools.partial(pilot_wait, timeout=15.0)


# -- the inputs, each with secrets planted ------------------------------------------------


def noisy(n: int, seed: int) -> list[tuple[int, dict[str, float]]]:
    """A run shaped like a real one: loss falls, accuracy rises, entropy melts then
    settles, with noise."""
    import math
    import random

    rnd = random.Random(seed)
    rows = []
    for i in range(n):
        t = i / n
        rows.append((3 * i + 1, {
            "loss": 2.7 * math.exp(-2.4 * t) + 0.08 + 0.04 * rnd.gauss(0, 1),
            "mean_token_accuracy": min(0.999, 0.05 + 0.9 / (1 + math.exp(-9 * (t - 0.5)))
                                       + 0.01 * rnd.random()),
            "entropy": 2.9 * math.exp(-1.7 * t) + 0.35 * math.sin(5 * t) ** 2
                       + 0.05 * rnd.random(),
        }))
    return rows


def write_stream(path: Path) -> None:
    lines = [{
        "event": "meta", "run_id": f"r-{SERVICE}", "name": f"grpo {HF}",
        "project": f"proj-{SERVICE}", "model": "tiny-llama", "method": "grpo", "vocab_size": 64,
        "config": {"learning_rate": 3e-5, "hub_token": HF, "WANDB_API_KEY": WANDB,
                   "report_to": f"wandb Authorization: Bearer {BEARER}",
                   "service": SERVICE, "anthropic_api_key": ANT, "num_generations": 8},
    }]
    for k, (step, row) in enumerate(noisy(60, 1)):
        row = {**row, f"loss/{HF}": row["loss"] * 1.1, f"reward/{SERVICE}": 1 - row["loss"] / 3}
        lines.append({"step": step, **row})
        if k == 10:
            lines += [
                {"event": "log", "text": f"jsonl: huggingface-cli login --token {HF}"},
                {"event": "log", "text": f"jsonl: export WANDB_API_KEY={WANDB}"},
                {"event": "log", "text": f"jsonl: curl -H 'Authorization: Bearer {BEARER}'"},
                {"event": "log", "text": f"jsonl: claude key {ANT} loaded"},
                {"event": "log", "text": f"jsonl: service reached with {SERVICE}"},
            ]
        if k == 30:
            lines.append({"event": "marker", "kind": "checkpoint", "note": f"pushed with {HF}",
                          "api_key": WANDB, "auth": f"Bearer {BEARER}", "svc": SERVICE,
                          "claude": ANT})
    text = "\n".join(json.dumps(x) for x in lines) + "\n"
    # Input that is skipped keeps its first example: these show in `k`.
    text += f'{{"step": 400, "loss": 0.2, "note": {HF} {SERVICE}}}\n'  # not JSON
    text += json.dumps({"step": 401, "loss": 0.2, "status": f"key {ANT}"}) + "\n"  # not a number
    path.write_text(text)


TRAINER_LOG = (Path(__file__).parents[1] / "data" / "trainer_stdout.txt").read_text().split("\n")
TRAINER_PLANTED = [
    f"trainer: Token is valid. Your token {HF} has been saved to /root/.cache/huggingface/token",
    f"trainer: wandb: WANDB_API_KEY={WANDB}",
    f"trainer: requests headers {{'Authorization': 'Bearer {BEARER}'}}",
    f"trainer: ANTHROPIC_API_KEY={ANT}",
    f"trainer: connected to the service with {SERVICE}",
]


def write_trainer_log(path: Path) -> None:
    path.write_text("\n".join(TRAINER_LOG[:-1] + TRAINER_PLANTED) + "\n")


JOB_ID = "job-planted"
JOB_PLANTED = [
    f"job: login with {HF}",
    f"job: export WANDB_API_KEY='{WANDB}'",
    f"job: Authorization: Bearer {BEARER}",
    f"job: using {ANT}",
    f"job: token {SERVICE}",
]
JOB_MESSAGE = f"CUDA OOM; HF_TOKEN={HF} Authorization: Bearer {BEARER} {SERVICE}"
HUB_ERROR = json.dumps({"error": f"token {HF} rejected; Authorization: Bearer {BEARER}; "
                                 f"{SERVICE} {ANT} WANDB_API_KEY={WANDB}"}).encode()


def plant_job(jobs: JobsState) -> None:
    jobs.add_job(JOB_ID, flavor="a10g-small", stage="RUNNING", labels={"app": "carl-tui"},
                 command=["python", "train.py", "--hub_token", HF,
                          f"WANDB_API_KEY={WANDB}", f"--service={SERVICE}"])
    jobs.append_log(JOB_ID, *TRAINER_LOG[:-1], *JOB_PLANTED)
    jobs.fail_next("inspect", 500, body=HUB_ERROR)  # a Hub server error first
    jobs.set_stage(JOB_ID, "ERROR", JOB_MESSAGE)


TRACKIO_RUN = f"remote-{SERVICE}"
TRACKIO_ERROR = (f"database is locked by {HF}; Authorization: Bearer {BEARER}; "
                 f"WANDB_API_KEY={WANDB}; {SERVICE}; {ANT}")


class CraftedFaultProxy(FaultProxy):
    """The FaultProxy, also able to answer with a crafted JSON error."""

    crafted: tuple[int, dict] | None = None

    def _handle(self, req: Request) -> Response:
        if self.crafted is not None and req.path.startswith("/api/query_project"):
            status, body = self.crafted
            return Response.json(body, status=status)
        return super()._handle(req)


# -- fixtures -------------------------------------------------------------------------------


@pytest.fixture
def env(monkeypatch, tmp_path):
    monkeypatch.setenv("MY_SERVICE_TOKEN", SERVICE)
    monkeypatch.setenv("HF_TOKEN", HF)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANT)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)  # planted where only its name tells
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def hub(env, monkeypatch):
    import huggingface_hub.constants as hc

    with FakeServer() as srv:
        jobs = JobsState(user=USER, token=HF)
        install_repo_routes(srv, HubState(tokens={HF}))
        install_jobs_routes(srv, jobs, whoami=False)
        install_job_launch_routes(srv, jobs)
        monkeypatch.setattr(hc, "ENDPOINT", srv.url)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", srv.url)
        yield srv, jobs


@pytest.fixture(scope="module")
def trackio(tmp_path_factory):
    d = tmp_path_factory.mktemp("trackio")
    with TrackioServer(d) as srv:
        points = [{"loss": row["loss"], "entropy": row["entropy"], f"loss/{HF}": row["loss"],
                   "train/global_step": step} for step, row in noisy(40, 2)]
        wait_writer(start_writer(d, "remote", TRACKIO_RUN, points,
                                 config={"wandb_api_key": WANDB, "hub_token": HF, "lr": 3e-5,
                                         "note": f"Authorization: Bearer {BEARER}"}))
        yield srv


def job_source(srv):
    def make(job_id: str, namespace: str) -> HfJobSource:
        return HfJobSource(job_id, namespace=namespace, api=HfApi(endpoint=srv.url, token=HF),
                           interval=0.05, status_interval=0.2)

    return make


def scan_requests(scan: Scan, srv: FakeServer, where: str) -> None:
    """Every request a loopback server received: method, URL, headers, body. The only
    credential allowed is the one a client must send to its own server."""
    for r in srv.requests:
        claude = r.path.startswith("/v1/messages")
        headers = dict(r.headers)
        auth = headers.pop("authorization", None)
        api_key = headers.pop("x-api-key", None)
        if claude:
            assert auth in (None, f"Bearer {ANT}") and api_key in (None, ANT), r.path
            assert (auth or api_key), "Claude got no key"
        elif where == "hub":
            # (huggingface_hub fetches a public registry of its own without a token)
            assert auth in (None, f"Bearer {HF}") and api_key is None, r.path
        else:
            assert auth is None and api_key is None, f"a credential went to {where}: {r.path}"
        body = r.body.decode("utf-8", "replace")
        if where == "hub" and r.method == "POST" and re.fullmatch(r"/api/jobs/[^/]+", r.path):
            # A job's secrets are where its token belongs (checked on their own).
            body = json.dumps({k: v for k, v in json.loads(body).items() if k != "secrets"})
        scan(f"{where} request {r.method} {r.path}",
             f"{r.method} {r.path} {json.dumps(r.query)}\n{json.dumps(headers)}\n{body}")


def scan_logs(scan: Scan, caplog) -> None:
    """What the product logged (any level), and what any library logged at WARNING or
    above (Python prints those on stderr when nobody configured logging)."""
    for rec in caplog.records:
        if rec.name.startswith("carl_tui") or rec.levelno >= logging.WARNING:
            scan(f"log {rec.name}", rec.getMessage() + (rec.exc_text or ""))


# -- the dashboard --------------------------------------------------------------------------


def stream_app(srv: FakeServer, tmp_path: Path):
    """The dashboard on tmp_path/stream.jsonl, its Claude and Hub on the loopback `srv`."""
    return build_app(DashboardConfig(sources=[open_file(tmp_path / "stream.jsonl")],
                                     settings=Settings(refresh_interval=0.05),
                                     services=Services(
                                         hub_endpoint=srv.url,
                                         diagnoser_factory=lambda: Diagnoser(max_retries=0))))


async def pick_run(pilot, app, key: str, scan: Scan | None = None) -> None:
    """`r`, then the run `key` chosen in the fleet table with the arrow keys and enter (the
    table and the run's card scanned if `scan`)."""
    await pilot.press("r")
    await wait_for(pilot, lambda: row_count(app) == len(app.store.runs()), what="the fleet")
    fleet = app.screen
    order = [r.run.key for r in fleet.shown]
    delta = order.index(key) - fleet.table.cursor_row
    await pilot.press(*(["down"] * delta if delta > 0 else ["up"] * -delta))
    if scan is not None:
        screen(app, scan, "fleet table")
        await pilot.press("i")
        await wait_for(pilot, lambda: isinstance(app.screen, RunCardScreen), what="the card")
        screen(app, scan, f"run card {key}")
        await pilot.press("escape")
    await pilot.press("enter")
    await wait_for(pilot, lambda: app.current_run == key and app.snapshot is not None
                   and app.snapshot.run.key == key, what=f"showing {key}")
    await pilot.pause(0.2)


async def test_dashboard_shows_saves_and_sends_no_secret(hub, trackio, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    srv, jobs = hub
    scan = Scan()
    write_stream(tmp_path / "stream.jsonl")
    write_trainer_log(tmp_path / "train.log")
    plant_job(jobs)
    claude = AnthropicState(keys={ANT}, replies=[
        Reply("**Verdict:** healthy; accuracy near 0.99 and entropy settled.", chunk=7)])
    install_messages_routes(srv, claude)
    messages = next(i for i, r in enumerate(srv.routes) if "messages" in r[1].pattern)
    method, rx, handler = srv.routes[messages]

    def claude_or_error(req: Request) -> Response:
        if claude.bodies:  # the follow-up: an error that quotes the key
            claude.raw_bodies.append(req.body)
            return Response.json({"type": "error", "error": {
                "type": "invalid_request_error",
                "message": f"messages.1: key {ANT} with Authorization: Bearer {BEARER}"}}, 400)
        return handler(req)

    srv.routes[messages] = (method, rx, claude_or_error)
    save_dir = tmp_path / "saved"

    with CraftedFaultProxy(trackio.url) as proxy:
        remote = TrackioRemoteSource(proxy.url, project="remote", interval=0.2, timeout=5.0)
        sources = [open_file(tmp_path / "stream.jsonl"), open_file(tmp_path / "train.log"),
                   job_source(srv)(JOB_ID, USER), remote]
        config = DashboardConfig(sources=sources,
                                 settings=Settings(refresh_interval=0.05, save_dir=str(save_dir)),
                                 services=Services(
                                     hub_endpoint=srv.url, job_source_factory=job_source(srv),
                                     diagnoser_factory=lambda: Diagnoser(max_retries=0)))
        app = build_app(config)
        async with app.run_test(size=SIZE) as pilot:
            store = app.store
            await wait_for(pilot, lambda: len(store.runs()) == 4, what="four runs")
            runs = {r.source: r for r in store.runs()}
            await wait_for(pilot, lambda: remote.last_id >= 40, what="trackio read")
            proxy.crafted = (500, {"error": TRACKIO_ERROR})
            await wait_for(pilot, lambda: "database is locked" in json.dumps(
                [s.message for s in store.summary().sources.values()]), what="trackio error")
            await wait_for(pilot, lambda: store.snapshot(runs["hf-job"].key).job is not None
                           and store.snapshot(runs["hf-job"].key).job.stage == "ERROR")
            screen(app, scan, "start")

            # Every run on screen in turn, chosen with r, and its log lines (the panel
            # shows itself for the first run with a log; v shows it when hidden).
            shown = {}
            for source in ("trainer-log", "hf-job", "trackio-remote", "jsonl"):
                run = runs[source]
                await pick_run(pilot, app, run.key, scan)
                shown[source] = screen(app, scan, f"run {source}")
                panel = app.screen.log_panel
                if panel.has_class("-hidden"):
                    await pilot.press("v")
                expect_lines = app.snapshot.log_total > 0
                await wait_for(pilot, lambda p=panel, e=expect_lines: p.region.height > 0
                               and (not e or p.line_count > 0
                                    and p.virtual_size.height >= p.line_count
                                    and p.is_vertical_scroll_end),  # the newest lines in view
                               what=f"the log of {source}")
                await pilot.pause(0.1)
                shown[source] += screen(app, scan, f"log shown {source}")
            fleet = scan.seen["screen: fleet table"]
            job_card = scan.seen[f"screen: run card {runs['hf-job'].key}"]

            await pilot.press("k")
            skipped = screen(app, scan, "skipped")
            await pilot.press("escape")
            await pilot.press("question_mark")
            screen(app, scan, "help")
            await pilot.press("escape")

            jobs.fail_next("list", 400, body=HUB_ERROR)  # a Hub error first, then r reloads
            await pilot.press("j")
            listing = app.screen
            assert isinstance(listing, JobsScreen)
            await wait_for(pilot, lambda: "-error" in listing.query_one("#jobs-status").classes,
                           what="the Hub's error shown")
            assert "the Hub answered 400" in screen(app, scan, "jobs error")
            await pilot.press("r")
            await wait_for(pilot, lambda: listing.rows, what="jobs listed")
            screen(app, scan, "jobs")
            await pilot.press("escape")

            await pilot.press("d")
            diag = app.screen
            assert isinstance(diag, DiagnosisScreen)
            await wait_for(pilot, lambda: diag.history, what="Claude's answer")
            screen(app, scan, "diagnosis")
            await pilot.click("#question")
            await pilot.press(*"Why?", "enter")
            await wait_for(pilot, lambda: not diag.busy and len(claude.raw_bodies) == 2,
                           what="Claude's error")
            diag_text = screen(app, scan, "diagnosis error")
            await pilot.press("ctrl+s")
            assert diag.saved_to is not None
            await pilot.press("escape")

            await pilot.press("ctrl+s")
            await wait_for(pilot, lambda: list(save_dir.glob("*.csv")), what="saved view")
            screen(app, scan, "saved")

            await pilot.press("l")
            launch = app.screen
            assert isinstance(launch, LaunchScreen)
            await wait_for(pilot, lambda: launch._flavors, what="hardware loaded")
            screen(app, scan, "launch form")
            await pilot.press("ctrl+l")
            await wait_for(pilot, lambda: not isinstance(app.screen, LaunchScreen),
                           what="launched")
            await pilot.pause(0.3)
            screen(app, scan, "launched")

    inputs = {tmp_path / "stream.jsonl", tmp_path / "train.log"}
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p not in inputs]
    assert {p.suffix for p in written} >= {".md", ".svg", ".csv"}
    for path in written:
        scan(f"file {path.name}", path.read_bytes())
    scan_requests(scan, srv, "hub")
    scan_requests(scan, proxy.server, "trackio")
    scan_logs(scan, caplog)
    scan.check()

    # The places where secrets were planted show [REDACTED].
    jsonl = shown["jsonl"]
    assert f"grpo {MASK}" in jsonl  # the run's name, in the header and the status bar
    for line in (f"--token {MASK}", f"WANDB_API_KEY={MASK}", f"Authorization: {MASK}",
                 f"claude key {MASK} loaded", f"service reached with {MASK}"):
        assert line in jsonl, line
    snap = store.snapshot(runs["jsonl"].key)
    assert {f"loss/{MASK}", f"reward/{MASK}"} <= set(snap.series)
    cfg = snap.meta["config"]
    assert cfg["hub_token"] == MASK and cfg["WANDB_API_KEY"] == MASK
    assert cfg["service"] == MASK and cfg["anthropic_api_key"] == MASK
    assert cfg["report_to"] == f"wandb Authorization: {MASK}" and cfg["learning_rate"] == 3e-5
    assert snap.run.project == f"proj-{MASK}"
    (marker,) = [m for m in snap.markers if m.kind == "checkpoint"]
    assert dict(marker.detail) == {"note": f"pushed with {MASK}", "api_key": MASK,
                                   "auth": f"Bearer {MASK}", "svc": MASK, "claude": MASK}
    assert MASK in skipped and "not JSON" in skipped
    for line in ("Your token [REDACTED] has been saved", f"WANDB_API_KEY={MASK}",
                 f"'Authorization': '{MASK}'", f"ANTHROPIC_API_KEY={MASK}",
                 f"service with {MASK}"):
        assert line in shown["trainer-log"], line
    job = shown["hf-job"]
    assert f"CUDA OOM; HF_TOKEN={MASK}" in job  # the job's status message
    for line in (f"login with {MASK}", f"WANDB_API_KEY='{MASK}'", f"job: token {MASK}"):
        assert line in job, line
    job_meta = store.snapshot(runs["hf-job"].key).meta
    assert job_meta["command"] == ["python", "train.py", "--hub_token", MASK,
                                   f"WANDB_API_KEY={MASK}", f"--service={MASK}"]
    assert f"remote-{MASK}" in shown["trackio-remote"]
    assert f"remote-{MASK}" in fleet  # text, never markup: the mask is not eaten
    assert f"python train.py --hub_token {MASK} WANDB_API_KEY={MASK}" in job_card
    trackio_status = next(s for s in store.summary().sources.values()
                          if s.source.startswith("trackio"))
    assert f"database is locked by {MASK}" in trackio_status.message
    remote_cfg = store.snapshot(runs["trackio-remote"].key).meta["config"]
    assert remote_cfg["wandb_api_key"] == MASK and remote_cfg["hub_token"] == MASK
    assert "refused the request (400)" in diag_text and MASK in diag_text
    first = json.loads(claude.raw_bodies[0])["messages"][0]["content"]
    assert f"# Run grpo {MASK}" in first and f"--token {MASK}" in first
    assert f"key {MASK} with Authorization: {MASK}" in diag.saved_to.read_text()
    assert not jobs.faults.get("inspect") and not jobs.faults.get("list")  # errors were served
    saved = {p.suffix: p.read_text() for p in save_dir.iterdir()}
    assert f"grpo {MASK}" in saved[".svg"].replace("&#160;", " ")
    assert f"grpo {MASK}" in saved[".csv"]

    # The token goes to the launched job as a secret only.
    (post,) = srv.requests_to("POST", r"^/api/jobs/[^/]+$")
    body = post.json()
    assert body["secrets"] == {"HF_TOKEN": HF}
    rest = json.dumps({k: v for k, v in body.items() if k != "secrets"})
    assert not leaks(rest) and HF not in post.path and not post.query
    assert "HF_TOKEN" not in body.get("environment", {})


# -- the command line ------------------------------------------------------------------------


def test_summary_and_export_print_no_secret(hub, trackio, tmp_path):
    """`carl-tui summary` / `export` as real processes: their stdout, stderr and files."""
    srv, jobs = hub
    write_stream(tmp_path / "stream.jsonl")
    write_trainer_log(tmp_path / "train.log")
    plant_job(jobs)
    env = {**os.environ, "HF_ENDPOINT": srv.url, "PYTHONPATH": str(Path(__file__).parents[2])}
    scan = Scan()
    with CraftedFaultProxy(trackio.url) as proxy:
        proxy.crafted = (500, {"error": TRACKIO_ERROR})
        commands = {
            "summary jsonl": ["summary", "stream.jsonl", "--json"],
            "summary trainer log": ["summary", "--watch", "train.log", "--json"],
            "summary job": ["summary", "--job", JOB_ID, "--namespace", USER, "--timeout", "20"],
            "summary trackio": ["summary", "--trackio", proxy.url, "--project", "remote",
                                "--timeout", "1"],
            "export jsonl": ["export", "stream.jsonl"],
            "export csv": ["export", "stream.jsonl", "--format", "csv", "-o", "out.csv"],
        }
        procs = {name: subprocess.Popen([sys.executable, "-m", "carl_tui", *argv], env=env,
                                        cwd=tmp_path, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
                 for name, argv in commands.items()}
        out = {}
        for name, proc in procs.items():
            stdout, stderr = proc.communicate(timeout=60)
            out[name] = (proc.returncode, stdout, stderr)
            scan(f"{name} stdout", stdout)
            scan(f"{name} stderr", stderr)
    inputs = {tmp_path / "stream.jsonl", tmp_path / "train.log"}
    for path in tmp_path.rglob("*"):
        if path.is_file() and path not in inputs:
            scan(f"file {path.name}", path.read_bytes())
    scan_requests(scan, srv, "hub")
    scan_requests(scan, proxy.server, "trackio")
    scan.check()

    rc, stdout, _ = out["summary jsonl"]
    summary = json.loads(stdout)
    assert rc == 0 and summary["run"] == f"grpo {MASK}"
    assert {f"loss/{MASK}", f"reward/{MASK}", "loss"} <= set(summary["metrics"])
    rc, stdout, _ = out["summary trainer log"]
    assert rc == 0 and json.loads(stdout)["metrics"]["loss"]["count"] == 12
    rc, stdout, stderr = out["summary job"]
    assert rc == 0 and f"run {JOB_ID}" in stdout and "loss" in stdout, stderr
    rc, stdout, stderr = out["summary trackio"]
    assert rc == 1 and f"database is locked by {MASK}" in stderr and stdout == ""
    rc, stdout, _ = out["export jsonl"]
    rows = [json.loads(line) for line in stdout.splitlines()]
    assert rc == 0 and len(rows) == 61 and f"loss/{MASK}" in rows[59]
    assert out["export csv"][0] == 0
    assert f"loss/{MASK}" in (tmp_path / "out.csv").read_text().splitlines()[0]


# -- leaks found here, fixed outside this test's files (see each reason) ---------------------


async def test_jobs_panel_masks_a_token_in_a_job_command(hub):
    srv, jobs = hub
    jobs.add_job("job-cmd", flavor="t4-small", stage="RUNNING", labels=None,
                 command=["python", "train.py", "--hub_token", HF, f"WANDB_API_KEY={WANDB}",
                          f"--svc={SERVICE}"])
    jobs.add_job("job-labels", flavor="t4-small", stage="COMPLETED", created_at=time.time() - 60,
                 labels={"token": HF, "by": SERVICE})
    scan = Scan()
    app = build_app(DashboardConfig(sources=[open_file(Path("absent.jsonl"))],
                                    settings=Settings(refresh_interval=0.05),
                                    services=Services(hub_endpoint=srv.url)))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("j")
        listing = app.screen
        await wait_for(pilot, lambda: len(getattr(listing, "rows", ())) == 2, what="jobs listed")
        await pilot.pause(0.1)
        text = screen(app, scan, "jobs")
    scan_requests(scan, srv, "hub")
    scan.check()
    assert f"--hub_token {MASK}" in text and f"token={MASK}" in text


async def test_claude_answer_quoting_a_secret_is_masked_on_screen(hub, tmp_path):
    srv, _ = hub
    write_stream(tmp_path / "stream.jsonl")
    answer = (f"**Verdict:** the log shows the key {ANT} and the token {HF}.\n\n"
              f"- WANDB_API_KEY={WANDB}\n- Authorization: Bearer {BEARER}\n- service {SERVICE}\n"
              "\nRotate them.")
    claude = AnthropicState(keys={ANT}, replies=[Reply(answer, chunk=5)])
    install_messages_routes(srv, claude)
    i = next(i for i, r in enumerate(srv.routes) if "messages" in r[1].pattern)
    method, rx, handler = srv.routes[i]

    turn = threading.Semaphore(0)  # the server sends a piece each time the test scanned

    def paced(stream):
        for chunk in stream:
            turn.acquire(timeout=5)  # bounded: a test that stopped scanning cannot hang it
            yield chunk

    def slowly(req: Request) -> Response:
        resp = handler(req)
        if resp.stream is not None:  # the screen is scanned between the pieces
            resp.stream = paced(resp.stream)
        return resp

    srv.routes[i] = (method, rx, slowly)
    scan = Scan()
    app = stream_app(srv, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None, what="a run")
        await pilot.press("d")
        diag = app.screen
        k = 0
        while not diag.history:
            screen(app, scan, f"streaming {k}")
            k += 1
            turn.release()
            await pilot.pause(0.03)
        text = screen(app, scan, "answered")
        await pilot.press("ctrl+s")
        scan("saved diagnosis", diag.saved_to.read_text())
    scan_requests(scan, srv, "hub")
    scan.check()
    assert k > 3  # the screen was seen while the answer streamed in
    assert f"the key {MASK} and the token {MASK}" in text and f"WANDB_API_KEY={MASK}" in text


async def test_a_masked_name_shows_as_redacted(hub, tmp_path):
    srv, _ = hub
    write_stream(tmp_path / "stream.jsonl")
    install_messages_routes(srv, AnthropicState(keys={ANT}, replies=["Healthy."]))
    scan = Scan()
    app = stream_app(srv, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.snapshot is not None, what="a run")
        await pilot.press("r")
        await wait_for(pilot, lambda: row_count(app) == 1, what="the fleet table")
        fleet = screen(app, scan, "fleet table")
        await pilot.press("i")
        await wait_for(pilot, lambda: isinstance(app.screen, RunCardScreen), what="the card")
        card = screen(app, scan, "run card")
        await pilot.press("escape", "escape", "d")
        await wait_for(pilot, lambda: isinstance(app.screen, DiagnosisScreen), what="diagnosis")
        await wait_for(pilot, lambda: app.screen.history, what="Claude's answer")
        diagnosis = screen(app, scan, "diagnosis")
    scan.check()
    assert f"grpo {MASK}" in fleet and "jsonl" in fleet
    assert f"grpo {MASK}  [jsonl: proj-{MASK}]" in card
    assert f"Claude's diagnosis of grpo {MASK}" in diagnosis


def test_a_secret_in_a_long_skipped_value_is_masked(env, tmp_path):
    from carl_tui.sources.base import status_of
    from carl_tui.sources.jsonl import JsonlSource
    from carl_tui.store import RunStore

    path = tmp_path / "s.jsonl"
    rows = [{"step": 1, "loss": 0.52},
            {"step": 2, "loss": 0.49, "note": "pushed " + "y" * 60 + f" {HF} " + "z" * 20}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    source = JsonlSource(path)
    store = RunStore()
    store.apply(source.poll())
    store.apply([status_of(source, "live")])
    (status,) = store.summary().sources.values()
    (example,) = [ex for reason, _, ex in status.skip_reasons if reason == "value not a number"]
    assert "note=" in example and not leaks(example), example
