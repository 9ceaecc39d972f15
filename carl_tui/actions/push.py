"""Push a checkpoint (or any output folder) to a Hub model repo.

Steps, each reported to a progress callback: check the folder, create the
repo (private by default, fine if it exists), prepare (ask the Hub how each
file travels), upload the large files one by one (files and bytes done of
total), then one commit. Nothing is visible on the Hub before the commit, and
"done" is reported only once the commit is made: a failure at any step raises
`ActionError` with a plain message.

This is what `HfApi.upload_folder` does for a folder of checkpoint size (one
commit), but through `preupload_lfs_files` file by file so that the progress
is real, and with the same files skipped (`.git/`, `.cache/huggingface/`).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from carl_tui.actions.action_error import ActionError
from carl_tui.hub import find_token, hub_error, hub_module, make_api

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_ALWAYS_SKIPPED = (".git/*", "*/.git/*", ".cache/huggingface/*", "*/.cache/huggingface/*")

PHASES = ("checking", "creating repo", "preparing", "uploading", "committing", "done")


@dataclass(frozen=True)
class PushProgress:
    phase: str  # one of PHASES
    files_done: int = 0
    files_total: int = 0
    bytes_done: int = 0
    bytes_total: int = 0
    current: str = ""  # the file being uploaded

    @property
    def fraction(self) -> float:
        if self.bytes_total > 0:
            return min(1.0, self.bytes_done / self.bytes_total)
        return min(1.0, self.files_done / self.files_total) if self.files_total else 0.0

    def text(self) -> str:
        if self.phase == "uploading":
            return (f"uploading {self.files_done}/{self.files_total} files, "
                    f"{human_bytes(self.bytes_done)} of {human_bytes(self.bytes_total)}")
        if self.phase == "checking":
            return "checking the folder"
        if self.phase == "preparing":
            return f"preparing {self.files_total} files"
        if self.phase == "committing":
            return f"committing {self.files_total} files"
        return self.phase


@dataclass(frozen=True)
class PushResult:
    repo_id: str
    repo_url: str
    commit_url: str
    commit_oid: str
    files: int
    bytes: int


ProgressCallback = Callable[[PushProgress], None]


def human_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def find_checkpoints(output_dir: str | Path) -> list[Path]:
    """The `checkpoint-N` folders of a trainer output directory, newest (highest N) first."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        m = _CHECKPOINT.match(child.name)
        if m and child.is_dir():
            found.append((int(m.group(1)), child))
    return [p for _, p in sorted(found, key=lambda t: t[0], reverse=True)]


def push_choices(output_dir: str | Path) -> list[Path]:
    """What the push dialog offers: the checkpoints newest first, then the output directory."""
    root = Path(output_dir)
    return [*find_checkpoints(root), root] if root.is_dir() else []


def list_files(folder: str | Path, exclude: Sequence[str] = ()) -> list[tuple[str, Path, int]]:
    """(path in repo, local path, size) of every file to upload, sorted by path."""
    root = Path(folder)
    out = []
    for path in sorted(root.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(root).as_posix()
        if any(fnmatch.fnmatch(rel, pat) for pat in (*_ALWAYS_SKIPPED, *exclude)):
            continue
        out.append((rel, path, path.stat().st_size))
    return out


def push_folder(
    folder: str | Path,
    repo_id: str,
    *,
    token: str | None = None,
    endpoint: str | None = None,
    private: bool = True,
    path_in_repo: str = "",
    commit_message: str | None = None,
    exclude: Sequence[str] = (),
    progress: ProgressCallback | None = None,
    api=None,
    quiet: bool = True,
) -> PushResult:
    """Upload `folder` to the model repo `repo_id` in one commit; returns the commit URL.

    Blocking: call from a worker thread. `progress` is called from that same
    thread. `quiet` turns huggingface_hub's own progress bars off. Raises
    `ActionError` for a missing or empty folder, a missing or rejected token
    (401), no write access (403), or a lost connection.
    """
    report = progress or (lambda p: None)
    folder = Path(folder)
    report(PushProgress("checking"))
    files = _files_to_push(folder, repo_id, exclude)
    total_bytes = sum(size for _, _, size in files)
    n = len(files)
    api = _hub_api(api, token, endpoint, quiet)

    report(PushProgress("creating repo", 0, n, 0, total_bytes))
    try:
        repo_url = api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
    except Exception as exc:  # noqa: BLE001  (any client failure becomes a plain message)
        raise hub_error(exc, "Creating the repo", repo_id=repo_id) from None

    message = commit_message or f"Upload {folder.name} with carl-tui"
    info = _upload_and_commit(api, repo_id, files, path_in_repo, message, report)
    result = PushResult(
        repo_id=repo_id,
        repo_url=str(repo_url),
        commit_url=str(info.commit_url),
        commit_oid=str(info.oid),
        files=n,
        bytes=total_bytes,
    )
    report(PushProgress("done", n, n, total_bytes, total_bytes))
    return result


def _files_to_push(folder: Path, repo_id: str,
                   exclude: Sequence[str]) -> list[tuple[str, Path, int]]:
    """The files of `folder` to upload, after checking the folder and the repo id."""
    if not folder.exists():
        raise ActionError(f"Push failed: the folder {folder} does not exist.", kind="missing")
    if not folder.is_dir():
        raise ActionError(f"Push failed: {folder} is a file, not a folder.", kind="missing")
    if "/" not in repo_id or repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise ActionError(f"Push failed: {repo_id!r} is not a repo id of the form user/name.",
                          kind="invalid")
    files = list_files(folder, exclude)
    if not files:
        raise ActionError(f"Push failed: the folder {folder} has no files.", kind="missing")
    return files


def _hub_api(api, token: str | None, endpoint: str | None, quiet: bool):
    """`api` if given, else an `HfApi` with the token found (`ActionError` when there is none)."""
    try:
        hub_module()
    except ImportError as exc:
        raise ActionError(f"Push failed: {exc}.", kind="missing") from None
    # lazy: huggingface_hub only when a checkpoint is pushed (the [hub] extra)
    from huggingface_hub.utils import disable_progress_bars

    if quiet:  # progress bars on stderr would scribble over a full-screen app
        disable_progress_bars()
    if api is not None:
        return api
    found = find_token(token)
    if found is None:
        raise ActionError(
            "Push failed: no Hugging Face token. Run `hf auth login` or set HF_TOKEN "
            "to a token with write access.",
            kind="auth",
        )
    return make_api(found, endpoint)


def _upload_and_commit(api, repo_id: str, files: list[tuple[str, Path, int]],
                       path_in_repo: str, message: str, report: ProgressCallback):
    """Upload the files one by one (reporting files and bytes done), then make one commit."""
    # lazy: huggingface_hub only when a checkpoint is pushed (the [hub] extra)
    from huggingface_hub import CommitOperationAdd

    prefix = path_in_repo.strip("/")
    ops = [
        CommitOperationAdd(path_in_repo=f"{prefix}/{rel}" if prefix else rel,
                           path_or_fileobj=str(path))
        for rel, path, _ in files
    ]
    sizes = [size for _, _, size in files]
    n, total_bytes = len(files), sum(sizes)
    report(PushProgress("preparing", 0, n, 0, total_bytes))
    done_bytes = 0
    try:
        for i, (op, size) in enumerate(zip(ops, sizes)):
            report(PushProgress("uploading", i, n, done_bytes, total_bytes, op.path_in_repo))
            api.preupload_lfs_files(repo_id, [op], repo_type="model")
            done_bytes += size
        report(PushProgress("uploading", n, n, done_bytes, total_bytes))
        report(PushProgress("committing", n, n, done_bytes, total_bytes))
        return api.create_commit(repo_id, operations=ops, commit_message=message,
                                 repo_type="model")
    except Exception as exc:  # noqa: BLE001  (any client failure becomes a plain message)
        raise hub_error(exc, "Uploading", repo_id=repo_id) from None
