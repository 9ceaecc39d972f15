"""`d`: Claude's diagnosis of the run, streamed as Markdown; follow-up questions; save.

The answer arrives from a worker thread in small batches of text. The whole
conversation (questions and answers) is kept as Markdown: ctrl+s writes it to
a file in the current directory (secrets removed).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Markdown, Static
from textual.worker import get_current_worker

from carl_tui.actions.diagnosis import DEFAULT_QUESTION, Diagnoser, Exchange, save_markdown
from carl_tui.errors import CarlError
from carl_tui.ui.messages import DiagnosisDelta, DiagnosisFinished, failure
from carl_tui.ui.screens.dialog import dialog_css
from carl_tui.ui.settings import Services

BATCH_SECONDS = 0.05  # deltas are posted to the screen at most this often


class DiagnosisScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Close", id="diagnosis.close"),
        Binding("ctrl+s", "save", "Save", id="diagnosis.save", priority=True,
                tooltip="Save the conversation as Markdown in the current directory"),
    ]
    DEFAULT_CSS = dialog_css("DiagnosisScreen", width="90%", height="90%", max_height=None,
                             title="text-style: bold;") + """
    DiagnosisScreen #answer-scroll { height: 1fr; border: round $foreground 30%; }
    DiagnosisScreen #diag-status { height: auto; color: $text-muted; }
    DiagnosisScreen #diag-status.-error { color: $error; }
    """

    def __init__(self, summary: str, run_label: str, services: Services,
                 save_dir: Path | None = None):
        super().__init__()
        self._summary = summary
        self._run_label = run_label
        self._services = services
        self._diagnoser: Diagnoser | None = None
        self._save_dir = save_dir
        self.history: list[Exchange] = []
        self.transcript = ""  # the Markdown shown, as text
        self.busy = False
        self.saved_to: Path | None = None

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(Text(f"Claude's diagnosis of {self._run_label}  "
                             "(ctrl+s saves, esc closes)"), classes="title")
            with VerticalScroll(id="answer-scroll"):
                yield Markdown(id="answer")
            yield Static(id="diag-status")
            yield Input(placeholder="Ask a follow-up question and press enter", id="question",
                        compact=True)

    async def on_mount(self) -> None:
        self.query_one("#question", Input).focus()
        await self.ask(None)

    # -- asking -------------------------------------------------------------------

    async def ask(self, question: str | None) -> None:
        if self.busy:
            self.notify("Claude is still answering.", severity="warning")
            return
        self.busy = True
        head = f"**You:** {question}\n\n" if question else ""
        if self.transcript:
            head = "\n\n---\n\n" + head
        await self._append(head)
        self._status("Asking Claude…")
        self._stream(question, tuple(self.history))

    @work(thread=True, exclusive=True, exit_on_error=False, group="diagnosis",
          description="asking Claude")
    def _stream(self, question: str | None, history: tuple[Exchange, ...]) -> None:
        worker = get_current_worker()
        parts: list[str] = []
        pending: list[str] = []
        error = ""
        last = time.monotonic()
        try:
            if self._diagnoser is None:
                self._diagnoser = self._services.diagnoser()
            for delta in self._diagnoser.stream(self._summary, question, history):
                if worker.is_cancelled:
                    break
                parts.append(delta)
                pending.append(delta)
                if time.monotonic() - last >= BATCH_SECONDS:
                    self.post_message(DiagnosisDelta("".join(pending)))
                    pending, last = [], time.monotonic()
        except Exception as exc:  # noqa: BLE001  (shown plainly, never a traceback)
            error = failure("Diagnosis", exc)
        if pending:
            self.post_message(DiagnosisDelta("".join(pending)))
        self.post_message(DiagnosisFinished(question or "", "".join(parts), error))

    async def on_diagnosis_delta(self, msg: DiagnosisDelta) -> None:
        await self._append(msg.text)

    async def on_diagnosis_finished(self, msg: DiagnosisFinished) -> None:
        self.busy = False
        if msg.error:
            await self._append(f"\n\n> {msg.error}\n" if msg.answer else f"> {msg.error}\n")
            self._status(msg.error, error=True)
            return
        self.history.append(Exchange(msg.question or DEFAULT_QUESTION, msg.answer))
        self._status("Ask a follow-up below, ctrl+s to save, esc to close.")

    def _append(self, text: str):
        self.transcript += text
        scroll = self.query_one("#answer-scroll", VerticalScroll)
        follow = scroll.scroll_y >= scroll.max_scroll_y - 1
        done = self.query_one("#answer", Markdown).append(text)
        if follow:
            self.call_after_refresh(scroll.scroll_end, animate=False)
        return done

    def _status(self, text: str, *, error: bool = False) -> None:
        status = self.query_one("#diag-status", Static)
        status.set_class(error, "-error")
        status.update(Text(text))

    async def on_input_submitted(self, event: Input.Submitted) -> None:
        question = event.value.strip()
        if not question:
            return
        if self.busy:
            self.notify("Claude is still answering.", severity="warning")
            return
        event.input.value = ""
        await self.ask(question)

    # -- closing and saving ----------------------------------------------------------

    def action_close(self) -> None:
        self.workers.cancel_group(self, "diagnosis")
        self.dismiss(None)

    def action_save(self) -> None:
        if not self.transcript.strip():
            self.notify("Nothing to save yet.", severity="warning")
            return
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", self._run_label).strip("-") or "run"
        name = f"carl-diagnosis-{slug}-{time.strftime('%Y%m%d-%H%M%S')}.md"
        folder = self._save_dir or Path.cwd()
        text = f"# Diagnosis of {self._run_label}\n\n{self.transcript}"
        try:
            path = save_markdown(folder / name, text)
        except CarlError as exc:
            self._status(str(exc), error=True)
            return
        self.saved_to = path
        self._status(f"Saved to {path}")
        self.notify(f"Saved to {path}", timeout=5)
