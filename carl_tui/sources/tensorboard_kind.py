"""The TensorBoard kind: `--tensorboard LOGDIR` (each folder of event files a run).
Stdlib only at import; the reader (numpy, protobuf parsing) loads when it is built."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from carl_tui.identity import TENSORBOARD
from carl_tui.sources.kinds import (
    Flag,
    Opened,
    SourceKind,
    SourceRequest,
    check_dir,
    path_arg,
    walk_names,
)


def _check(req: SourceRequest, hint) -> None:
    check_dir("--tensorboard", req.get("tensorboard"), req.must_exist)


def _open(req: SourceRequest) -> Opened:
    runs = [req.run] if req.run else None
    logdir = Path(req.get("tensorboard", "."))

    def make() -> list[Any]:
        from carl_tui.sources.tensorboard import TensorBoardSource  # on first use

        return [TensorBoardSource(logdir, runs=runs)]
    return Opened(make, f"carl-tui · tensorboard {logdir}", req.run)


def _hint(p: Path, names: list[str]) -> str:
    if any(n.startswith("events.out.tfevents") for n in names) or any(
        n.startswith("events.out.tfevents") for n in walk_names(p, 3)
    ):
        return f" (it holds TensorBoard logs: use --tensorboard {p})"
    return ""


TENSORBOARD_KIND = SourceKind(
    name=TENSORBOARD,
    flags=(Flag("--tensorboard", metavar="LOGDIR", type=path_arg, repeatable=True,
                help="TensorBoard event files under LOGDIR (each folder of them is a run)"),),
    open=_open,
    check=_check,
    hint=_hint,
    near=lambda req: [Path(req.get("tensorboard"))],
    run_sources=(TENSORBOARD,),
)
