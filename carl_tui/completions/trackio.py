"""Trackio tables: TRL logs `{"completions": trackio.Table(dataframe=df)}`, which Trackio
stores inline in a metrics row as `{"_type": "trackio.table", "_value": [row, ...]}`.

The local store is read read-only, like the metrics (`sources/trackio/db.py`):
only rows whose JSON names a table, each found once by id; a step is read again
by its row id. A server is asked the same through `query_project`. The table's
own `step` column (TRL's global step) dates it; Trackio's row step (its own
counter) only when the rows have none.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from carl_tui.completions.model import CompletionTable, from_records
from carl_tui.sources.trackio import db

TABLE_MARK = "trackio.table"
PAGE = 500


def tables_in(metrics: Any, row_step: int | None) -> list[CompletionTable]:
    """The completions tables in one metrics row's JSON (text, bytes or a dict)."""
    if isinstance(metrics, (bytes, str)):
        try:
            metrics = json.loads(metrics)
        except ValueError:
            return []
    if not isinstance(metrics, dict):
        return []
    out = []
    for value in metrics.values():
        if isinstance(value, dict) and value.get("_type") == TABLE_MARK:
            rows = value.get("_value")
            if isinstance(rows, list) and rows:
                has_step = isinstance(rows[0], dict) and "step" in rows[0]
                table = from_records(None if has_step else row_step, rows, "trackio")
                if table is not None and {"prompt", "completion"} <= set(rows[0]):
                    out.append(table)
    return out


class _TableRows:
    """Scanning metrics rows that hold a table, by id, through `query(sql, args)`."""

    origin = "trackio"

    def __init__(self, run: str):
        self.skipped: Counter[str] = Counter()  # rows are read whole: none so far
        self.run = run
        self.last_id = 0

    def query(self, sql: str, args: tuple) -> list[tuple[int, Any, Any]]:
        raise NotImplementedError

    def _filter(self) -> str:
        # instr on bytes: Trackio stores metrics as a BLOB, which LIKE does not match
        return f"{self.run_col} = ? AND instr(metrics, CAST('{TABLE_MARK}' AS BLOB)) > 0"

    run_col = "run_id"

    def scan(self) -> list[tuple[int, Any, CompletionTable | None]]:
        out = []
        while True:
            rows = self.query(
                f"SELECT id, step, metrics FROM metrics WHERE id > ? AND {self._filter()} "
                f"ORDER BY id LIMIT {PAGE}", (self.last_id, self.run))
            for rid, step, metrics in rows:
                self.last_id = max(self.last_id, int(rid))
                for k, table in enumerate(tables_in(metrics, step)):
                    out.append((table.step, (int(rid), k), table))
            if len(rows) < PAGE:
                return out

    def load(self, locator: tuple[int, int]) -> CompletionTable | None:
        rows = self.query("SELECT id, step, metrics FROM metrics WHERE id = ?", (locator[0],))
        tables = tables_in(rows[0][2], rows[0][1]) if rows else []
        return tables[locator[1]] if locator[1] < len(tables) else None


class TrackioLocalTables(_TableRows):
    """The tables of one run in a local Trackio database (read-only)."""

    def __init__(self, db_file: str | Path, run: str):
        super().__init__(run)
        self.path = Path(db_file)
        self._conn = None

    def query(self, sql: str, args: tuple) -> list[tuple[int, Any, Any]]:
        if self._conn is None:
            if not self.path.exists():
                return []
            self._conn = db.connect(self.path)
            self.run_col = db.run_column(db.retry(db.table_columns, self._conn, "metrics"))
            sql = sql.replace("run_id = ?", f"{self.run_col} = ?")
        conn = self._conn
        return db.retry(lambda: conn.execute(sql, args).fetchall())

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class TrackioRemoteTables(_TableRows):
    """The tables of one run on a Trackio server, through `query(sql) -> [row dicts]`
    (the remote source's `query_project`)."""

    def __init__(self, run: str, query_sql: Callable[[str], list[dict[str, Any]]]):
        super().__init__(run)
        self._query_sql = query_sql

    def query(self, sql: str, args: tuple) -> list[tuple[int, Any, Any]]:
        for a in args:
            lit = str(int(a)) if isinstance(a, int) else "'" + str(a).replace("'", "''") + "'"
            sql = sql.replace("?", lit, 1)
        return [(r.get("id"), r.get("step"), r.get("metrics"))
                for r in self._query_sql(sql) if r.get("id") is not None]
