"""`p`: push a checkpoint folder of the run to a Hub model repo, with a progress bar.

Choose the folder (checkpoints newest first, then the output directory),
edit the target repo, confirm; the upload runs in a worker. The commit URL is
shown only once the commit is made; a failure is shown as is.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, OptionList, ProgressBar, Static
from textual.widgets.option_list import Option

from carl_tui.actions.push import PushResult, human_bytes, list_files
from carl_tui.ui.messages import PushFinished, PushProgressed, failure
from carl_tui.ui.screens.confirm import ConfirmScreen
from carl_tui.ui.screens.dialog import dialog_css
from carl_tui.ui.settings import Services


class PushScreen(ModalScreen[PushResult | None]):
    """Dismisses with the `PushResult` once pushed, or None."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Close", id="push.close"),
        Binding("ctrl+u", "push", "Push", id="push.submit", priority=True),
    ]
    DEFAULT_CSS = dialog_css("PushScreen", width=96, max_height="90%") + """
    PushScreen OptionList { height: auto; max-height: 10; }
    PushScreen ProgressBar { margin-top: 1; }
    PushScreen .-hidden { display: none; }
    PushScreen #push-status { height: auto; color: $text-muted; }
    PushScreen #push-error { height: auto; color: $error; }
    PushScreen #push-result { height: auto; color: $success; text-style: bold; }
    PushScreen #buttons { height: auto; align-horizontal: right; margin-top: 1; }
    PushScreen #buttons Button { margin-left: 2; }
    PushScreen .field { color: $text-muted; margin-top: 1; }
    """

    def __init__(self, choices: list[Path], repo_id: str, services: Services, *,
                 output_dir: Path):
        super().__init__()
        self._choices = choices
        self._repo = repo_id
        self._services = services
        self._output_dir = output_dir
        self.busy = False
        self.result: PushResult | None = None

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Push a checkpoint to the Hub (ctrl+u pushes, esc closes)", classes="title")
            if not self._choices:
                yield Static(Text(f"No folder to push: {self._output_dir} does not exist or is "
                                  "not a folder.", style="yellow"))
            yield Label("Folder (checkpoints newest first)", classes="field")
            options = [Option(self._label(p), id=str(i)) for i, p in enumerate(self._choices)]
            yield OptionList(*options, id="folders")
            yield Label("Target model repo (created private if missing)", classes="field")
            yield Input(self._repo, placeholder="user/name (created private if missing)",
                        id="repo", compact=True)
            yield ProgressBar(total=100, show_eta=False, id="bar", classes="-hidden")
            yield Static(id="push-status")
            yield Static(id="push-error")
            yield Static(id="push-result")
            with Horizontal(id="buttons"):
                yield Button("Close (esc)", id="close", compact=True)
                yield Button("Push (ctrl+u)", variant="primary", id="push", compact=True,
                             disabled=not self._choices)

    def _label(self, path: Path) -> str:
        if path == self._output_dir:
            return f"{path}  (the whole output directory)"
        return f"{path.name}  ({path})"

    def on_mount(self) -> None:
        options = self.query_one("#folders", OptionList)
        if self._choices:
            options.highlighted = 0
            options.focus()

    @property
    def folder(self) -> Path | None:
        i = self.query_one("#folders", OptionList).highlighted
        return self._choices[i] if i is not None and 0 <= i < len(self._choices) else None

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "push":
            self.action_push()
        elif event.button.id == "close":
            self.action_close()

    def on_option_list_option_selected(self, _event: OptionList.OptionSelected) -> None:
        self.query_one("#repo", Input).focus()

    def on_input_submitted(self, _event: Input.Submitted) -> None:
        self.action_push()

    def action_close(self) -> None:
        if self.busy:
            self.notify("The upload is under way; it cannot be interrupted safely.",
                        severity="warning")
            return
        self.dismiss(self.result)

    def action_push(self) -> None:
        if self.busy:
            return
        folder, repo = self.folder, self.query_one("#repo", Input).value.strip()
        error = self.query_one("#push-error", Static)
        if folder is None:
            error.update("Choose a folder first.")
            return
        if repo.count("/") != 1 or not all(repo.split("/")):
            error.update(Text(f"The target repo {repo!r} is not of the form user/name."))
            return
        error.update("")
        files = list_files(folder) if folder.is_dir() else []
        size = sum(s for _, _, s in files)
        body = (f"Upload {folder} ({len(files)} files, {human_bytes(size)}) to the model repo "
                f"{repo} (created private if it does not exist), in one commit.")

        def answered(yes: bool | None) -> None:
            if yes:
                self._start(folder, repo)

        confirm = ConfirmScreen(f"Push {folder.name} to {repo}?", body, "Push")
        self.app.push_screen(confirm, answered)

    def _start(self, folder: Path, repo: str) -> None:
        self.busy = True
        self.result = None
        self.query_one("#push", Button).disabled = True
        self.query_one("#push-result", Static).update("")
        bar = self.query_one("#bar", ProgressBar)
        bar.update(total=100, progress=0)
        bar.remove_class("-hidden")
        self.query_one("#push-status", Static).update(Text(f"Pushing {folder.name} to {repo}…"))
        self._upload(folder, repo)

    @work(thread=True, exclusive=True, exit_on_error=False, group="push",
          description="pushing to the Hub")
    def _upload(self, folder: Path, repo: str) -> None:
        try:
            result = self._services.push_folder(
                folder, repo, lambda p: self.post_message(PushProgressed(p)))
        except Exception as exc:  # noqa: BLE001  (shown plainly, never a traceback)
            self.post_message(PushFinished(error=failure("Push", exc)))
        else:
            self.post_message(PushFinished(result=result))

    def on_push_progressed(self, msg: PushProgressed) -> None:
        if not self.busy:
            return
        p = msg.progress
        if p.phase == "done":  # the result message says so, with the URL
            return
        self.query_one("#bar", ProgressBar).update(progress=round(100 * p.fraction, 1))
        self.query_one("#push-status", Static).update(Text(p.text()))

    def on_push_finished(self, msg: PushFinished) -> None:
        self.busy = False
        self.query_one("#push", Button).disabled = not self._choices
        bar = self.query_one("#bar", ProgressBar)
        if msg.error or msg.result is None:
            bar.add_class("-hidden")
            self.query_one("#push-status", Static).update("The push did not complete.")
            self.query_one("#push-error", Static).update(Text(msg.error or "Push failed."))
            return
        r: PushResult = msg.result
        self.result = r
        bar.update(progress=100)
        self.query_one("#push-status", Static).update(
            Text(f"Pushed {r.files} files ({human_bytes(r.bytes)}) to {r.repo_id}."))
        self.query_one("#push-result", Static).update(Text(f"Commit: {r.commit_url}"))
