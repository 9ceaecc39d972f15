"""Generate `demo_recording.jsonl`: a synthetic SFT run shaped like the phase
table of the CARL measurements (baseline, melting, transition,
crystallisation, converged over 46 steps).

Deterministic (seeded). Regenerate with:

    python -m carl_tui.data.make_recording [OUTPUT]
"""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

VOCAB_SIZE = 151936
STEPS = 46
START_TIME = 1732350000.0
STEP_SECONDS = 0.5
# (first step, phase, token accuracy, entropy, loss) per the phase table.
PHASES = (
    (0, "baseline", 0.03, 1.0, 3.2),
    (10, "melting", 0.08, 9.3, 2.9),
    (20, "transition", 0.65, 4.1, 1.1),
    (25, "crystallisation", 0.99, 0.4, 0.06),
    (35, "converged", 0.993, 0.12, 0.02),
)
GATE_WINDOW, GATE_MIN_ABOVE, GATE_THRESHOLD = 5, 3, 0.99

OUTPUT = Path(__file__).with_name("demo_recording.jsonl")


def phase_at(step: int) -> tuple[str, float, float, float]:
    current = PHASES[0]
    for row in PHASES:
        if step >= row[0]:
            current = row
    return current[1:]  # type: ignore[return-value]


def gate_step(accuracies: list[tuple[int, float]]) -> int | None:
    """Step at which a phase-transition gate (window 5, 3 of them >= 0.99) fires."""
    window: list[float] = []
    for step, value in accuracies:
        window = (window + [value])[-GATE_WINDOW:]
        if sum(v >= GATE_THRESHOLD for v in window) >= GATE_MIN_ABOVE:
            return step
    return None


def _learning_rate(step: int) -> float:
    peak, warmup = 2e-5, 4
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * (1 - (step - warmup) / (STEPS - warmup))


def build(seed: int = 0) -> list[dict]:
    """The recording's records, in order."""
    rnd = random.Random(seed)
    ln_v = math.log(VOCAB_SIZE)
    records: list[dict] = [
        {
            "event": "meta",
            "run_id": "demo-sft-0001",
            "name": "demo-sft",
            "project": "carl-demo",
            "model": "Qwen/Qwen2.5-VL-3B-Instruct",
            "method": "sft",
            "vocab_size": VOCAB_SIZE,
            "synthetic": True,
            "config": {"learning_rate": 2e-5, "max_steps": STEPS, "per_device_train_batch_size": 4},
        },
        {"event": "log", "text": f"starting SFT: {STEPS} steps, vocab {VOCAB_SIZE}"},
    ]
    accuracies: list[tuple[int, float]] = []
    fired: int | None = None
    peak = (0.0, 0)
    for step in range(STEPS):
        phase, acc, ent, loss = phase_at(step)
        if phase == "crystallisation":
            acc = 0.986 + 0.009 * rnd.random()
        elif phase == "converged":
            acc = 0.993 + 0.001 * (rnd.random() - 0.5)
        else:
            acc *= 1 + 0.1 * (rnd.random() - 0.5)
        ent *= 1 + 0.06 * (rnd.random() - 0.5)
        loss *= 1 + 0.08 * (rnd.random() - 0.5)
        grad = (8.0 if phase == "melting" else 1.5 if phase == "transition" else 0.6) * (
            1 + 0.3 * rnd.random()
        )
        if ent > peak[0]:
            peak = (ent, step)
        records.append(
            {
                "step": step,
                "time": round(START_TIME + STEP_SECONDS * step + 0.05 * rnd.random(), 3),
                "loss": round(loss, 4),
                "learning_rate": _learning_rate(step),
                "grad_norm": round(grad, 5),
                "mean_token_accuracy": round(acc, 5),
                "entropy": round(ent, 5),
                "phi": round(1 - ent / ln_v, 6),
                "num_tokens": float(2048 * (step + 1)),
                "epoch": round((step + 1) / STEPS, 4),
            }
        )
        if step == 10:
            records.append({"event": "log", "text": "entropy rising: the model is melting"})
        accuracies.append((step, round(acc, 5)))
        if fired is None and (fired := gate_step(accuracies)) is not None:
            records.append(
                {
                    "event": "marker",
                    "kind": "phase_transition",
                    "step": fired,
                    "metric": "mean_token_accuracy",
                    "window": GATE_WINDOW,
                    "min_above": GATE_MIN_ABOVE,
                    "threshold": GATE_THRESHOLD,
                    "peak_entropy": round(peak[0], 5),
                    "peak_entropy_step": peak[1],
                }
            )
            records.append({"event": "log", "text": f"phase transition gate fired at step {fired}"})
    records.append({"event": "log", "text": "training complete"})
    return records


def write(path: Path = OUTPUT, seed: int = 0) -> Path:
    text = "".join(json.dumps(r, separators=(", ", ": ")) + "\n" for r in build(seed))
    Path(path).write_text(text, encoding="utf-8")
    return Path(path)


if __name__ == "__main__":
    print(write(Path(sys.argv[1]) if len(sys.argv) > 1 else OUTPUT))
