"""`i`: a run's card: its config, its summary-only values (the Trainer's end-of-run values,
a W&B summary's keys that are no curve), its job (flavor, stage, command with secrets
masked, cost), its events; with runs chosen to compare, the config keys that differ
between them, side by side."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Group, RenderableType
from rich.text import Text

from carl_tui.redact import redact
from carl_tui.store.fleet import differing_keys, fleet_row
from carl_tui.store.run_summary import SUMMARY, SUMMARY_STEP
from carl_tui.ui.fleet_columns import config_text
from carl_tui.ui.format import DASH, age_text, duration_text
from carl_tui.ui.screens.info import InfoScreen
from carl_tui.ui.widgets.text_table import PlainTable

if TYPE_CHECKING:  # pragma: no cover
    from carl_tui.store import RunSnapshot, RunStore
    from carl_tui.store.fleet import FleetRow

MAX_EVENTS = 30  # the newest; `e` on the dashboard lists them all
MAX_VALUE = 60  # characters of one config value
JOB_META = frozenset({"job_id", "flavor", "command", "labels", "url"})  # a job's, not config


def _pairs(title: str, items: Sequence[tuple[str, Any]]) -> PlainTable:
    table = PlainTable(title=title, title_justify="left", show_header=False, show_edge=False,
                  expand=True, box=None, padding=(0, 1))
    table.add_column("key", style="bold", no_wrap=True, ratio=1)
    table.add_column("value", overflow="fold", ratio=3)
    for key, value in items:
        text = value if isinstance(value, Text) else Text(redact(_short(value)))
        table.add_row(str(key), text)
    return table


def _short(v: Any) -> str:
    text = config_text(v)
    return text if len(text) <= MAX_VALUE else text[: MAX_VALUE - 1] + "…"


def summary_values(snap: RunSnapshot) -> list[tuple[str, Any]]:
    """Values the run gives only once: the Trainer's end of training, and the keys of a
    logged summary that are not also a curve (`best_reward`, not `reward`)."""
    out: list[tuple[str, Any]] = []
    for key, v in (snap.meta.get(SUMMARY) or {}).items():
        out.append((key, v))
    if snap.meta.get(SUMMARY_STEP) is not None:
        out.append(("(at step)", snap.meta[SUMMARY_STEP]))
    summary = snap.meta.get("summary")
    if isinstance(summary, Mapping):
        out += [(k, v) for k, v in summary.items()
                if not str(k).startswith("_") and k not in snap.series
                and not isinstance(v, Mapping)]
    return out


def job_lines(snap: RunSnapshot, row: FleetRow | None, now: float) -> list[tuple[str, Any]]:
    job, meta = snap.job, snap.meta
    out: list[tuple[str, Any]] = []
    if job is not None:
        out += [("job", job.job_id), ("stage", job.stage)]
        if job.message:
            out.append(("message", job.message))
    flavor = (job.flavor if job is not None else "") or meta.get("flavor")
    if flavor:
        out.append(("flavor", flavor))
    command = meta.get("command")
    if command:
        out.append(("command", " ".join(map(str, command)) if isinstance(command, list)
                    else str(command)))
    if job is not None and job.created_at is not None:
        out.append(("running for", duration_text((job.finished_at or now) - job.created_at)))
    if row is not None and row.cost_usd is not None:
        out.append(("cost so far", f"${row.cost_usd:.2f}"))
    if job is not None and job.url:
        out.append(("url", job.url))
    return out


def events_table(snap: RunSnapshot) -> PlainTable:
    table = PlainTable(title="events", title_justify="left", show_edge=False, expand=True,
                  box=None, padding=(0, 1))
    table.add_column("step", justify="right", no_wrap=True)
    table.add_column("what", no_wrap=True)
    table.add_column("", overflow="fold")
    events = sorted(snap.events, key=lambda e: -1 if e.step is None else e.step)
    for e in events[-MAX_EVENTS:]:
        table.add_row(DASH if e.step is None else str(e.step), e.kind.replace("_", " "),
                      Text(redact(e.text)))
    return table


def side_by_side(rows: Sequence[FleetRow]) -> PlainTable | None:
    """The config keys that differ between `rows`, one column per run."""
    keys = differing_keys(rows)
    if len(rows) < 2 or not keys:
        return None
    table = PlainTable(title="config that differs", title_justify="left", show_edge=False,
                  expand=True, box=None, padding=(0, 1))
    table.add_column("key", style="bold", no_wrap=True)
    for r in rows:
        table.add_column(Text(redact(r.run.label)), overflow="fold")
    for key in keys:
        table.add_row(key, *(Text(redact(_short(r.config.get(key)))) for r in rows))
    return table


class RunCardScreen(InfoScreen):
    CLOSE_KEYS = "escape,q,i"
    BODY_ID = "run-card-body"

    def __init__(self, store: RunStore, key: str, compared: Sequence[str] = (),
                 now: float | None = None, prices: Mapping[str, float] | None = None):
        """`prices`: each Jobs flavor's price per hour, for a job's cost (None: no cost)."""
        super().__init__()
        self.store = store
        self.key = key
        self.compared = [k for k in compared if k != key]
        self.now = time.time() if now is None else now
        self.prices = prices

    def _row(self, snap: RunSnapshot | None) -> FleetRow | None:
        return None if snap is None else fleet_row(snap, now=self.now, prices=self.prices)

    def render_body(self) -> RenderableType:
        snap = self.store.snapshot(self.key, max_points=64)
        if snap is None:
            return Text(f"{self.key}: no data yet.")
        row = self._row(snap)
        head = Text(redact(snap.run.label), style="bold")
        head.append(f"  [{snap.run.source}: {redact(snap.run.project)}]", style="dim")
        if row is not None:
            step = DASH if row.last_step is None else row.last_step
            head.append(f" · {row.state} · step {step}"
                        f" · updated {age_text(row.updated_at, self.now)}")
        parts: list[RenderableType] = [head, Text()]
        # The runs selected to compare: what differs first, above the run's own config (a
        # trainer's config is 170 keys long: the comparison was off the screen under it).
        others = [r for k in self.compared if (r := self._row(self.store.snapshot(k, 64)))]
        table = side_by_side([row, *others]) if row is not None and others else None
        if table is not None:
            parts += [table, Text()]
        config = {k: v for k, v in (row.config if row is not None else {}).items()
                  if k not in JOB_META}  # a job's meta: in its own part below
        items = sorted(config.items())
        parts.append(_pairs("config", items) if config
                     else Text("config: none logged", style="dim"))
        for title, items in (("summary values", summary_values(snap)),
                             ("job", job_lines(snap, row, self.now))):
            if items:
                parts += [Text(), _pairs(title, items)]
        parts += [Text(), events_table(snap) if snap.events
                  else Text("events: nothing to report yet", style="dim")]
        return Group(*parts)
