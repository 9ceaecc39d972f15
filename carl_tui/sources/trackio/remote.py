"""Follow runs on a remote Trackio server (a Space or a self-hosted dashboard).

Trackio 0.43 answers `POST /api/<name>` with a JSON body of keyword arguments
and replies `{"data": ...}` or `{"error": ...}`. This source reads the metrics
table through `query_project` (read-only SQL, at most 10,000 rows a reply):

    SELECT id, run_id, run_name, step, metrics, timestamp FROM metrics
    WHERE id > <last id seen> ORDER BY id LIMIT 10000

The first polls page through the full history; later polls fetch only rows
that are new since the last one, so a poll costs what arrived, not what the
run has accumulated. Once caught up, a poll first asks the newest id of each
table in one cheap query (`MAX(id)`: a lookup at the end of the table); when
none has a row past those read, that is the poll's only request. `id` is
SQLite's autoincrement key: rows become visible in id order, so "id greater
than the last one seen" never skips or repeats.

System metrics (`system_metrics`) and alerts (`alerts`) are read the same way,
by id, both in one more query per poll (`remote_extras.py`, through the
source's transport, `remote_sql.RemoteProject`):
`SystemSample`s and `Marker(kind="alert")`s, each once. They are optional: a
database without those tables is probed again every few polls, and a failure to
read them never stops the metrics (it shows as the source's limitation until it
clears).

Newest first, coarse to fine (`preview = True`, set by the dashboard): before
paging through a long history, one query reads its newest rows
and one more a strided sample of the rest (`preview.SIZES`) (`id IN (...)`: point lookups on
the server, whatever the history's length); they are sent as
`ScalarBatch(preview=True)`, and an empty preview batch per run once the pages
have reached the newest row previewed (`remote_preview.py`).

Servers without `query_project` fall back to `get_logs`, which the server
down-samples (`remote_logs.py`); `limitation` says so for the status bar.

The x axis is `train/global_step` when a row has it, else Trackio's step
(`remote_rows.py`). Requests and what their failures mean are in
`remote_http.py`. The HF token (for private Spaces) travels only as
`Authorization: Bearer`; a token found in the environment or the saved login is
sent only to Hugging Face hosts, an explicit `token=` to any URL.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from carl_tui.events import Event, RunMeta, ScalarBatch
from carl_tui.hub import HubToken, find_token
from carl_tui.sources.base import HOLD_MAX_S, PolledSource, SourceError
from carl_tui.sources.trackio import newest_first as pv
from carl_tui.sources.trackio.address import is_hf_host, is_local, normalize_url, parse_server
from carl_tui.sources.trackio.db import run_column
from carl_tui.sources.trackio.newest_first import PreviewState
from carl_tui.sources.trackio.remote_extras import RemoteExtras
from carl_tui.sources.trackio.remote_http import (
    NOT_AUTHORISED,
    PAGE_ROWS,
    TrackioHttp,
    UnknownApi,
)
from carl_tui.sources.trackio.remote_logs import LogsFallback
from carl_tui.sources.trackio.remote_preview import read_preview
from carl_tui.sources.trackio.remote_rows import RunPoints, points_by_run
from carl_tui.sources.trackio.remote_sql import SOURCE, RemoteProject, sql_str
from carl_tui.sources.unused_input import UnusedInput

__all__ = ["NOT_AUTHORISED", "SOURCE", "RemoteRun", "TrackioRemoteSource", "is_local",
           "normalize_url", "parse_server"]

MAX_PAGES_PER_POLL = 10
FALLBACK_LIMITATION = "server has no incremental queries: history down-sampled by the server"
@dataclass(frozen=True, slots=True)
class RemoteRun:
    """A run as listed by the server (for pickers)."""

    id: str
    name: str
    created_at: str | None = None


class TrackioRemoteSource(PolledSource):
    """Poll a Trackio server for new metric rows of one project."""

    previews = True  # a long history: a coarse view first (`newest_first.py`)

    def __init__(
        self,
        url: str,
        *,
        project: str | None = None,
        runs: Sequence[str] | None = None,
        token: str | HubToken | None = None,
        interval: float | None = None,
        client: httpx.Client | None = None,
        timeout: float = 10.0,
    ):
        self.url = normalize_url(url)
        self._interval = (
            float(interval) if interval is not None else (1.0 if is_local(url) else 3.0)
        )
        explicit = token is not None
        found = find_token(token)
        self._token = found if (explicit or is_hf_host(self.url)) else None
        self._http = TrackioHttp(self.url, self._token, timeout, client)
        # the transport: the project's tables, read through the server's SQL
        self.remote = RemoteProject(self._http, project, list(runs) if runs else None)
        self.name = f"trackio: {self.url}" + (f" [{project}]" if project else "")
        self.finished = False
        self.unused_input = UnusedInput()  # skipped input, by reason
        self.limitation = ""
        self.behind = False  # more rows are waiting than one poll may fetch
        self.last_id = 0  # resume position in the metrics table
        self.mode: str | None = None  # "query" or "logs" once known
        self._runs_seen: dict[str, str] = {}  # run_id -> name
        self._pending_config: dict[str, int] = {}  # run_id -> attempts left
        self._extras = RemoteExtras()  # system metrics and alerts
        self._logs = LogsFallback()  # the get_logs mode of older servers
        self._last_x: dict[str, int] = {}  # run_id -> newest step seen (alerts without one)
        self.preview = False  # preview a long history first (the dashboard)
        self._preview = PreviewState()
        self.hold: threading.Event | None = None  # set by the dashboard: preview on screen

    @property
    def project(self) -> str | None:
        return self.remote.project

    @property
    def runs(self) -> list[str] | None:
        return self.remote.runs

    @property
    def timeout(self) -> float:
        return self._http.timeout

    @property
    def slow_after_s(self) -> float:  # type: ignore[override]
        """A poll longer than the timeout is waiting (a trickling reply), not live."""
        return self._http.timeout

    @property
    def requests(self) -> int:
        return self._http.requests

    @property
    def bytes_received(self) -> int:
        """Response bytes so far (for benchmarks)."""
        return self._http.bytes_received

    # -- the source contract (sources.base.Source) ------------------------

    def poll(self) -> list[Event]:
        if self.mode is None:
            self._start()
        if self.mode == "logs":
            return self._poll_logs()
        return self._poll_query()

    def close(self) -> None:
        self._http.close()

    def __repr__(self) -> str:
        token = "[REDACTED]" if self._token else None
        return f"TrackioRemoteSource(url={self.url!r}, project={self.project!r}, token={token!r})"

    # -- pickers ---------------------------------------------------------

    def version(self) -> dict[str, Any]:
        data = self._http.request("GET", "/version", None)
        return data if isinstance(data, dict) else {}

    def list_projects(self) -> list[str]:
        data = self.remote.call("get_all_projects")
        return [str(p) for p in data] if isinstance(data, list) else []

    def list_runs(self, project: str | None = None) -> list[RemoteRun]:
        project = project or self.project
        if not project:
            raise SourceError("no project chosen", retry=False)
        data = self.remote.call("get_runs_for_project", project=project)
        out = []
        for rec in data if isinstance(data, list) else []:
            if isinstance(rec, dict):
                rid = str(rec.get("id") or rec.get("name") or "")
                out.append(RemoteRun(rid, str(rec.get("name") or rid), rec.get("created_at")))
            elif isinstance(rec, str):  # older servers list names only
                out.append(RemoteRun(rec, rec))
        return out

    # -- requests (see remote_http.py) ----------------------------------

    def _headers(self) -> dict[str, str]:
        return self._http.headers()

    def query_sql(self, sql: str) -> list[dict[str, Any]]:
        """Rows of a read-only SQL query on this project (the completions view's tables)."""
        return self.remote.query(sql)

    # -- start-up --------------------------------------------------------

    def _start(self) -> None:
        if not self.project:
            projects = self.list_projects()
            if len(projects) == 1:
                self.remote.project = projects[0]
            elif not projects:
                raise SourceError(f"no projects on {self.url} yet")
            else:
                shown = ", ".join(projects[:8]) + (", ..." if len(projects) > 8 else "")
                raise SourceError(
                    f"several projects on {self.url}: {shown}; choose one", retry=False
                )
            self.name = f"trackio: {self.url} [{self.project}]"
        try:
            cols = self.remote.columns("metrics")
        except UnknownApi:
            self.mode, self.limitation = "logs", FALLBACK_LIMITATION
            return
        self.remote.run_col = run_column(cols or [])
        self.mode = "query"

    # -- incremental mode ------------------------------------------------

    def _poll_query(self) -> list[Event]:
        if self.preview and not self._preview.tried:
            events = self._preview_events()
            self._preview.tried = True
            if events:
                self.behind = True
                return events
        if self._preview.standing and self.hold is not None:
            self.hold.wait(HOLD_MAX_S)  # page through the history once the preview is shown
            self.hold = None
        if self._unchanged():
            return []
        events = self._pages()
        if self._preview.ends(self.last_id, self.behind):
            events.extend(self._preview.end())
        events.extend(self._configs())
        events.extend(self._extras.read(self.remote, self.unused_input, self._last_x))
        self.behind = self.behind or self._extras.full
        self.limitation = self._extras.limitation
        return events

    def _unchanged(self) -> bool:
        """Once caught up: one cheap request, the newest id of each table; True when no
        table has a row past those read (then nothing else is asked). False at once
        while more is waiting, a run's config is awaited or a table is not read yet."""
        probe = self._extras.probe_sql()
        if self.behind or self._pending_config or not self.last_id or probe is None:
            return False
        try:
            rows = self.remote.query(
                f"SELECT (SELECT COALESCE(MAX(id), 0) FROM metrics) AS metrics{probe}")
        except (SourceError, UnknownApi):
            return False  # the full poll meets (and reports) what is wrong
        row = rows[0] if len(rows) == 1 else {}
        newest = row.get("metrics")
        return (type(newest) is int and newest <= self.last_id
                and self._extras.unchanged(row))

    def _pages(self) -> list[Event]:
        """New metrics rows, page by page by id, at most MAX_PAGES_PER_POLL pages and
        half the timeout (a poll past the timeout is said to be waiting); `behind` when
        more are waiting."""
        events: list[Event] = []
        deadline = time.monotonic() + self.timeout / 2
        self.behind = False
        for page in range(MAX_PAGES_PER_POLL):
            try:
                rows = self.remote.query(self.remote.metrics_sql(f"id > {int(self.last_id)}"))
            except SourceError:
                if page == 0:
                    raise
                self.behind = True  # keep what we have; the next poll meets the error
                break
            events.extend(self._rows_to_events(rows))
            if rows:
                self.last_id = max(self.last_id, max(int(r["id"]) for r in rows))
            if len(rows) < PAGE_ROWS:
                break
            if time.monotonic() > deadline:
                self.behind = True
                break
        else:
            self.behind = True
        return events

    def _preview_events(self) -> list[Event]:
        """A coarse view of a long history (see the module doc); [] for a short one."""
        got = read_preview(self.remote, self.last_id, pv.SIZES)
        if got is None or not got[0]:
            return []
        batches, top = got
        self._preview.shown(top, (b.run for b in batches))
        return list(batches)

    # -- rows to events --------------------------------------------------

    def _rows_to_events(self, rows: list[dict[str, Any]]) -> list[Event]:
        return self._batches(points_by_run(rows, self.unused_input))

    def _batches(self, got: RunPoints) -> list[Event]:
        """A ScalarBatch per run (a RunMeta first for a run seen for the first time)."""
        events: list[Event] = []
        for rid, points in got.by_run.items():
            if not points:
                continue
            ref = self.remote.ref(rid, got.names.get(rid, rid))
            if rid not in self._runs_seen:
                self._runs_seen[rid] = ref.name
                self._pending_config[rid] = 3
                events.append(
                    RunMeta(ref, {"trackio_url": self.url, "trackio_project": self.project})
                )
            batch = ScalarBatch.from_rows(ref, points, wall_time=got.newest.get(rid),
                                          nonfinite=got.nonfinite.get(rid, ()))
            if len(batch):
                top = int(batch.steps.max())
                self._last_x[rid] = max(top, self._last_x.get(rid, top))
            events.append(batch)
        return events

    def _configs(self) -> list[Event]:
        """RunMeta with each new run's config (best effort: a failure is retried twice)."""
        if not self._pending_config or self.mode != "query":
            return []
        ids = list(self._pending_config)
        col = self.remote.run_col
        sql = (f"SELECT {col} AS run_id, config FROM configs "
               f"WHERE {col} IN ({', '.join(map(sql_str, ids))})")
        try:
            rows = self.remote.query(sql)
        except (SourceError, UnknownApi):
            rows = []
        events: list[Event] = []
        for row in rows:
            rid = str(row.get("run_id"))
            try:
                cfg = (
                    orjson.loads(row["config"])
                    if isinstance(row.get("config"), (str, bytes))
                    else row.get("config")
                )
            except (orjson.JSONDecodeError, KeyError):
                continue
            if rid in self._pending_config and isinstance(cfg, dict):
                del self._pending_config[rid]
                events.append(RunMeta(self.remote.ref(rid, self._runs_seen.get(rid, rid)),
                                      {"config": cfg}))
        for rid in ids:
            if rid in self._pending_config:
                self._pending_config[rid] -= 1
                if self._pending_config[rid] <= 0:
                    del self._pending_config[rid]
        return events

    # -- fallback mode (older servers, see remote_logs.py) -------

    def _poll_logs(self) -> list[Event]:
        runs = self.list_runs(self.project)
        if self.runs:
            wanted = set(self.runs)
            runs = [r for r in runs if r.id in wanted or r.name in wanted]
        return self._batches(self._logs.read(self.remote.call, self.project, runs, self.url,
                                             self.unused_input))
