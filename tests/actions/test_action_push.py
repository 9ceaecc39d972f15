"""Pushing a checkpoint through the real huggingface_hub client to a loopback Hub fake."""

from __future__ import annotations

import os
import socket

import pytest

pytest.importorskip("huggingface_hub")
from huggingface_hub import HfApi

from carl_tui.actions.push import PHASES, find_checkpoints, push_choices, push_folder
from carl_tui.errors import CarlError
from tests.fakes.hub_repos import TEST_TOKEN, Fault, HubState, install_repo_routes


@pytest.fixture
def hub(server, monkeypatch):
    import huggingface_hub.constants as hc

    server.routes.clear()
    server.requests.clear()
    state = HubState()
    install_repo_routes(server, state)
    # What HF_ENDPOINT does (read once at import): some URLs are checked against it.
    monkeypatch.setattr(hc, "ENDPOINT", server.url)
    return server, state


@pytest.fixture
def no_xet(monkeypatch):
    """The fake speaks plain LFS; huggingface_hub would use Xet for LFS files when hf_xet is
    installed. HF_HUB_DISABLE_XET=1 does this for a whole process (read at import)."""
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_DISABLE_XET", True)


def api(srv, token=TEST_TOKEN) -> HfApi:
    return HfApi(endpoint=srv.url, token=token)


def make_checkpoint(root, name="checkpoint-40", weights: bytes | None = None):
    d = root / name
    d.mkdir(parents=True)
    (d / "config.json").write_text('{"model_type": "llama", "vocab_size": 32}')
    (d / "trainer_state.json").write_text('{"global_step": 40}')
    (d / "tokenizer").mkdir()
    (d / "tokenizer" / "vocab.txt").write_text("a\nb\nc\n")
    (d / ".git").mkdir()
    (d / ".git" / "HEAD").write_text("ref: refs/heads/main")
    if weights is not None:
        (d / "model.safetensors").write_bytes(weights)
    return d


class Recorder:
    def __init__(self):
        self.events = []

    def __call__(self, p):
        self.events.append(p)

    @property
    def phases(self):
        out = []
        for e in self.events:
            if not out or out[-1] != e.phase:
                out.append(e.phase)
        return out


# -- finding checkpoints ------------------------------------------------------------


def test_checkpoints_newest_first(tmp_path):
    for n in (2, 100, 10):
        (tmp_path / f"checkpoint-{n}").mkdir()
    (tmp_path / "checkpoint-x").mkdir()
    (tmp_path / "checkpoint-7").write_text("a file, not a folder")
    (tmp_path / "runs").mkdir()
    assert [p.name for p in find_checkpoints(tmp_path)] == ["checkpoint-100", "checkpoint-10",
                                                            "checkpoint-2"]
    assert push_choices(tmp_path)[-1] == tmp_path and len(push_choices(tmp_path)) == 4
    assert find_checkpoints(tmp_path / "missing") == [] and push_choices(tmp_path / "missing") == []


# -- pushing ------------------------------------------------------------------------


def test_push_small_files_in_one_commit_with_progress(hub, tmp_path):
    srv, state = hub
    ckpt = make_checkpoint(tmp_path)
    rec = Recorder()
    result = push_folder(ckpt, "alice/tiny-carl", api=api(srv), progress=rec)

    repo = state.repos["alice/tiny-carl"]
    assert repo.private is True
    assert repo.files == {
        "config.json": b'{"model_type": "llama", "vocab_size": 32}',
        "trainer_state.json": b'{"global_step": 40}',
        "tokenizer/vocab.txt": b"a\nb\nc\n",
    }  # .git/ skipped, as upload_folder does
    assert len(repo.commits) == 1
    assert result.commit_oid == repo.commits[0]
    assert result.commit_url == f"{srv.url}/alice/tiny-carl/commit/{repo.commits[0]}"
    assert result.files == 3 and result.bytes == sum(len(v) for v in repo.files.values())
    assert rec.phases == list(PHASES)
    uploads = [e for e in rec.events if e.phase == "uploading"]
    assert [e.files_done for e in uploads] == [0, 1, 2, 3]
    assert [e.bytes_done for e in uploads] == sorted(e.bytes_done for e in uploads)
    assert uploads[-1].bytes_done == result.bytes and uploads[-1].text().startswith("uploading 3/3")
    assert rec.events[-1].fraction == 1.0
    create = srv.requests_to("POST", r"^/api/repos/create$")[0].json()
    assert create["name"] == "tiny-carl" and create["organization"] == "alice"
    assert create["visibility"] == "private"
    assert "commit" in srv.requests[-1].path  # the commit is the last thing sent


def test_push_weights_through_lfs(hub, tmp_path, no_xet):
    srv, state = hub
    weights = os.urandom(64 * 1024)
    ckpt = make_checkpoint(tmp_path, weights=weights)
    result = push_folder(ckpt, "alice/with-weights", api=api(srv), path_in_repo="ckpt-40")
    repo = state.repos["alice/with-weights"]
    assert repo.files["ckpt-40/model.safetensors"] == weights
    assert len(srv.requests_to("PUT", r"^/lfs-upload/")) == 1
    lfs_lines = [line for line in state.commit_bodies[-1] if line["key"] == "lfsFile"]
    assert [line["value"]["path"] for line in lfs_lines] == ["ckpt-40/model.safetensors"]
    assert result.bytes == len(weights) + sum(
        len(v) for k, v in repo.files.items() if not k.endswith(".safetensors"))


def test_push_to_an_existing_repo_adds_a_commit(hub, tmp_path):
    srv, state = hub
    first = push_folder(make_checkpoint(tmp_path, "checkpoint-1"), "alice/r", api=api(srv))
    second = push_folder(make_checkpoint(tmp_path, "checkpoint-2"), "alice/r", api=api(srv),
                         private=False)
    assert first.commit_oid != second.commit_oid
    assert state.repos["alice/r"].commits == [first.commit_oid, second.commit_oid]
    assert state.repos["alice/r"].private is True  # an existing repo keeps its visibility


def test_rejected_token(hub, tmp_path):
    srv, state = hub
    rec = Recorder()
    with pytest.raises(CarlError) as ei:
        push_folder(make_checkpoint(tmp_path), "alice/x", api=api(srv, "hf_NotAValidTokenAtAll"),
                    progress=rec)
    assert ei.value.kind == "auth" and ei.value.status == 401
    assert "hf_NotAValid" not in str(ei.value)
    assert "done" not in rec.phases and state.repos == {}


def test_no_write_access(hub, tmp_path):
    srv, state = hub
    rec = Recorder()
    with pytest.raises(CarlError) as ei:
        push_folder(make_checkpoint(tmp_path), "big-org/model", api=api(srv), progress=rec)
    assert ei.value.kind == "forbidden" and ei.value.status == 403
    assert "big-org/model" in str(ei.value)
    assert "done" not in rec.phases and state.repos == {}


def test_existing_repo_without_write_access(hub, tmp_path):
    srv, state = hub
    from tests.fakes.hub_repos import FakeRepo

    state.repos["big-org/model"] = FakeRepo("big-org/model", private=False)
    with pytest.raises(CarlError) as ei:
        push_folder(make_checkpoint(tmp_path), "big-org/model", api=api(srv))
    assert ei.value.kind == "forbidden"
    assert state.repos["big-org/model"].commits == []


def test_missing_and_empty_folders_send_nothing(hub, tmp_path):
    srv, _ = hub
    with pytest.raises(CarlError) as ei:
        push_folder(tmp_path / "nope", "alice/x", api=api(srv))
    assert ei.value.kind == "missing" and "does not exist" in str(ei.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(CarlError, match="has no files"):
        push_folder(tmp_path / "empty", "alice/x", api=api(srv))
    with pytest.raises(CarlError, match="user/name"):
        push_folder(make_checkpoint(tmp_path), "no-namespace", api=api(srv))
    assert srv.requests == []


def test_connection_dropped_during_commit(hub, tmp_path):
    srv, state = hub
    state.faults["commit"] = Fault(drop=True)
    rec = Recorder()
    with pytest.raises(CarlError) as ei:
        push_folder(make_checkpoint(tmp_path), "alice/dropped", api=api(srv), progress=rec)
    assert ei.value.kind == "network"
    assert rec.phases[-1] == "committing" and "done" not in rec.phases
    assert state.repos["alice/dropped"].commits == [] and state.repos["alice/dropped"].files == {}


def test_hub_unreachable(tmp_path):
    with socket.socket() as s:  # a port with nobody listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rec = Recorder()
    with pytest.raises(CarlError) as ei:
        api = HfApi(endpoint=f"http://127.0.0.1:{port}", token=TEST_TOKEN)
        push_folder(make_checkpoint(tmp_path), "alice/x", api=api, progress=rec)
    assert ei.value.kind == "network" and "connection" in str(ei.value)
    assert rec.phases == ["checking", "creating repo"]


def test_token_comes_from_the_environment(hub, tmp_path, monkeypatch):
    srv, state = hub
    monkeypatch.setenv("HF_TOKEN", TEST_TOKEN)
    push_folder(make_checkpoint(tmp_path), "alice/env", endpoint=srv.url)
    assert state.repos["alice/env"].commits
    assert all(r.headers.get("authorization") == f"Bearer {TEST_TOKEN}"
               for r in srv.requests if r.path.startswith("/api/"))


def test_no_token_at_all(hub, tmp_path, monkeypatch):
    srv, _ = hub
    import huggingface_hub

    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)
    with pytest.raises(CarlError) as ei:
        push_folder(make_checkpoint(tmp_path), "alice/x", endpoint=srv.url)
    assert ei.value.kind == "auth" and "hf auth login" in str(ei.value)
    assert srv.requests == []
