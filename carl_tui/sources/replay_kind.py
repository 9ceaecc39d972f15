"""The replay kind: `carl-tui replay FILE [--speed X]`, a recorded stream played back.
It has no source flag: the `replay` command names its file (and its speed)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from carl_tui.identity import REPLAY
from carl_tui.sources.kinds import (
    Flag,
    Opened,
    RequestError,
    SourceKind,
    SourceRequest,
    check_file,
)


def _check(req: SourceRequest, hint) -> None:
    speed = req.get("speed", 1.0)
    if not math.isfinite(speed) or speed < 0:
        raise RequestError("--speed must be a number >= 0 (0 = as fast as possible)")
    check_file("replay", req.get("replay"), True, hint)


def _open(req: SourceRequest) -> Opened:
    speed = req.get("speed", 1.0)
    speed = math.inf if speed == 0 else speed
    path = Path(req.get("replay", ""))

    def make() -> list[Any]:
        from carl_tui.sources.replay import ReplaySource  # the reader: on first use

        return [ReplaySource(path, speed=speed)]
    return Opened(make, f"carl-tui · replay {path.name}", req.run)


REPLAY_KIND = SourceKind(
    name=REPLAY,
    # named by the `replay` command's FILE and --speed, not by source flags
    flags=(Flag("replay", help="", commands=frozenset()),
           Flag("speed", help="", commands=frozenset())),
    label="replay",
    open=_open,
    check=_check,
    near=lambda req: [Path(req.get("replay"))],
    fleet=lambda pool: [],
)
