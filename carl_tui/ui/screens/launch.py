"""`l`: the launch form. Checks everything before anything is sent, then launches in a worker.

The hardware flavors (GPU only, with their price per hour) load in a worker
when the form opens. A Slurm launch shows its batch script for a yes before it is
submitted. The form stays open while the launch runs, so a refusal
(a bad token, no credits, an unknown flavor) is shown next to the fields.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, Static, Switch

from carl_tui.actions.jobs import JobsClient
from carl_tui.actions.launch_spec import CLUSTER_TARGETS, LaunchSpec, timeout_seconds
from carl_tui.engines.ray import DEFAULT_ADDRESS as DEFAULT_RAY
from carl_tui.engines.slurm import batch_script
from carl_tui.errors import CarlError
from carl_tui.identity import local_run
from carl_tui.ui.messages import HardwareLoaded, LaunchFinished, LaunchOutcome, failure
from carl_tui.ui.screens.confirm import ConfirmScreen
from carl_tui.ui.screens.dialog import dialog_css
from carl_tui.ui.settings import Services

SHORT = {"hf-jobs": "hf"}  # a target as its fields' class says it (`-only-hf`)


def _row(label: str, widget, *, only: str = "") -> list:
    """A label and its field; `only` ("hf", "local", "ray", "slurm", or several: "ray
    slurm") shows them for those targets only."""
    classes = " ".join(f"-only-{t}" for t in only.split())
    if classes:
        widget.add_class(*classes.split())
    return [Label(label, classes=classes), widget]


def script_confirmation(spec: LaunchSpec, engine) -> ConfirmScreen:
    """The yes a Slurm launch waits for: where, and the batch script `sbatch` is given."""
    body = (f"{spec.describe()}\n\nsbatch is given this batch script on "
            f"{engine.describe()}:\n\n{batch_script(spec.submission())}")
    return ConfirmScreen(f"Submit {spec.job_name()} to Slurm?", body.rstrip(), "Submit",
                         width=110)


class LaunchScreen(ModalScreen[LaunchOutcome | None]):
    """Dismisses with the `LaunchOutcome`, or None when cancelled."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="launch.cancel"),
        Binding("ctrl+l", "launch", "Launch", id="launch.submit", priority=True),
    ]
    DEFAULT_CSS = dialog_css("LaunchScreen", width=100, max_height="96%") + """
    LaunchScreen #fields {
        grid-size: 2; grid-columns: 24 1fr; grid-rows: auto; grid-gutter: 0 1; height: auto;
    }
    LaunchScreen #fields > Label { color: $text-muted; }
    LaunchScreen Switch { border: none; height: 1; padding: 0; }
    LaunchScreen .-hidden { display: none; }
    LaunchScreen #problems { color: $error; height: auto; }
    LaunchScreen #problems.-shown { margin-top: 1; }
    LaunchScreen #launch-note { color: $text-muted; height: auto; }
    LaunchScreen #buttons { height: auto; align-horizontal: right; margin-top: 1; }
    LaunchScreen #buttons Button { margin-left: 2; }
    """

    def __init__(self, defaults: LaunchSpec, services: Services):
        super().__init__()
        self._defaults = defaults
        self._services = services
        self._client: JobsClient | None = None
        self._flavors: dict[str, float] = {}  # name -> price per hour, once loaded
        self.busy = False
        self.problems: list[str] = []

    # -- layout ----------------------------------------------------------------

    def compose(self) -> ComposeResult:
        s = self._defaults
        with Vertical():
            yield Label("Launch a training run (ctrl+l launches, esc cancels)", classes="title")
            with Grid(id="fields"):
                yield from _row("Target", Select(
                    [("Hugging Face Jobs", "hf-jobs"), ("this machine", "local"),
                     ("Ray cluster", "ray"), ("Slurm cluster", "slurm")],
                    value=s.target, allow_blank=False, id="target", compact=True))
                yield from _row("Model", Input(s.model, id="model", compact=True))
                yield from _row("Dataset", Input(s.dataset, id="dataset", compact=True))
                method = s.method if s.method in ("grpo", "sft") else "grpo"
                yield from _row("Method", Select(
                    [("GRPO", "grpo"), ("SFT", "sft")], value=method, allow_blank=False,
                    id="method", compact=True))
                yield from _row("Max steps", Input(str(s.max_steps), id="steps", type="integer",
                                                   compact=True))
                yield from _row("Learning rate",
                                Input(f"{s.learning_rate:g}", id="lr", compact=True))
                yield from _row("Generations per prompt", Input(
                    str(s.num_generations), id="generations", type="integer", compact=True))
                yield from _row("CARL reward", Switch(value=s.carl, id="carl", animate=False))
                yield from _row("Output repo", Input(
                    s.output_repo,
                    placeholder="user/name: the trained model is pushed there (private)",
                    id="output-repo", compact=True), only="hf")
                yield from _row("Hardware", Select(
                    [(f"{s.flavor} (loading prices…)", s.flavor)], value=s.flavor,
                    allow_blank=False, id="flavor", compact=True), only="hf")
                yield from _row("Timeout", Input(s.timeout, placeholder="90m, 2h, 3600",
                                                 id="timeout", compact=True), only="hf slurm")
                yield from _row("Trackio Space", Input(
                    s.trackio_space, placeholder="optional: user/space for live metrics",
                    id="trackio", compact=True), only="hf")
                yield from _row("Output dir", Input(s.output_dir, id="output-dir", compact=True),
                                only="local")
                yield from _row("Ray address", Input(
                    s.ray_address or self._services.ray_address,
                    placeholder=f"the dashboard: $RAY_ADDRESS, else {DEFAULT_RAY}",
                    id="ray-address", compact=True), only="ray")
                yield from _row("Partition", Input(
                    s.partition, placeholder="empty: the cluster's default (sinfo lists them)",
                    id="partition", compact=True), only="slurm")
                yield from _row("GPUs", Input(str(s.num_gpus), id="gpus", type="integer",
                                              compact=True), only="ray slurm")
                yield from _row("Lifetime", Static(Text(
                    "keeps running if you quit carl-tui; j lists it again after a restart",
                    style="dim")), only="local")
            yield Static(id="problems")
            yield Static(id="launch-note")
            with Horizontal(id="buttons"):
                yield Button("Cancel (esc)", id="cancel", compact=True)
                yield Button("Launch (ctrl+l)", variant="primary", id="launch", compact=True)

    def on_mount(self) -> None:
        self._show_target(self._defaults.target)
        self.query_one("#model", Input).focus()
        self._load_hardware()

    def _jobs_client(self) -> JobsClient:
        """One client for the form's calls (it remembers the user's namespace)."""
        if self._client is None:
            self._client = self._services.jobs_client()
        return self._client

    # -- hardware ------------------------------------------------------------

    @work(thread=True, exclusive=True, exit_on_error=False, group="launch-hardware",
          description="listing Jobs hardware")
    def _load_hardware(self) -> None:
        try:
            client = self._jobs_client()
            options = client.hardware(gpu_only=True)
        except CarlError as exc:
            self.post_message(HardwareLoaded(error=str(exc)))
            return
        try:
            namespace = client.namespace()
        except CarlError:
            namespace = ""
        self.post_message(HardwareLoaded(options=options, namespace=namespace))

    def on_hardware_loaded(self, msg: HardwareLoaded) -> None:
        if msg.error:  # said for Hugging Face Jobs only: the Hub's flavors
            if self.query_one("#target", Select).value == "hf-jobs":
                self._note(f"Hardware list unavailable: {msg.error}", style="yellow")
            return
        select = self.query_one("#flavor", Select)
        current = select.value
        self._flavors = {o.name: o.price_per_hour_usd for o in msg.options}
        if not msg.options:
            self._note("The Hub offers no GPU flavor to this account.", style="yellow")
            return
        select.set_options([(o.label(), o.name) for o in msg.options])
        select.value = current if current in self._flavors else msg.options[0].name
        repo = self.query_one("#output-repo", Input)
        if msg.namespace and not repo.value.strip():
            repo.value = f"{msg.namespace}/{self.read_spec()[0].job_name()}"
        self._show_cost()

    # -- the form ------------------------------------------------------------

    def _show_target(self, target: str) -> None:
        shown = f"-only-{SHORT.get(target, target)}"
        for w in self.query("#fields > *"):
            if any(c.startswith("-only-") for c in w.classes):
                w.set_class(shown not in w.classes, "-hidden")

    @on(Select.Changed, "#target")
    def _target_changed(self, event: Select.Changed) -> None:
        self._show_target(str(event.value))
        self._show_cost()

    @on(Select.Changed, "#flavor")
    @on(Input.Changed, "#timeout")
    def _cost_inputs_changed(self) -> None:
        self._show_cost()

    def _show_cost(self) -> None:
        if self.busy:
            return
        spec, _ = self.read_spec()
        if spec.target != "hf-jobs" or spec.flavor not in self._flavors:
            self._note("")
            return
        price = self._flavors[spec.flavor]
        secs = timeout_seconds(spec.timeout)
        most = (f"; at most ${price * secs / 3600:.2f} within the {spec.timeout} timeout"
                if secs else "")
        self._note(f"{spec.flavor}: ${price:.2f} per hour{most}.")

    def _note(self, text: str, style: str = "") -> None:
        self.query_one("#launch-note", Static).update(Text(text, style=style))

    def read_spec(self) -> tuple[LaunchSpec, list[str]]:
        """The spec the fields describe, and the problems with it (none: ready to launch)."""
        problems: list[str] = []

        def text(wid: str) -> str:
            return self.query_one(f"#{wid}", Input).value.strip()

        def integer(wid: str, what: str, default: int) -> int:
            raw = text(wid)
            try:
                return int(raw)
            except ValueError:
                problems.append(f"{what} must be a whole number (got {raw!r}).")
                return default

        d = self._defaults
        try:
            lr = float(text("lr"))
        except ValueError:
            problems.append(f"Learning rate must be a number such as 1e-6 (got {text('lr')!r}).")
            lr = d.learning_rate
        spec = d.with_(
            target=str(self.query_one("#target", Select).value),
            model=text("model"),
            dataset=text("dataset"),
            method=str(self.query_one("#method", Select).value),
            max_steps=integer("steps", "Max steps", d.max_steps),
            learning_rate=lr,
            num_generations=integer("generations", "Generations per prompt", d.num_generations),
            carl=self.query_one("#carl", Switch).value,
            output_repo=text("output-repo"),
            flavor=str(self.query_one("#flavor", Select).value),
            timeout=text("timeout"),
            trackio_space=text("trackio"),
            output_dir=text("output-dir") or d.output_dir,
            ray_address=text("ray-address"),
            partition=text("partition"),
            num_gpus=integer("gpus", "GPUs", d.num_gpus),
        )
        problems += spec.validate(flavors=sorted(self._flavors) if self._flavors else None)
        return spec, problems

    # -- launching -------------------------------------------------------------

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "launch":
            self.action_launch()
        elif event.button.id == "cancel":
            self.action_cancel()

    def action_cancel(self) -> None:
        if self.busy:
            self.notify("The launch is under way; wait for the Hub's answer.", severity="warning")
            return
        self.dismiss(None)

    def action_launch(self) -> None:
        if self.busy:
            return
        spec, problems = self.read_spec()
        self.problems = problems
        box = self.query_one("#problems", Static)
        box.set_class(bool(problems), "-shown")
        if problems:
            box.update(Text("Fix before launching:\n" + "\n".join(f"- {p}" for p in problems)))
            return
        box.update("")
        if spec.target == "slurm":  # the batch script shown: submitted on a yes only
            self.app.push_screen(script_confirmation(spec, self._engine(spec)),
                                 lambda yes: self._go(spec) if yes else None)
            return
        self._go(spec)

    def _go(self, spec: LaunchSpec) -> None:
        self.busy = True
        self.query_one("#launch", Button).disabled = True
        where = {"hf-jobs": "on Hugging Face Jobs", "ray": "on the Ray cluster",
                 "slurm": "on the Slurm cluster"}.get(spec.target, "on this machine")
        self._note(f"Launching {where}: {spec.describe()}…")
        self._launch(spec)

    def _engine(self, spec: LaunchSpec):
        """The engine a cluster target is launched through (Slurm's: your jobs)."""
        return self._services.engine(spec.target,
                                     spec.ray_address if spec.target == "ray" else "")

    @work(thread=True, exclusive=True, exit_on_error=False, group="launch",
          description="launching the run")
    def _launch(self, spec: LaunchSpec) -> None:
        try:
            outcome = self._start(spec)
        except Exception as exc:  # noqa: BLE001  (shown plainly, never a traceback)
            self.post_message(LaunchFinished(error=failure("Launch", exc)))
        else:
            self.post_message(LaunchFinished(outcome=outcome))

    def _start(self, spec: LaunchSpec) -> LaunchOutcome:
        if spec.target == "local":
            stamp = time.strftime("%Y%m%d-%H%M%S")
            stream = Path(spec.output_dir) / f"stream-{stamp}.jsonl"
            local = self._services.start_local(spec, stream)
            try:  # so that `j` finds it again after the dashboard restarts
                local.record(spec.job_name())
            except CarlError:
                pass  # the run goes on; only the listing after a restart is lost
            run = local_run(spec.job_name(), local.started_at, local.pid)
            return LaunchOutcome(spec, run, local=local, stream_path=stream)
        if spec.target in CLUSTER_TARGETS:
            engine = self._engine(spec)
            job = engine.submit(spec.submission())
            self._services.remember(engine, [job])
            return LaunchOutcome(spec, job.run, job=job)
        flavors = sorted(self._flavors) if self._flavors else None
        job = self._jobs_client().launch(spec, flavors=flavors)
        return LaunchOutcome(spec, job.run, job=job)

    def on_launch_finished(self, msg: LaunchFinished) -> None:
        self.busy = False
        self.query_one("#launch", Button).disabled = False
        if msg.error:
            self._note("")
            box = self.query_one("#problems", Static)
            box.set_class(True, "-shown")
            box.update(Text(msg.error))
            return
        self.dismiss(msg.outcome)
