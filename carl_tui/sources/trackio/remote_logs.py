"""Reading a remote Trackio project through `get_logs`, for servers without
`query_project` (older Trackio): each poll fetches every run's whole log, which
the server down-samples, and keeps the points past the last step already sent."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from carl_tui.sources.base import SourceError
from carl_tui.sources.rows import iso_to_epoch
from carl_tui.sources.trackio.remote_http import UnknownApi
from carl_tui.sources.trackio.remote_rows import RunPoints, row_point
from carl_tui.sources.unused_input import UnusedInput


class LogsFallback:
    """The newest step sent per run, between polls."""

    def __init__(self) -> None:
        self.last: dict[str, int] = {}  # run id -> last step sent

    def read(self, call: Callable[..., Any], project: str | None, runs: list, url: str,
             unused_input: UnusedInput) -> RunPoints:
        """The new points of `runs` (`RemoteRun`s) through `call` (the source's API call)."""
        out = RunPoints()
        for run in runs:
            try:
                rows = call("get_logs", project=project, run=run.name)
            except UnknownApi:
                raise SourceError(f"{url} offers no way to read logs", retry=False) from None
            if not isinstance(rows, list):
                raise SourceError(f"malformed reply from {url} (logs are not a list)")
            last = self.last.get(run.id, -(2**62))
            points = []
            for row in rows:
                if not isinstance(row, dict):
                    continue
                metrics = {k: v for k, v in row.items() if k not in ("step", "timestamp")}
                point = row_point(row.get("step"), metrics, unused_input,  # None: no valid step
                                  out.nonfinite.setdefault(run.id, []))
                if point is not None and point[0] > last:
                    points.append(point)
                    out.newest[run.id] = iso_to_epoch(row.get("timestamp"))
            points.sort(key=lambda p: p[0])
            if points:
                self.last[run.id] = points[-1][0]
                out.by_run[run.id] = points
                out.names[run.id] = run.name
        return out
