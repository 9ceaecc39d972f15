"""`j`: the user's Hugging Face jobs (status, flavor, age, label), this machine's runs and
the clusters' jobs (Ray, Slurm: a pending one with its reason); enter follows one."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label, Static

from carl_tui.actions.engines import is_cluster_kind
from carl_tui.events import Job
from carl_tui.ui.format import duration_text
from carl_tui.ui.messages import JobsListed, failure
from carl_tui.ui.screens.dialog import dialog_css
from carl_tui.ui.settings import Services
from carl_tui.ui.widgets.job_bar import STAGE_STYLE
from carl_tui.ui.widgets.text_table import TextTable

COLUMNS = ("status", "flavor", "age", "job id", "label")


class JobsScreen(ModalScreen[Job | None]):
    """Dismisses with the chosen job, or None."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss(None)", "Close", id="jobs.close"),
        Binding("r", "reload", "Reload", id="jobs.reload", tooltip="List the jobs again"),
    ]
    DEFAULT_CSS = dialog_css("JobsScreen", width=120, max_height="85%") + """
    JobsScreen DataTable { height: auto; max-height: 30; }
    JobsScreen #jobs-status { height: auto; color: $text-muted; }
    JobsScreen #jobs-status.-error { color: $error; }
    """

    def __init__(self, services: Services, current_run: str | None = None,
                 list_local: Callable[[], list[Job]] | None = None):
        """The Hub's jobs come from `services` (may raise); `list_local`: runs started on
        this machine from the launch form, listed after them even when the Hub cannot be
        read; `current_run`: the key of the run in view (its job is marked). Rows are keyed
        by their run's key."""
        super().__init__()
        self._services = services
        self._list_local = list_local
        self._current = current_run
        self.rows: dict[str, Job] = {}

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(f"{self._what()} (enter follows, r reloads, esc closes)",
                        classes="title")
            yield TextTable(id="jobs", cursor_type="row", zebra_stripes=True)
            yield Static("Listing jobs…", id="jobs-status")

    def _what(self) -> str:
        """What is listed: "Your Hugging Face jobs, this machine's runs and Slurm jobs"."""
        clusters = " and ".join(self._services.cluster_names())
        if not clusters:
            return "Your Hugging Face jobs and this machine's runs"
        return f"Your Hugging Face jobs, this machine's runs and {clusters} jobs"

    def on_mount(self) -> None:
        table = self.query_one(TextTable)
        table.add_columns(*COLUMNS)  # the header while the jobs are listed
        table.focus()
        self.action_reload()

    def action_reload(self) -> None:
        self._status("Listing jobs…")
        self._load()

    @work(thread=True, exclusive=True, exit_on_error=False, group="jobs-list",
          description="listing your jobs")
    def _load(self) -> None:
        local: list[Job] = []
        if self._list_local is not None:
            try:
                local = self._list_local()
            except Exception:  # noqa: BLE001 - the registry is a convenience: list the rest
                local = []
        try:
            rows = self._services.list_jobs()
        except Exception as exc:  # noqa: BLE001  (shown plainly, never a traceback)
            self.post_message(JobsListed(rows=local, error=failure("Listing your jobs", exc)))
        else:
            self.post_message(JobsListed(rows=rows + local))

    def on_jobs_listed(self, msg: JobsListed) -> None:
        if msg.error and not msg.rows:
            self._status(msg.error, error=True)
            return
        table = self.query_one(TextTable)
        self.rows = {r.run.key: r for r in msg.rows}
        cells = {r.run.key: (
            Text(("● " if r.run.key == self._current else "") + _status_word(r),
                 style=STAGE_STYLE.get(r.stage, "")),
            Text(r.flavor),
            Text(duration_text(r.age_s, coarse=True)),
            Text(r.job_id),
            Text(r.label if len(r.label) <= 60 else r.label[:59] + "…"),  # text, not markup
        ) for r in msg.rows}
        # Each column as wide as its widest cell, set here: a table left to size its own
        # columns when idle can keep the header it drew before, header-wide.
        table.clear(columns=True)
        for i, label in enumerate(COLUMNS):
            table.add_column(label, width=max([len(label), *(c[i].cell_len
                                                             for c in cells.values())]))
        for key, row in cells.items():
            table.add_row(*row, key=key)
        if self._current in self.rows:
            table.move_cursor(row=table.get_row_index(self._current))
        if msg.error:
            clusters = " and ".join(self._services.cluster_names())
            listed = (f"this machine's runs and {clusters} jobs" if clusters
                      else "runs on this machine")
            self._status(f"{msg.error} ({listed} listed)", error=True)
            return
        n = len(msg.rows)
        ns = msg.rows[0].namespace if msg.rows else ""
        self._status(f"{n} job{'s' if n != 1 else ''}" + (f" in {ns}" if ns else "")
                     if n else "No jobs yet: press l to launch one.")

    def _status(self, text: str, *, error: bool = False) -> None:
        status = self.query_one("#jobs-status", Static)
        status.set_class(error, "-error")
        status.update(Text(text))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        row = self.rows.get(str(event.row_key.value))
        if row is not None:
            self.dismiss(row)


def _status_word(job: Job) -> str:
    """The stage, with a cluster's own word where it says more: "SCHEDULING · PENDING
    (Resources)" for a Slurm job waiting, "CANCELED · STOPPED" for a stopped Ray job (not
    Slurm's "CANCELLED": the same word)."""
    said = job.message.replace("CANCELLED", "CANCELED")
    if is_cluster_kind(job.run.source) and said and said != job.stage:
        return f"{job.stage} · {job.message}"
    return job.stage
