"""One line about the current run's job: id, stage, hardware, duration, usage."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.widgets import Static

from carl_tui.ui.format import duration_text

if TYPE_CHECKING:  # pragma: no cover
    from carl_tui.events import Job
    from carl_tui.store.system import JobUsage

STAGE_STYLE = {
    "SCHEDULING": "bold yellow",
    "RUNNING": "bold green",
    "COMPLETED": "bold cyan",
    "CANCELED": "bold magenta",
    "ERROR": "bold red",
    "DELETED": "dim",
}


def job_text(job: Job, usage: JobUsage | None = None) -> Text:
    t = Text(no_wrap=True, overflow="ellipsis")
    t.append("job ", style="dim")
    t.append(job.job_id, style="bold")
    t.append(" ")
    t.append(job.stage, style=STAGE_STYLE.get(job.stage, "bold"))
    if job.message and job.message != job.stage:  # Slurm's COMPLETED is the stage's word
        t.append(f" ({job.message})", style="red" if job.stage == "ERROR" else "")
    if job.flavor:
        t.append(f" · {job.flavor}")
    t.append(f" · {duration_text(job.duration_s)}")
    if usage is not None:
        parts = []
        if usage.gpu_percent is not None:
            parts.append(f"GPU {usage.gpu_percent:.0f}%")
        if usage.cpu_percent is not None:
            parts.append(f"CPU {usage.cpu_percent:.0f}%")
        if usage.memory_mb is not None:
            parts.append(f"RAM {usage.memory_mb / 1024:.1f} GiB")
        if parts:
            t.append(" · " + " ".join(parts), style="dim")
    return t


class JobBar(Static):
    """Hidden while the current run has no job."""

    DEFAULT_CSS = """
    JobBar { height: 1; padding: 0 1; background: $panel; display: none; }
    JobBar.-shown { display: block; }
    """

    _shown: Text | str | None = None

    def show(self, job: Job | None, usage: JobUsage | None = None) -> None:
        self.set_class(job is not None, "-shown")
        text = job_text(job, usage) if job is not None else ""
        if text != self._shown:
            self._shown = text
            self.update(text, layout=False)
