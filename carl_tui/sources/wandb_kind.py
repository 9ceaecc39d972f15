"""The W&B kind: `--wandb PATH`, a run folder (wandb/run-*, wandb/offline-run-*), its
`.wandb` log, or a wandb/ folder of runs. Stdlib only at import; the reader loads when
it is built."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from carl_tui.identity import WANDB
from carl_tui.sources.kinds import (
    Flag,
    Opened,
    SourceKind,
    SourceRequest,
    check_dir,
    path_arg,
)


def _check(req: SourceRequest, hint) -> None:
    path = req.get("wandb")
    if not path.endswith(".wandb"):  # a run's log file is fine too
        check_dir("--wandb", path, req.must_exist)


def _open(req: SourceRequest) -> Opened:
    runs = [req.run] if req.run else None
    path = Path(req.get("wandb", "."))

    def make() -> list[Any]:
        from carl_tui.sources.wandb_run import WandbSource  # on first use

        return [WandbSource(path, runs=runs)]
    return Opened(make, f"carl-tui · wandb {path}", req.run)


def _hint(p: Path, names: list[str]) -> str:
    if "wandb" in names or any(n.startswith(("run-", "offline-run-")) and (p / n).is_dir()
                               for n in names):  # W&B's run folders (not run-0.jsonl)
        return f" (it holds W&B runs: use --wandb {p})"
    return ""


def run_dir(path: Path, run_id: str | None) -> Path | None:
    """The W&B run folder of `run_id` under `path` (a run folder, its `.wandb` file, or a
    `wandb/` folder of runs)."""
    if path.is_file():
        path = path.parent
    if (path / "files").is_dir() or any(path.glob("run-*.wandb")):
        return path
    runs = sorted((p for p in path.glob("*run-*") if p.is_dir() and p.name != "latest-run"),
                  key=lambda p: p.stat().st_mtime, reverse=True)
    if run_id:
        runs = [p for p in runs if p.name.endswith(f"-{run_id}")]
    return runs[0] if runs else None


WANDB_KIND = SourceKind(
    name=WANDB,
    flags=(Flag("--wandb", metavar="PATH", type=path_arg, repeatable=True,
                help="a W&B run folder (wandb/run-*, wandb/offline-run-*) or a wandb/ folder"),),
    open=_open,
    check=_check,
    hint=_hint,
    run_sources=(WANDB,),
)
