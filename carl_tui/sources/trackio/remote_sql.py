"""A Trackio project on a server, read through its read-only SQL (`query_project`).

`RemoteProject` is the transport the remote source owns: the HTTP client, the
project, the run filter and the metrics table's run column, with public methods for
what the source, its preview pass (`remote_preview.py`) and its extras
(`remote_extras.py`) ask of the server. None of them reaches into another.
"""

from __future__ import annotations

from typing import Any

from carl_tui.events import RunRef
from carl_tui.sources.trackio.remote_http import PAGE_ROWS, TrackioHttp, query_rows

SOURCE = "trackio-remote"


def sql_str(value: str) -> str:
    """`value` as an SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


class RemoteProject:
    """One project of a server, as SQL: `query(sql)` -> rows (objects)."""

    def __init__(self, http: TrackioHttp, project: str | None, runs: list[str] | None):
        self.http = http
        self.url = http.url
        self.project = project
        self.runs = runs
        self.run_col = "run_id"  # the metrics table's run column, once known

    def call(self, name: str, **kwargs: Any) -> Any:
        return self.http.call(name, **kwargs)

    def query(self, sql: str) -> list[dict[str, Any]]:
        return query_rows(self.call("query_project", project=self.project, query=sql),
                          self.url)

    def columns(self, table: str) -> list[str] | None:
        """The columns of `table` (None: the reply says none)."""
        data = self.call("query_project", project=self.project,
                         query=f"SELECT * FROM {table} WHERE 0")
        cols = data.get("columns") if isinstance(data, dict) else None
        return [str(c) for c in cols] if isinstance(cols, list) else None

    def run_filter(self, col: str | None = None) -> str:
        """` AND ...` keeping the runs asked for (by id or name), "" for every run."""
        if not self.runs:
            return ""
        names = ", ".join(sql_str(r) for r in self.runs)
        if (col or self.run_col) == "run_id":
            return f" AND (run_id IN ({names}) OR run_name IN ({names}))"
        return f" AND run_name IN ({names})"

    def metrics_sql(self, where: str) -> str:
        """A page of metrics rows `WHERE <where>` (and the run filter), in id order."""
        return (f"SELECT id, {self.run_col} AS run_id, run_name, step, metrics, timestamp "
                f"FROM metrics WHERE {where}{self.run_filter()} "
                f"ORDER BY id LIMIT {PAGE_ROWS}")

    def ref(self, rid: str, name: str) -> RunRef:
        return RunRef(SOURCE, self.project or "", rid, name)
