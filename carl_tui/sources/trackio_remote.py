"""Follow runs on a remote Trackio server (a Space or a self-hosted dashboard).

Trackio 0.43 answers `POST /api/<name>` with a JSON body of keyword arguments
and replies `{"data": ...}` or `{"error": ...}`. This source reads the metrics
table through `query_project` (read-only SQL, at most 10,000 rows a reply):

    SELECT id, run_id, run_name, step, metrics, timestamp FROM metrics
    WHERE id > <last id seen> ORDER BY id LIMIT 10000

The first polls page through the full history; later polls fetch only rows
that are new since the last one, so a poll costs what arrived, not what the
run has accumulated. `id` is SQLite's autoincrement key: rows become visible
in id order, so "id greater than the last one seen" never skips or repeats.

System metrics (`system_metrics`) and alerts (`alerts`) are read the same way,
by id, both in one more query per poll (a page of each; see
`trackio_system.py`): `SystemSample`s and `Marker(kind="alert")`s, each once. They are optional: a database without
those tables is probed again every few polls, and a failure to read them never
stops the metrics (it shows as the source's limitation until it clears).

Newest first, coarse to fine (`preview = True`, set by the dashboard): before
paging through a long history, one query reads its newest `PREVIEW_TAIL_ROWS`
rows and one more a strided sample of the rest (`id IN (...)`: point lookups on
the server, whatever the history's length); they are sent as
`ScalarBatch(preview=True)`, and an empty preview batch per run once the pages
have reached the newest row previewed.

Servers without `query_project` fall back to `get_logs`, which the server
down-samples; `limitation` says so for the status bar.

The x axis is `train/global_step` when a row has it, else Trackio's step.
The HF token (for private Spaces) travels only as `Authorization: Bearer`; a
token found in the environment or the saved login is sent only to Hugging
Face hosts, an explicit `token=` to any URL.
"""

from __future__ import annotations

import ipaddress
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import numpy as np
import orjson

from carl_tui.events import Event, RunMeta, RunRef, ScalarBatch
from carl_tui.hub import HubToken, find_token
from carl_tui.metric_names import canonical, is_metric_key, valid_number
from carl_tui.redact import redact
from carl_tui.sources import trackio_system as ts
from carl_tui.sources.base import PolledSource, SourceError
from carl_tui.sources.rows import NOT_FINITE, iso_to_epoch, media_kind, short_repr, step_of
from carl_tui.sources.tally import InputTally

SOURCE = "trackio-remote"
PAGE_ROWS = 10_000  # query_project's own cap
MAX_PAGES_PER_POLL = 10
ALERT_PAGE_ROWS = 1000
SYSTEM_PAGE_ROWS = PAGE_ROWS - ALERT_PAGE_ROWS  # one query holds both, within the server's cap
MISSING_TABLE_RECHECK_POLLS = 10  # polls between probes for a table the database lacks
EXTRA_TABLES = ("system_metrics", "alerts")
X_KEY = "train/global_step"
PREVIEW_MIN_ROWS = 30_000  # a shorter history is simply paged through
PREVIEW_TAIL_ROWS = 1_000
PREVIEW_SAMPLE_ROWS = 1_500
HOLD_MAX_S = 2.0  # longest wait, after a preview, for the screen to show it (`hold`)
NOT_AUTHORISED = "not authorised: set HF_TOKEN or run `hf auth login`"
FALLBACK_LIMITATION = "server has no incremental queries: history down-sampled by the server"
_HF_HOST_SUFFIXES = (".hf.space", "huggingface.co", ".hf.co")
_NON_FINITE = {"NaN", "Infinity", "-Infinity"}


class _UnknownApi(Exception):
    """The server does not offer this API name (older Trackio)."""


def normalize_url(url: str) -> str:
    """`user/space` -> `https://user-space.hf.space`; full URLs are left alone.

    Also accepts `huggingface.co/spaces/user/space` and `host:port`.
    """
    u = url.strip().rstrip("/")
    m = re.match(r"^(?:https?://)?(?:www\.)?(?:huggingface\.co|hf\.co)/spaces/([^/]+)/([^/?#]+)", u)
    if m:
        return _space_url(m.group(1), m.group(2))
    if "://" in u:
        return u
    if re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", u) and ":" not in u:
        user, space = u.split("/")
        return _space_url(user, space)
    host = u.split("/")[0].rsplit(":", 1)[0]
    return ("http://" if _is_loopback(host) else "https://") + u


def parse_server(text: str) -> tuple[str, str | None]:
    """What the user typed for `--trackio` -> (base URL, project named in it, if any).

    Accepts `user/space`, `https://user-space.hf.space`, `huggingface.co/spaces/user/space`,
    `host:port`, and the URL `trackio show` prints (`http://127.0.0.1:7860/?project=X`).
    Raises ValueError with a sentence naming what is wrong.
    """
    text = (text or "").strip()
    if not text:
        raise ValueError("needs a Trackio server: user/space, https://user-space.hf.space "
                         "or http://host:port")
    if "://" in text and not text.lower().startswith(("http://", "https://")):
        scheme = text.split("://", 1)[0]
        raise ValueError(f"{scheme}:// is not supported: use http:// or https://")
    try:
        parts = urlsplit(normalize_url(text))
        port = parts.port  # raises ValueError for a port that is not a number in range
        host = parts.hostname
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a valid URL ({exc})") from None
    if not host:
        raise ValueError(f"{text!r} has no host name")
    if port == 0:
        raise ValueError(f"{text!r}: port 0 is not a server port")
    project = parse_qs(parts.query).get("project", [None])[0] or None
    path = parts.path.rstrip("/")
    netloc = parts.netloc
    return f"{parts.scheme}://{netloc}{path}", project


def _space_url(user: str, space: str) -> str:
    sub = re.sub(r"[^a-z0-9-]", "-", f"{user}-{space}".lower())
    return f"https://{sub}.hf.space"


def _is_loopback(host: str) -> bool:
    host = host.strip("[]").lower()
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_local(url: str) -> bool:
    """True for loopback URLs (polled every second rather than every 3 s)."""
    return _is_loopback(urlsplit(normalize_url(url)).hostname or "")


def _is_hf_host(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    return any(host == s.lstrip(".") or host.endswith(s) for s in _HF_HOST_SUFFIXES)


def _sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"



@dataclass(frozen=True, slots=True)
class RemoteRun:
    """A run as listed by the server (for pickers)."""

    id: str
    name: str
    created_at: str | None = None


class TrackioRemoteSource(PolledSource):
    """Poll a Trackio server for new metric rows of one project."""

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
        self.project = project
        self.runs = list(runs) if runs else None
        self.timeout = float(timeout)
        self._interval = (
            float(interval) if interval is not None else (1.0 if is_local(url) else 3.0)
        )
        explicit = token is not None
        found = find_token(token)
        self._token = found if (explicit or _is_hf_host(self.url)) else None
        self._own_client = client is None
        self._client = client or httpx.Client(
            timeout=httpx.Timeout(self.timeout, connect=min(self.timeout, 5.0)),
            follow_redirects=True,
        )
        self.name = f"trackio: {self.url}" + (f" [{project}]" if project else "")
        self.finished = False
        self.tally = InputTally()  # skipped input, by reason
        self.limitation = ""
        self.behind = False  # more rows are waiting than one poll may fetch
        self.last_id = 0  # resume position in the metrics table
        self.mode: str | None = None  # "query" or "logs" once known
        self._run_col = "run_id"
        self._runs_seen: dict[str, str] = {}  # run_id -> name
        self._pending_config: dict[str, int] = {}  # run_id -> attempts left
        self._fallback_last: dict[str, int] = {}  # run_id -> last step emitted
        self.last_system_id = 0  # resume position in the system_metrics table
        self.last_alert_id = 0  # resume position in the alerts table
        self._extra_col: dict[str, str] = {}  # table -> its run column, once known
        self._extra_wait: dict[str, int] = {}  # table -> polls until the next probe
        self._extra_errors: dict[str, str] = {}  # table -> why it could not be read
        self._last_x: dict[str, int] = {}  # run_id -> newest step seen (alerts without one)
        self.bytes_received = 0  # response bytes, for benchmarks
        self.requests = 0
        self.preview = False  # preview a long history first (the dashboard)
        self._previewed = False
        self._preview_until: int | None = None
        self._preview_runs: dict[str, RunRef] = {}
        self.hold: threading.Event | None = None  # set by the dashboard: preview on screen

    # -- Source protocol -------------------------------------------------


    def poll(self) -> list[Event]:
        if self.mode is None:
            self._start()
        if self.mode == "logs":
            return self._poll_logs()
        return self._poll_query()

    def close(self) -> None:
        if self._own_client:
            self._client.close()


    def __repr__(self) -> str:
        token = "[REDACTED]" if self._token else None
        return f"TrackioRemoteSource(url={self.url!r}, project={self.project!r}, token={token!r})"

    # -- pickers ---------------------------------------------------------

    def version(self) -> dict[str, Any]:
        data = self._request("GET", "/version", None)
        return data if isinstance(data, dict) else {}

    def list_projects(self) -> list[str]:
        data = self._call("get_all_projects")
        return [str(p) for p in data] if isinstance(data, list) else []

    def list_runs(self, project: str | None = None) -> list[RemoteRun]:
        project = project or self.project
        if not project:
            raise SourceError("no project chosen", retry=False)
        data = self._call("get_runs_for_project", project=project)
        out = []
        for rec in data if isinstance(data, list) else []:
            if isinstance(rec, dict):
                rid = str(rec.get("id") or rec.get("name") or "")
                out.append(RemoteRun(rid, str(rec.get("name") or rid), rec.get("created_at")))
            elif isinstance(rec, str):  # older servers list names only
                out.append(RemoteRun(rec, rec))
        return out

    # -- HTTP ------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        return self._token.auth_header() if self._token else {}

    def _request(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        url = self.url + path
        try:
            resp = self._client.request(
                method,
                url,
                content=orjson.dumps(body) if body is not None else None,
                headers={"Content-Type": "application/json", **self._headers()},
                timeout=httpx.Timeout(self.timeout, connect=min(self.timeout, 5.0)),
            )
        except httpx.ConnectError as exc:
            raise SourceError(
                f"cannot connect to {self.url}: connection refused or unreachable"
            ) from exc
        except httpx.TimeoutException as exc:
            raise SourceError(f"{self.url} did not answer within {self.timeout:g} s") from exc
        except httpx.HTTPError as exc:
            raise SourceError(f"connection to {self.url} failed ({type(exc).__name__})") from exc
        self.requests += 1
        self.bytes_received += len(resp.content)
        status = resp.status_code
        if status in (401, 403):
            raise SourceError(NOT_AUTHORISED, retry=False)
        try:
            payload = orjson.loads(resp.content)
        except orjson.JSONDecodeError:
            if status >= 500:
                raise SourceError(f"server error {status} from {self.url}") from None
            if status == 404:
                raise SourceError(f"no such project/space: {self.url} answered 404", retry=False)
            raise SourceError(
                f"malformed reply from {self.url} (HTTP {status}, not JSON)"
            ) from None
        error = payload.get("error") if isinstance(payload, dict) else None
        error_text = redact(str(error), [self._token])[:300] if error is not None else ""
        if status == 404:
            if error_text.startswith("Unknown API"):
                raise _UnknownApi(path)
            raise SourceError(f"no such project/space: {self.url} answered 404", retry=False)
        if error is not None and "not found" in error_text and "roject" in error_text:
            # Retried at the normal pace: the project appears when its run starts.
            raise SourceError(f"no such project/space: {error_text}")
        if status >= 500:
            raise SourceError(
                f"server error {status} from {self.url}" + (f": {error_text}" if error_text else "")
            )
        if status >= 400:
            raise SourceError(
                f"request refused (HTTP {status})" + (f": {error_text}" if error_text else "")
            )
        if error is not None:
            raise SourceError(f"server error: {error_text}")
        if path == "/version":
            return payload
        if not isinstance(payload, dict) or "data" not in payload:
            raise SourceError(f"malformed reply from {self.url} (no data)")
        return payload["data"]

    def _call(self, name: str, **kwargs: Any) -> Any:
        return self._request("POST", f"/api/{name}", kwargs)

    def _query(self, sql: str) -> list[dict[str, Any]]:
        data = self._call("query_project", project=self.project, query=sql)
        rows = data.get("rows") if isinstance(data, dict) else None
        if not isinstance(rows, list):
            raise SourceError(f"malformed reply from {self.url} (query without rows)")
        odd = [r for r in rows if not isinstance(r, dict)]
        if odd:
            raise SourceError(f"malformed reply from {self.url}: its rows are "
                              f"{type(odd[0]).__name__}s, not objects (is it a Trackio "
                              "server?)")
        return rows

    # -- start-up --------------------------------------------------------

    def _start(self) -> None:
        if not self.project:
            projects = self.list_projects()
            if len(projects) == 1:
                self.project = projects[0]
            elif not projects:
                raise SourceError(f"no projects on {self.url} yet")
            else:
                shown = ", ".join(projects[:8]) + (", ..." if len(projects) > 8 else "")
                raise SourceError(
                    f"several projects on {self.url}: {shown}; choose one", retry=False
                )
            self.name = f"trackio: {self.url} [{self.project}]"
        try:
            cols = self._columns()
        except _UnknownApi:
            self.mode, self.limitation = "logs", FALLBACK_LIMITATION
            return
        self._run_col = "run_id" if "run_id" in cols else "run_name"
        self.mode = "query"

    def _columns(self) -> list[str]:
        data = self._call(
            "query_project", project=self.project, query="SELECT * FROM metrics WHERE 0"
        )
        cols = data.get("columns") if isinstance(data, dict) else None
        return [str(c) for c in cols] if isinstance(cols, list) else []

    # -- incremental mode ------------------------------------------------

    def _run_filter(self, col: str | None = None) -> str:
        if not self.runs:
            return ""
        names = ", ".join(_sql_str(r) for r in self.runs)
        if (col or self._run_col) == "run_id":
            return f" AND (run_id IN ({names}) OR run_name IN ({names}))"
        return f" AND run_name IN ({names})"

    def _poll_query(self) -> list[Event]:
        if self.preview and not self._previewed:
            events = self._preview_events()
            self._previewed = True
            if events:
                self.behind = True
                return events
        if self._preview_until is not None and self.hold is not None:
            self.hold.wait(HOLD_MAX_S)  # page through the history once the preview is shown
            self.hold = None
        events = []
        deadline = time.monotonic() + self.timeout
        self.behind = False
        for page in range(MAX_PAGES_PER_POLL):
            sql = (
                f"SELECT id, {self._run_col} AS run_id, run_name, step, metrics, timestamp "
                f"FROM metrics WHERE id > {int(self.last_id)}{self._run_filter()} "
                f"ORDER BY id LIMIT {PAGE_ROWS}"
            )
            try:
                rows = self._query(sql)
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
        if self._preview_until is not None and (
            self.last_id >= self._preview_until or not self.behind
        ):
            events.extend(self._preview_done())
        events.extend(self._configs())
        events.extend(self._extras())
        return events

    # -- the preview: newest first, coarse to fine -----------------------

    def _preview_events(self) -> list[Event]:
        """A coarse view of a long history (see the module doc); [] for a short one."""
        filt = self._run_filter()
        top_rows = self._query(
            f"SELECT MAX(id) AS top FROM metrics WHERE id > {int(self.last_id)}{filt}")
        top = top_rows[0].get("top") if top_rows else None
        if not isinstance(top, int) or top - self.last_id <= PREVIEW_MIN_ROWS:
            return []
        cols = f"id, {self._run_col} AS run_id, run_name, step, metrics, timestamp"
        tail_from = max(self.last_id, top - PREVIEW_TAIL_ROWS)
        stride = max(1, (tail_from - self.last_id) // PREVIEW_SAMPLE_ROWS)
        ids = ", ".join(map(str, range(self.last_id + 1, tail_from + 1, stride)))
        sample = self._query(
            f"SELECT {cols} FROM metrics WHERE id IN ({ids}){filt} ORDER BY id LIMIT {PAGE_ROWS}")
        tail = self._query(
            f"SELECT {cols} FROM metrics WHERE id > {tail_from}{filt} ORDER BY id "
            f"LIMIT {PAGE_ROWS}")
        saved = self.tally  # a preview counts nothing: its rows are read again
        self.tally = InputTally()
        by_run: dict[str, list[tuple[int, dict[str, float]]]] = {}
        names: dict[str, str] = {}
        newest: dict[str, float | None] = {}
        for row in (*sample, *tail):
            metrics = row.get("metrics")
            if isinstance(metrics, (str, bytes)):
                try:
                    metrics = orjson.loads(metrics)
                except orjson.JSONDecodeError:
                    continue
            if not isinstance(metrics, dict):
                continue
            rid = str(row.get("run_id") or row.get("run_name") or "")
            names.setdefault(rid, str(row.get("run_name") or rid))
            point = self._point(row.get("step"), metrics)
            if point is not None:
                by_run.setdefault(rid, []).append(point)
            newest[rid] = iso_to_epoch(row.get("timestamp"))
        self.tally = saved
        events: list[Event] = []
        for rid, points in by_run.items():
            ref = RunRef(SOURCE, self.project or "", rid, names.get(rid, rid))
            batch = ScalarBatch.from_rows(ref, points, wall_time=newest.get(rid))
            if len(batch):
                events.append(replace(batch, preview=True))
                self._preview_runs[rid] = ref
        if events:
            self._preview_until = int(top)
        return events

    def _preview_done(self) -> list[Event]:
        self._preview_until = None
        done: list[Event] = [
            ScalarBatch(ref, np.empty(0, dtype=np.int64), {}, preview=True)
            for ref in self._preview_runs.values()
        ]
        self._preview_runs = {}
        return done

    # -- system metrics and alerts ---------------------------------------

    def _extras(self) -> list[Event]:
        """New system samples and alerts, both in one query; best effort (see the
        module doc)."""
        ready: dict[str, str] = {}  # table -> its run column
        for table in EXTRA_TABLES:
            wait = self._extra_wait.get(table, 0)
            if wait > 0:
                self._extra_wait[table] = wait - 1
                continue
            try:
                ready[table] = self._extra_col.get(table) or self._table_col(table)
            except (SourceError, _UnknownApi) as exc:
                self._extra_failed([table], exc)
        events: list[Event] = []
        if ready:
            try:
                events = self._extra_query(ready)
            except (SourceError, _UnknownApi) as exc:
                if len(ready) == 1 or ts.is_missing_table(str(exc)):
                    self._extra_failed(list(ready), exc)
                else:  # one table at a time: what can be read still is
                    for table, col in ready.items():
                        try:
                            events.extend(self._extra_query({table: col}))
                        except (SourceError, _UnknownApi) as exc1:
                            self._extra_failed([table], exc1)
        self.limitation = "; ".join(
            f"{table.replace('_', ' ')} not read: {msg}" for table, msg in self._extra_errors.items()
        )
        return events

    def _extra_query(self, ready: dict[str, str]) -> list[Event]:
        system = ready.get("system_metrics")
        alert = ready.get("alerts")
        sql = ts.extras_sql(
            system=(system, self.last_system_id, SYSTEM_PAGE_ROWS, self._run_filter(system))
            if system else None,
            alerts=(alert, self._run_col, self.last_alert_id, ALERT_PAGE_ROWS,
                    self._run_filter(alert)) if alert else None,
        )
        rows = self._query(sql)
        for table in ready:
            self._extra_errors.pop(table, None)
        return self._extra_events(rows)

    def _extra_failed(self, tables: list[str], exc: BaseException) -> None:
        """A table the database lacks is probed again later; other failures are said."""
        message = str(exc) or type(exc).__name__
        if ts.is_missing_table(message):
            named = [t for t in tables if f"no such table: {t}" in message.lower()]
            for table in named or tables:
                self._extra_wait[table] = MISSING_TABLE_RECHECK_POLLS
                self._extra_col.pop(table, None)
                self._extra_errors.pop(table, None)
            return
        for table in tables:
            self._extra_errors[table] = message

    def _table_col(self, table: str) -> str:
        data = self._call("query_project", project=self.project,
                          query=f"SELECT * FROM {table} WHERE 0")
        cols = data.get("columns") if isinstance(data, dict) else None
        if not isinstance(cols, list):
            raise SourceError(f"malformed reply from {self.url} (query without columns)")
        col = "run_id" if "run_id" in cols else "run_name"
        self._extra_col[table] = col
        return col

    def _extra_events(self, rows: list[dict[str, Any]]) -> list[Event]:
        events: list[Event] = []
        n_system = n_alerts = 0
        for row in rows:
            rid = str(row.get("run_id") or row.get("run_name") or "")
            ref = RunRef(SOURCE, self.project or "", rid, str(row.get("run_name") or rid))
            try:
                rowid = int(row["id"])
            except (KeyError, TypeError, ValueError):
                self.tally.skip("row without an id", short_repr(row))
                continue
            if row.get("kind") == "system":
                n_system += 1
                self.last_system_id = max(self.last_system_id, rowid)
                metrics = ts.load_json(row.get("metrics"))
                if metrics is None:
                    self.tally.skip("system metrics not a JSON object",
                                    short_repr(row.get("metrics")))
                    continue
                sample, bad = ts.system_sample(ref, metrics, iso_to_epoch(row.get("timestamp")))
                self.tally.skip("system value not a finite number", rid, bad)
                if sample is not None:
                    events.append(sample)
            elif row.get("kind") == "alert":
                n_alerts += 1
                self.last_alert_id = max(self.last_alert_id, rowid)
                events.append(
                    ts.alert_marker(
                        ref, title=row.get("title"), text=row.get("text"),
                        level=row.get("level"), step=row.get("step"),
                        timestamp=row.get("timestamp"), at_metrics=row.get("at_metrics"),
                        fallback_step=self._last_x.get(rid),
                    )
                )
        if n_system >= SYSTEM_PAGE_ROWS or n_alerts >= ALERT_PAGE_ROWS:
            self.behind = True
        return events

    def _rows_to_events(self, rows: list[dict[str, Any]]) -> list[Event]:
        by_run: dict[str, list[tuple[int, dict[str, float]]]] = {}
        names: dict[str, str] = {}
        newest: dict[str, float | None] = {}
        for row in rows:
            rid = str(row.get("run_id") or row.get("run_name") or "")
            names.setdefault(rid, str(row.get("run_name") or rid))
            metrics = row.get("metrics")
            if isinstance(metrics, (str, bytes)):
                try:
                    metrics = orjson.loads(metrics)
                except orjson.JSONDecodeError:
                    self.tally.skip("row metrics not JSON", short_repr(metrics))
                    continue
            if not isinstance(metrics, dict):
                self.tally.skip("row metrics not a JSON object", short_repr(metrics))
                continue
            point = self._point(row.get("step"), metrics)
            if point is not None:
                by_run.setdefault(rid, []).append(point)
            newest[rid] = iso_to_epoch(row.get("timestamp"))
        return self._batches(by_run, names, newest)

    def _point(self, step: Any, metrics: dict[str, Any]) -> tuple[int, dict[str, float]] | None:
        """(step, values) of a row; None (skipped and counted) when it has no valid step."""
        x = step_of(metrics[X_KEY]) if X_KEY in metrics else step_of(step)
        if isinstance(x, str):  # the reason the step is not valid
            self.tally.skip(x, short_repr(metrics.get(X_KEY, step)))
            return None
        values: dict[str, float] = {}
        for key, value in metrics.items():
            if key == X_KEY or not is_metric_key(key):
                continue
            v = valid_number(value)
            if v is not None:
                values[canonical(key)] = v
            elif type(value) is float or (isinstance(value, str) and value in _NON_FINITE):
                self.tally.skip(NOT_FINITE, f"{key}={short_repr(value)}")
            elif isinstance(value, dict) and isinstance(value.get("_type"), str):
                self.tally.note(media_kind(value))
        return x, values

    def _batches(
        self,
        by_run: dict[str, list[tuple[int, dict[str, float]]]],
        names: dict[str, str],
        newest: dict[str, float | None],
    ) -> list[Event]:
        events: list[Event] = []
        for rid, points in by_run.items():
            if not points:
                continue
            ref = RunRef(SOURCE, self.project or "", rid, names.get(rid, rid))
            if rid not in self._runs_seen:
                self._runs_seen[rid] = ref.name
                self._pending_config[rid] = 3
                events.append(
                    RunMeta(ref, {"trackio_url": self.url, "trackio_project": self.project})
                )
            batch = ScalarBatch.from_rows(ref, points, wall_time=newest.get(rid))
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
        col = "run_id" if self._run_col == "run_id" else "run_name"
        sql = f"SELECT {col} AS run_id, config FROM configs WHERE {col} IN ({', '.join(map(_sql_str, ids))})"
        try:
            rows = self._query(sql)
        except (SourceError, _UnknownApi):
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
                ref = RunRef(SOURCE, self.project or "", rid, self._runs_seen.get(rid, rid))
                events.append(RunMeta(ref, {"config": cfg}))
        for rid in ids:
            if rid in self._pending_config:
                self._pending_config[rid] -= 1
                if self._pending_config[rid] <= 0:
                    del self._pending_config[rid]
        return events

    # -- fallback mode (older servers) -----------------------------------

    def _poll_logs(self) -> list[Event]:
        runs = self.list_runs(self.project)
        if self.runs:
            wanted = set(self.runs)
            runs = [r for r in runs if r.id in wanted or r.name in wanted]
        by_run: dict[str, list[tuple[int, dict[str, float]]]] = {}
        names: dict[str, str] = {}
        newest: dict[str, float | None] = {}
        for run in runs:
            try:
                rows = self._call("get_logs", project=self.project, run=run.name)
            except _UnknownApi:
                raise SourceError(f"{self.url} offers no way to read logs", retry=False) from None
            if not isinstance(rows, list):
                raise SourceError(f"malformed reply from {self.url} (logs are not a list)")
            last = self._fallback_last.get(run.id, -(2**62))
            points = []
            for row in rows:
                if not isinstance(row, dict):
                    continue
                metrics = {k: v for k, v in row.items() if k not in ("step", "timestamp")}
                point = self._point(row.get("step"), metrics)
                if point[0] > last:
                    points.append(point)
                    newest[run.id] = iso_to_epoch(row.get("timestamp"))
            points.sort(key=lambda p: p[0])
            if points:
                self._fallback_last[run.id] = points[-1][0]
                by_run[run.id] = points
                names[run.id] = run.name
        return self._batches(by_run, names, newest)
