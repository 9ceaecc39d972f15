"""`CarlCallback`: stream a Trainer's logs as JSON lines for the dashboard.

Every log the trainer emits is written as a metrics line with TRL's key names
unchanged, plus `phi = 1 - entropy / ln V` whenever `entropy` is logged. The
first line of a stream is a meta line (run identity, model, method, vocabulary
size, config). The callback also carries the phase-transition gate: when it
fires, a `phase_transition` marker is written and, if asked, training stops.

Each line is written with a single `os.write` on a file opened for appending,
so a reader tailing the file never sees a torn line.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from transformers import TrainerCallback


def _finite(value: Any) -> float | int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    try:  # numpy / torch scalars
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _json_safe(obj: Any, depth: int = 0) -> Any:
    """A JSON-encodable copy of `obj` (non-finite floats and unknown types dropped)."""
    if obj is None or isinstance(obj, (str, bool)):
        return obj
    if isinstance(obj, (int, float)):
        return _finite(obj)
    if depth < 4 and isinstance(obj, Mapping):
        out = {}
        for k, v in obj.items():
            sv = _json_safe(v, depth + 1)
            if sv is not None:
                out[str(k)] = sv
        return out
    if depth < 4 and isinstance(obj, (list, tuple)):
        return [x for x in (_json_safe(v, depth + 1) for v in obj) if x is not None]
    return None


def method_of(args: Any) -> str:
    """"sft", "grpo", ... from the trainer's config class name; "train" if unknown."""
    name = type(args).__name__
    return name[: -len("Config")].lower() if name.endswith("Config") else "train"


class StreamWriter:
    """Append whole JSON lines to a file; safe to share between threads."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()

    def write(self, obj: Mapping[str, Any]) -> None:
        data = (json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n").encode()
        with self._lock:
            if self._fd is None:
                return
            view = memoryview(data)
            while view:
                n = os.write(self._fd, view)
                view = view[n:]

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


class CarlCallback(TrainerCallback):
    """Write every trainer log to the JSONL stream at `path`, with phi, gate and phase events.

    - `vocab_size`: V in phi = 1 - entropy / ln V.
    - `gate`: a `PhaseTransitionGate` (a default one is made; pass `False` for none).
    - `stop_on_gate`: stop training when the gate fires (SFT warm-up ends).
    - `phases`: label steps with the online phase classifier (from `phase_metric`
      and `entropy`); a `phase` marker is written whenever the label changes.
    - `meta`: extra fields for the meta line (e.g. `{"model": ..., "config": {...}}`).
    """

    def __init__(
        self,
        path: str | Path,
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
    ):
        if vocab_size < 2:
            raise ValueError("vocab_size must be at least 2")
        from carl_tui.coherence.gates import PhaseTransitionGate

        self.writer = StreamWriter(path)
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
        self._meta_written = False
        self._stop_requested = False
        self._log_v = math.log(self.vocab_size)
        self.phase_metric = phase_metric
        self.phase: str | None = None
        self._phases = self._new_classifier() if phases else None

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
        self.writer.write(_json_safe(obj))
        self._meta_written = True

    def _ensure_meta(self) -> None:
        if not self._meta_written:
            self.write_meta()

    def marker(self, kind: str, step: int | None = None, **detail: Any) -> None:
        """Write a marker line at `step` (stream steps; default: the latest step)."""
        self._ensure_meta()
        obj = {"event": "marker", "kind": kind, "step": int(self.last_step if step is None else step)}
        obj.update(_json_safe(detail))
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
            v = _finite(value)
            if v is not None:
                line[key] = v
        entropy = line.get("entropy")
        if entropy is not None and "phi" not in line:
            line["phi"] = min(1.0, max(0.0, 1.0 - float(entropy) / self._log_v))
        self.writer.write(line)
        self.last_step = max(self.last_step, int(step))
        return line

    # -- stages and stopping ---------------------------------------------------

    @staticmethod
    def _new_classifier():
        from carl_tui.coherence.phases import PhaseClassifier

        return PhaseClassifier()

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

    def request_stop(self) -> None:
        """Ask the trainer to stop at the end of the current step (e.g. on SIGTERM)."""
        self._stop_requested = True

    def close(self) -> None:
        self.writer.close()

    # -- TrainerCallback -------------------------------------------------------

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if state.is_world_process_zero and not self._meta_written:
            name = getattr(getattr(model, "config", None), "name_or_path", "") or ""
            cfg = {k: v for k, v in args.to_dict().items() if isinstance(v, (int, float, str, bool))}
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
        entropy = _finite(logs.get("entropy"))
        if self.gate is not None and not self.gate.fired:
            value = _finite(logs.get(self.gate.metric))
            if value is not None and self.gate.update(step, float(value), entropy=entropy):
                self.gate_step = step
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
        acc = _finite(logs.get(self.phase_metric))
        if acc is None or entropy is None:
            return
        phase = self._phases.update(step, float(acc), float(entropy))
        label = getattr(phase, "value", phase)
        label = str(label) if label is not None else None
        if label and label != self.phase:
            self.phase = label
            self.marker("phase", step, phase=label)

    def on_train_end(self, args, state, control, **kwargs):
        return control
