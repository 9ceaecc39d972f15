"""A fake of the Hub's repo and job-launch HTTP API, on a `FakeServer`.

Repos: `POST /api/repos/create`, `GET /api/models/{repo}` (repo_info),
`POST /api/models/{repo}/preupload/{rev}`, the LFS batch API
(`POST /{repo}.git/info/lfs/objects/batch`, basic transfer, `PUT` to an upload
URL), `POST /api/models/{repo}/commit/{rev}` (NDJSON).
Jobs launch: `POST /api/jobs/{ns}` (run_job / run_uv_job) and
`GET /api/jobs/hardware`, on the `JobsState` of `tests.fakes.hub_jobs`, whose
routes serve inspect, logs, metrics, list and cancel. Also `GET /api/whoami-v2`.

Uploads: the fake answers "regular" for small files (their bytes travel
base64 inside the commit) and "lfs" for large ones or weight-like names, as
the Hub does. huggingface_hub uploads LFS files through Xet when `hf_xet` is
installed; this fake speaks the plain LFS protocol only, so tests that upload
LFS files set `huggingface_hub.constants.HF_HUB_DISABLE_XET = True` (the
`HF_HUB_DISABLE_XET=1` environment variable, read at import).

Usage:
    hub, jobs = HubState(), JobsState(token=TEST_TOKEN)
    install_repo_routes(srv, hub)
    install_jobs_routes(srv, jobs, whoami=False); install_job_launch_routes(srv, jobs)
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets as _secrets
import threading
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.hub_jobs import JobsState
from tests.fakes.server import FakeServer, Request, Response

TEST_TOKEN = "hf_FakeTestTokenForLoopback0001"
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".onnx", ".gguf", ".msgpack")
LFS_THRESHOLD = 10 * 1024 * 1024

HARDWARE = [
    # name, pretty, cpu, ram, accelerator (model, quantity, vram) or None, micro-USD per minute
    ("cpu-basic", "CPU Basic", "2 vCPU", "16 GB", None, 167),
    ("cpu-upgrade", "CPU Upgrade", "8 vCPU", "32 GB", None, 500),
    ("t4-small", "Nvidia T4 - small", "4 vCPU", "15 GB", ("T4", "1", "16 GB"), 6667),
    ("a10g-small", "Nvidia A10G - small", "4 vCPU", "15 GB", ("A10G", "1", "24 GB"), 16667),
    ("a10g-large", "Nvidia A10G - large", "12 vCPU", "46 GB", ("A10G", "1", "24 GB"), 25000),
    ("a10g-largex4", "4x Nvidia A10G - large", "48 vCPU", "184 GB", ("A10G", "4", "96 GB"), 83333),
    ("a100-large", "Nvidia A100 - large", "12 vCPU", "142 GB", ("A100", "1", "80 GB"), 41667),
    ("h200x2", "2x Nvidia H200", "46 vCPU", "512 GB", ("H200", "2", "282 GB"), 166667),
]


def hardware_json() -> list[dict[str, Any]]:
    out = []
    for name, pretty, cpu, ram, acc, micro in HARDWARE:
        out.append({
            "name": name,
            "prettyName": pretty,
            "cpu": cpu,
            "ram": ram,
            "ephemeralStorage": "50 GB",
            "accelerator": None if acc is None else {
                "type": "gpu", "model": acc[0], "quantity": acc[1], "vram": acc[2],
                "manufacturer": "Nvidia",
            },
            "unitCostMicroUSD": micro,
            "unitCostUSD": micro / 1e6,
            "unitLabel": "minute",
        })
    return out


@dataclass
class Fault:
    """Make the next `times` requests of a route fail: an HTTP status, or a dropped connection."""

    status: int = 500
    body: Any = None
    drop: bool = False  # send the status line and headers, then cut the connection
    times: int = 1


@dataclass
class FakeRepo:
    repo_id: str
    private: bool
    files: dict[str, bytes] = field(default_factory=dict)  # path -> content (LFS: the blob)
    commits: list[str] = field(default_factory=list)


@dataclass
class HubState:
    user: str = "alice"
    tokens: set[str] = field(default_factory=lambda: {TEST_TOKEN})
    writable: set[str] = field(default_factory=set)  # namespaces the user may write; + user
    repos: dict[str, FakeRepo] = field(default_factory=dict)
    # LFS oid -> bytes (uploaded, not committed)
    blobs: dict[str, bytes] = field(default_factory=dict)
    commit_bodies: list[list[dict]] = field(default_factory=list)
    faults: dict[str, Fault] = field(default_factory=dict)  # route name -> fault
    lock: threading.RLock = field(default_factory=threading.RLock)

    def can_write(self, namespace: str) -> bool:
        return namespace == self.user or namespace in self.writable

    def take_fault(self, route: str) -> Fault | None:
        with self.lock:
            f = self.faults.get(route)
            if f is None:
                return None
            f.times -= 1
            if f.times <= 0:
                del self.faults[route]
            return f


# -- helpers ------------------------------------------------------------------


def _err(status: int, message: str, code: str | None = None) -> Response:
    headers = {"X-Error-Message": message}
    if code:
        headers["X-Error-Code"] = code
    return Response.json({"error": message}, status=status, headers=headers)


def _dropped() -> Response:
    def chunks():
        yield b'{"partial": '
        raise ConnectionResetError("dropped by the fake")

    return Response(200, headers={"Content-Type": "application/json"}, stream=chunks())


def _fault(state: HubState, route: str) -> Response | None:
    f = state.take_fault(route)
    if f is None:
        return None
    if f.drop:
        return _dropped()
    body = f.body if f.body is not None else {"error": f"injected {f.status}"}
    return Response.json(body, status=f.status)


def _auth(state: HubState, req: Request) -> Response | None:
    header = req.headers.get("authorization", "")
    token = header[7:] if header.lower().startswith("bearer ") else ""
    if token not in state.tokens:
        return _err(401, "Invalid credentials in Authorization header")
    return None


# -- repos --------------------------------------------------------------------


def install_repo_routes(server: FakeServer, state: HubState, *, whoami: bool = True) -> None:
    def base() -> str:  # the port is known once started
        return server.url

    def do_whoami(req: Request) -> Response:
        if (r := _auth(state, req)) is not None:
            return r
        return Response.json({"type": "user", "name": state.user, "fullname": state.user.title(),
                              "orgs": [{"name": o} for o in sorted(state.writable)]})

    def create(req: Request) -> Response:
        if (r := _fault(state, "create_repo")) is not None:
            return r
        if (r := _auth(state, req)) is not None:
            return r
        body = req.json()
        ns = body.get("organization") or state.user
        repo_id = f"{ns}/{body['name']}"
        if not state.can_write(ns):
            return _err(403, "You don't have the rights to create a model under the namespace "
                             f"\"{ns}\"")
        with state.lock:
            if repo_id in state.repos:
                return Response.json({"error": "You already created this model repo",
                                      "url": f"{base()}/{repo_id}"}, status=409)
            state.repos[repo_id] = FakeRepo(repo_id, private=body.get("visibility") == "private"
                                            or bool(body.get("private")))
        return Response.json({"url": f"{base()}/{repo_id}", "name": repo_id, "id": repo_id})

    def repo_info(req: Request) -> Response:
        if (r := _auth(state, req)) is not None:
            return r
        repo_id = req.match.group("repo")
        repo = state.repos.get(repo_id)
        if repo is None:
            return _err(404, "Repository not found", "RepoNotFound")
        sha = repo.commits[-1] if repo.commits else "0" * 40
        return Response.json({"id": repo_id, "modelId": repo_id, "sha": sha,
                              "private": repo.private,
                              "siblings": [{"rfilename": p} for p in sorted(repo.files)]})

    def _writable_repo(req: Request) -> tuple[FakeRepo | None, Response | None]:
        if (r := _auth(state, req)) is not None:
            return None, r
        repo_id = req.match.group("repo")
        repo = state.repos.get(repo_id)
        if repo is None:
            return None, _err(404, "Repository not found", "RepoNotFound")
        if not state.can_write(repo_id.split("/")[0]):
            return None, _err(403, "You don't have write access to this repo")
        return repo, None

    def preupload(req: Request) -> Response:
        if (r := _fault(state, "preupload")) is not None:
            return r
        repo, r = _writable_repo(req)
        if r is not None:
            return r
        files = []
        for f in req.json()["files"]:
            lfs = f["size"] >= LFS_THRESHOLD or f["path"].endswith(LFS_SUFFIXES)
            files.append({"path": f["path"], "uploadMode": "lfs" if lfs else "regular",
                          "shouldIgnore": False, "oid": None})
        last = repo.commits[-1] if repo.commits else None
        return Response.json({"files": files, "commitOid": last})

    def lfs_batch(req: Request) -> Response:
        if (r := _fault(state, "lfs_batch")) is not None:
            return r
        _repo, r = _writable_repo(req)
        if r is not None:
            return r
        body = req.json()
        objects = []
        for o in body["objects"]:
            obj = {"oid": o["oid"], "size": o["size"]}
            if o["oid"] not in state.blobs:
                href = f"{base()}/lfs-upload/{o['oid']}"
                obj["actions"] = {"upload": {"href": href, "header": {}}}
            objects.append(obj)
        return Response.json({"transfer": "basic", "objects": objects, "hash_algo": "sha256"})

    def lfs_put(req: Request) -> Response:
        if (r := _fault(state, "lfs_upload")) is not None:
            return r
        oid = req.match.group("oid")
        if hashlib.sha256(req.body).hexdigest() != oid:
            return _err(400, "sha256 mismatch")
        with state.lock:
            state.blobs[oid] = req.body
        return Response(200)

    def commit(req: Request) -> Response:
        if (r := _fault(state, "commit")) is not None:
            return r
        repo, r = _writable_repo(req)
        if r is not None:
            return r
        lines = [json.loads(line) for line in req.body.decode().splitlines() if line.strip()]
        if not lines or lines[0].get("key") != "header":
            return _err(400, "commit payload must start with a header")
        new_files: dict[str, bytes] = {}
        for item in lines[1:]:
            v = item["value"]
            if item["key"] == "file":
                new_files[v["path"]] = base64.b64decode(v["content"])
            elif item["key"] == "lfsFile":
                blob = state.blobs.get(v["oid"])
                if blob is None:
                    return _err(422, f"LFS file {v['path']} was not uploaded")
                new_files[v["path"]] = blob
            elif item["key"] in ("deletedFile", "deletedFolder"):
                new_files.pop(v["path"], None)
        oid = _secrets.token_hex(20)
        with state.lock:
            repo.files.update(new_files)
            repo.commits.append(oid)
            state.commit_bodies.append(lines)
        return Response.json({"success": True, "commitOid": oid,
                              "commitUrl": f"{base()}/{repo.repo_id}/commit/{oid}",
                              "pullRequestUrl": None})

    repo = r"(?P<repo>[^/]+/[^/]+?)"
    if whoami:
        server.route("GET", r"/api/whoami-v2", do_whoami)
    server.route("POST", r"/api/repos/create", create)
    server.route("GET", rf"/api/models/{repo}(?:/revision/[^/]+)?", repo_info)
    server.route("POST", rf"/api/models/{repo}/preupload/[^/]+", preupload)
    server.route("POST", rf"/{repo}\.git/info/lfs/objects/batch", lfs_batch)
    server.route("PUT", r"/lfs-upload/(?P<oid>[0-9a-f]{64})", lfs_put)
    server.route("POST", rf"/api/models/{repo}/commit/[^/]+", commit)


# -- jobs ---------------------------------------------------------------------


def install_job_launch_routes(server: FakeServer, state: JobsState) -> None:
    """`POST /api/jobs/{ns}` (create) and `GET /api/jobs/hardware`, on the jobs fake's state.

    A created job becomes a `FakeJob` in `state` (SCHEDULING), so the routes of
    `install_jobs_routes` (inspect, logs, cancel, list) see it. Faults:
    `state.fail_next("create" | "hardware", status)`. The request bodies are in
    `server.requests` (`server.requests_to("POST", r"^/api/jobs/[^/]+$")`)."""

    def guard(req: Request, route: str) -> Response | None:
        if req.headers.get("authorization") != f"Bearer {state.token}":
            return _err(401, "Invalid credentials in Authorization header")
        fault = state._take_fault(route)
        if fault is not None:
            return Response(fault.status, fault.body, {"Content-Type": "application/json"})
        return None

    def hardware(req: Request) -> Response:
        if (r := guard(req, "hardware")) is not None:
            return r
        return Response.json(hardware_json())

    def create(req: Request) -> Response:
        if (r := guard(req, "create")) is not None:
            return r
        ns = req.match.group("ns")
        body = req.json()
        if ns != state.user and ns not in getattr(state, "orgs", ()):
            return _err(403, f"You cannot run jobs under the namespace {ns}")
        if body.get("flavor") not in {h[0] for h in HARDWARE}:
            return _err(400, f"Invalid flavor {body.get('flavor')!r}")
        if not body.get("command") or not (body.get("dockerImage") or body.get("spaceId")):
            return _err(400, "A job needs an image and a command")
        job_id = _secrets.token_hex(12)
        job = state.add_job(job_id, ns, flavor=body["flavor"], docker_image=body.get("dockerImage"),
                            command=list(body["command"]), labels=body.get("labels"))
        out = job.to_json(ns)
        out["environment"] = body.get("environment", {})
        out["secrets"] = {k: None for k in body.get("secrets", {})}  # the Hub never echoes values
        return Response.json(out)

    server.route("GET", r"/api/jobs/hardware", hardware)
    server.route("POST", r"/api/jobs/(?P<ns>[^/]+)", create)
