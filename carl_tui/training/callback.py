"""`CarlCallback`: stream a Trainer's logs as JSON lines for the dashboard.

Every log the trainer emits is written as a metrics line with TRL's key names
unchanged, plus `phi = 1 - entropy / ln V` whenever `entropy` is logged. The
first line of a stream is a meta line (run identity, model, method, vocabulary
size, config). The callback also carries the phase-transition gate: when it
fires, a `phase_transition` marker is written and, if asked, training stops.

Each line is written with a single `os.write` on a file opened for appending
(`StreamWriter`, in `training/stream.py`), so a reader tailing the file never
sees a torn line.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from carl_tui.coherence.gates import PhaseTransitionGate
from carl_tui.coherence.phases import ACCURACY_CEILING, PhaseClassifier
from carl_tui.metric_names import ACCURACY, END_OF_TRAINING_KEYS
from carl_tui.training.completion_sample import completions_line
from carl_tui.training.stream import StreamWriter, finite, json_safe, phi_of

__all__ = ["CarlCallback", "StreamWriter", "method_of"]


def method_of(args: Any) -> str:
    """"sft", "grpo", ... from the trainer's config class name; "train" if unknown."""
    name = type(args).__name__
    return name[: -len("Config")].lower() if name.endswith("Config") else "train"


class CarlCallback(TrainerCallback):
    """Write every trainer log to the JSONL stream at `path`, with phi, gate and phase events.

    - `vocab_size`: V in phi = 1 - entropy / ln V.
    - `gate`: a `PhaseTransitionGate` (a default one is made; pass `False` for none).
    - `stop_on_gate`: stop training when the gate fires (SFT warm-up ends).
    - `phases`: label steps with the online phase classifier (from `phase_metric`
      and `entropy`); a `phase` marker is written whenever the label changes.
    - `meta`: extra fields for the meta line (e.g. `{"model": ..., "config": {...}}`).

    - `completions`: with TRL's GRPO trainer given to `attach`, write a sample of
      this many completions of each logged step (prompt, completion, each reward,
      advantage, CARL score) as a `completions` line (`training/completion_sample.py`).

    `path` may be a `StreamWriter` already in use (a process that opened its
    stream before importing transformers, see `training/stream.py`): if it wrote
    lines, the first of them was the meta line and the stream goes on after them.
    """

    def __init__(
        self,
        path: str | Path | StreamWriter,
        vocab_size: int,
        *,
        gate: Any = None,
        stop_on_gate: bool = False,
        run_name: str | None = None,
        meta: Mapping[str, Any] | None = None,
        project: str = "carl-tui",
        run_id: str | None = None,
        phases: bool = True,
        phase_metric: str = "mean_token_accuracy",
        completions: int = 0,
    ):
        if vocab_size < 2:
            raise ValueError("vocab_size must be at least 2")

        self.writer = path if isinstance(path, StreamWriter) else StreamWriter(path)
        self.vocab_size = int(vocab_size)
        self.gate = PhaseTransitionGate() if gate is None else (gate or None)
        self.stop_on_gate = stop_on_gate
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.run_name = run_name or self.run_id
        self.project = project
        self.extra_meta = dict(meta or {})
        self.gate_step: int | None = None
        self.last_step = 0
        self.step_offset = 0
        self.stage = ""
        self._meta_written = self.writer.lines > 0
        self._stop_requested = False
        self.phase_metric = phase_metric
        self.phase: str | None = None
        self._phases = self._new_classifier() if phases else None
        self.completions = int(completions)
        self._trainer: Any = None

    # -- writing -------------------------------------------------------------

    def write_meta(self, **fields: Any) -> None:
        """Write a meta line now. The first call makes the stream's first line;
        later calls merge their fields into the run."""
        obj: dict[str, Any] = {
            "event": "meta",
            "run_id": self.run_id,
            "name": self.run_name,
            "project": self.project,
            "vocab_size": self.vocab_size,
        }
        obj.update(self.extra_meta)
        obj.update(fields)
        self.writer.write(json_safe(obj))
        self._meta_written = True

    def _ensure_meta(self) -> None:
        if not self._meta_written:
            self.write_meta()

    def marker(self, kind: str, step: int | None = None, **detail: Any) -> None:
        """Write a marker line at `step` (stream steps; default: the latest step)."""
        self._ensure_meta()
        at = self.last_step if step is None else step
        obj = {"event": "marker", "kind": kind, "step": int(at)}
        obj.update(json_safe(detail))
        self.writer.write(obj)

    def log_text(self, text: str) -> None:
        """Write a log line."""
        self._ensure_meta()
        self.writer.write({"event": "log", "text": str(text)})

    def write_metrics(self, step: int, values: Mapping[str, Any]) -> dict[str, Any]:
        """Write one metrics line (phi derived from `entropy` when present); returns it."""
        self._ensure_meta()
        line: dict[str, Any] = {"step": int(step), "time": time.time()}
        for key, value in values.items():
            if key in ("step", "time", "event"):
                continue
            v = finite(value)
            if v is not None:
                line[key] = v
        entropy = line.get("entropy")
        if entropy is not None and "phi" not in line:
            line["phi"] = self.phi_of(entropy)
        self.writer.write(line)
        self.last_step = max(self.last_step, int(step))
        return line

    def phi_of(self, entropy: float) -> float:
        """phi = 1 - entropy / ln V for this run's vocabulary, clipped to [0, 1]."""
        return phi_of(entropy, self.vocab_size)

    # -- stages and stopping ---------------------------------------------------

    def _new_classifier(self):
        """A classifier for `phase_metric`: token accuracy has a ceiling, as in the store's
        phases; a reward has none."""
        c = PhaseClassifier(
            ceiling=ACCURACY_CEILING if self.phase_metric == ACCURACY else math.inf)
        c.gate_watched = self.gate is not None and self.gate.metric == self.phase_metric
        return c

    def begin_stage(self, stage: str, *, phase_metric: str | None = None, **meta: Any) -> None:
        """Continue the stream with a new trainer (e.g. GRPO after SFT): its steps
        follow the last step written, and a `stage` marker and a meta line record it.
        `phase_metric` restarts the phase classifier on another metric (e.g. the
        task reward)."""
        self.step_offset = self.last_step
        self.stage = stage
        if phase_metric is not None and self._phases is not None:
            self.phase_metric = phase_metric
            self._phases = self._new_classifier()
            self.phase = None
        if meta:
            self.write_meta(**meta)
        self.marker("stage", self.last_step, stage=stage)

    def attach(self, trainer: Any) -> None:
        """The trainer whose completions are sampled (a `GRPOTrainer`: its `_logs`)."""
        self._trainer = trainer

    def write_completions(self, step: int, model: Any = None, tokenizer: Any = None) -> None:
        """Write the sample of the attached trainer's latest completions at `step`."""
        logs = getattr(self._trainer, "_logs", None)
        if not self.completions or not isinstance(logs, dict):
            return

        line = completions_line(logs, step, self.completions, model, tokenizer)
        if line is not None:
            self._ensure_meta()
            self.writer.write(json_safe(line))

    def request_stop(self) -> None:
        """Ask the trainer to stop at the end of the current step (e.g. on SIGTERM)."""
        self._stop_requested = True

    def close(self) -> None:
        self.writer.close()

    # -- TrainerCallback -------------------------------------------------------

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if state.is_world_process_zero and not self._meta_written:
            name = getattr(getattr(model, "config", None), "name_or_path", "") or ""
            cfg = {k: v for k, v in args.to_dict().items()
                   if isinstance(v, (int, float, str, bool))}
            self.write_meta(model=name, method=method_of(args), config=cfg)
        return control

    def on_step_end(self, args, state, control, **kwargs):
        if self._stop_requested:
            control.should_training_stop = True
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        step = int(state.global_step) + self.step_offset
        zero = state.is_world_process_zero
        if zero:
            self.write_metrics(step, logs)
            if self._trainer is not None and not any(
                    k.startswith("eval_") or k in END_OF_TRAINING_KEYS for k in logs):
                self.write_completions(step, kwargs.get("model"), kwargs.get("processing_class"))
        entropy = finite(logs.get("entropy"))
        if self.gate is not None and not self.gate.fired:
            value = finite(logs.get(self.gate.metric))
            if value is not None and self.gate.update(step, float(value), entropy=entropy):
                self.gate_step = step
                if self._phases is not None and self.gate.metric == self.phase_metric:
                    self._phases.gate_fired(step)  # gate and phase agree from here
                if zero:
                    self.marker(
                        "phase_transition",
                        step,
                        metric=self.gate.metric,
                        value=value,
                        peak_entropy=self.gate.peak_entropy,
                        peak_entropy_step=self.gate.peak_entropy_step,
                    )
                    self.log_text(
                        f"phase-transition gate fired at step {step} "
                        f"({self.gate.metric} = {value:.4f})"
                    )
                if self.stop_on_gate:
                    control.should_training_stop = True
        if self._phases is not None and zero:
            self._update_phase(step, logs, entropy)
        if self._stop_requested:
            control.should_training_stop = True
        return control

    def _update_phase(self, step: int, logs: Mapping[str, Any], entropy: float | None) -> None:
        acc = finite(logs.get(self.phase_metric))
        if acc is None or entropy is None:
            return
        phase = self._phases.update(step, float(acc), float(entropy))
        label = getattr(phase, "value", phase)
        label = str(label) if label is not None else None
        if label and label != self.phase:
            self.phase = label
            self.marker("phase", step, phase=label, from_step=self._phases.since_step)

    def on_train_end(self, args, state, control, **kwargs):
        return control
