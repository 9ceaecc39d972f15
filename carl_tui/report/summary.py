"""`carl-tui summary`: the run's story as the dashboard tells it, as text or JSON.

The JSON object (one per call, keys always present):

    {"run": str, "source": str, "steps_logged": int, "first_step": int, "last_step": int,
     "metrics": {name: {"last": float, "min": float, "max": float, "last_step": int,
                        "count": int}},
     "phases": [{"phase": str, "from_step": int, "seen_at": int,
                 "stage": "accuracy" | "reward"}, ...],
     "phase_evidence": str,
     "gate": {"metric": str, "fired_at": int | null},
     "cascade": {"switched_at": int | null, "source": "run" | "derived" | null},
     "events": [{"kind": str, "step": int | null, "text": str}, ...],
     "steps_estimated": bool, "skipped": int,
     "skipped_input": [{"count": int, "what": str}, ...],
     "train_summary": {"step": int | null, "values": {name: float}} | null,
     "health": [{"flag": str, "from_step": int, "seen_at": int, "severity": str,
                 "evidence": {"metric": str, "level": float | null, "trend": float | null,
                              "threshold": float | null, "window": int, "text": str,
                              "fit": {...} (entropy_collapse, when stated)}}, ...],
     "reward_ceiling": {"a": float, "b": float, "ceiling": float, "ceiling_se": float,
                        "r2": float, "n": int} | null}

`health` lists the run's health flags (store/health.py) in the order said: where each
problem began (`from_step`), the step at which it was said (`seen_at`), and its evidence
in numbers; a NaN or diverging loss is one too (`nan_loss`, `diverging`).
`reward_ceiling` is the reward's forecast at zero entropy (R = -a exp(H) + b fitted over
`n` steps), once the fit is good enough to state (else null). The text says the flags
standing, worst first (`health`), or "healthy".

`steps_logged` counts the steps that logged something (a step with a training and an
evaluation row is one step). `skipped` counts what the sources could not use, in
mixed units; `skipped_input` says what it was ("NaN or infinite values": one value
each, the rest of their line kept; "malformed lines": a whole line each).

`train_summary` is what the Trainer logs once when training ends (`train_loss`, the
average loss over the run, `train_runtime`, `train_samples_per_second`, ...), kept
apart from the curves: `metrics["loss"]` is the loss logged at each step.

A phase's `from_step` is where it began on the curve (the first step of the segment
where the change is); `seen_at` is the step at which the dashboard first said it (online, a
change is seen after it happens). `phase_evidence` says why the current phase holds, in
numbers. Phases said and corrected later are in `events`.

`run` is the run's name as its tracker shows it. Values are the store's: the
same numbers the metrics table shows (phi derived from entropy when the run
logs no phi and the vocabulary size is known).
"""

from __future__ import annotations

import math
from typing import Any

from carl_tui.metric_names import display_order
from carl_tui.store import RunSnapshot, StoreSummary
from carl_tui.store.health import Evidence, HealthFlag, flag_line, standing


def summary_dict(snap: RunSnapshot, source: str, status: StoreSummary) -> dict[str, Any]:
    metrics = {}
    for name in sorted(snap.series, key=display_order):
        s = snap.series[name]
        metrics[name] = {
            "last": s.last,
            "min": s.min,
            "max": s.max,
            "last_step": None if s.last_step is None else int(s.last_step),
            "count": s.count,
        }
        if s.derived:
            metrics[name]["derived"] = True
    return {
        "run": snap.run.label,
        "source": source,
        "steps_logged": snap.steps_logged,
        "first_step": snap.first_step,
        "last_step": snap.last_step,
        "metrics": metrics,
        "phases": [{"phase": p, "from_step": s, "seen_at": seen, "stage": k}
                   for p, s, seen, k in snap.phase.dated],
        "phase_evidence": snap.phase.evidence,
        "gate": {"metric": snap.gate.metric,
                 "fired_at": snap.gate.trigger_step if snap.gate.fired else None},
        "cascade": {"switched_at": snap.cascade.trigger_step, "source": snap.cascade.source},
        "events": [{"kind": e.kind, "step": e.step, "text": e.text}
                   for e in sorted(snap.events, key=lambda e: -1 if e.step is None else e.step)],
        "steps_estimated": bool(snap.meta.get("steps_estimated", False)),
        "skipped": status.skipped,
        "skipped_input": [{"count": n, "what": what} for n, what in status.skipped_counts()],
        "train_summary": _train_summary(snap),
        "health": [f.as_dict() for f in snap.health],
        "reward_ceiling": (snap.reward_ceiling.as_dict() if snap.reward_ceiling is not None
                           and snap.reward_ceiling.stated else None),
    }


def _health_lines(d: dict[str, Any]) -> list[str]:
    """"health  truncation since step 128 (seen at 131): ...", one line a flag standing,
    worst first, then the reward ceiling's forecast; "health  healthy" when none stands."""
    flags = standing([_flag(f) for f in d.get("health", ())])
    out = [flag_line(f) for f in flags] or ["healthy"]
    fit = d.get("reward_ceiling")
    if fit:
        out.append(f"task reward ceiling {fit['ceiling']:.3g} +/- {fit['ceiling_se']:.2g} at zero "
                   f"entropy (R^2 {fit['r2']:.2f} over {fit['n']} steps)")
    return [f"{'health' if i == 0 else '':<8}{line}" for i, line in enumerate(out)]


def _flag(f: dict[str, Any]) -> HealthFlag:
    """A flag of `summary --json` read back (for its line)."""
    ev = f["evidence"]
    nan = math.nan
    return HealthFlag(f["flag"], f["from_step"], f["seen_at"], f["severity"],
                      Evidence(ev["metric"], nan if ev["level"] is None else ev["level"],
                               nan if ev["trend"] is None else ev["trend"],
                               nan if ev["threshold"] is None else ev["threshold"],
                               ev["window"], ev["text"]))


def _train_summary(snap: RunSnapshot) -> dict[str, Any] | None:
    values = snap.meta.get("train_summary")
    if not values:
        return None
    step = snap.meta.get("train_summary_step")
    return {"step": None if step is None else int(step), "values": dict(values)}


def _num(v: float | None) -> str:
    if v is None:
        return "-"
    a = abs(v)
    if a != 0 and (a < 1e-3 or a >= 1e5):
        return f"{v:.4e}"
    return f"{v:.6g}"


def summary_text(d: dict[str, Any]) -> str:
    """The same story for a person: a few lines and a table."""
    lines = [f"run {d['run']}  ({d['source']})"]
    steps = f"steps {d['first_step']}..{d['last_step']}, {d['steps_logged']} logged"
    if d["steps_estimated"]:
        steps += " (some steps estimated: the log did not say)"
    skipped = ", ".join(f"{s['count']} {s['what']}" for s in d["skipped_input"]) or "nothing"
    lines.append(f"{steps}; skipped {skipped}")
    stages: list[str] = []
    for p in d["phases"]:
        if not stages or not stages[-1].startswith(p["stage"]):
            stages.append(f"{p['stage']}: ")
        else:
            stages[-1] += " -> "
        seen = "" if p["seen_at"] == p["from_step"] else f" (seen {p['seen_at']})"
        stages[-1] += f"{p['phase']}@{p['from_step']}{seen}"
    lines.append("phases  " + ("; ".join(stages) if stages else "-"))
    if d.get("phase_evidence"):
        lines.append(f"why     {d['phase_evidence']}")
    g = d["gate"]
    if g["fired_at"] is not None:
        fired = f"fired at step {g['fired_at']}"
    elif g["metric"] not in d["metrics"]:
        fired = "not fired: the run does not log it (--gate-metric picks another)"
    else:
        fired = "not fired"
    lines.append(f"gate    {g['metric']}: {fired}")
    c = d["cascade"]
    if c["switched_at"] is not None:
        lines.append(f"cascade CARL on from step {c['switched_at']} ({c['source']})")
    lines.extend(_health_lines(d))
    labels = {n: n + (" (derived)" if m.get("derived") else "") for n, m in d["metrics"].items()}
    width = max([len(x) for x in labels.values()] + [6])
    lines.append("")
    lines.append(f"{'metric':<{width}}  {'last':>12} {'min':>12} {'max':>12} {'step':>8}")
    for name, m in d["metrics"].items():
        label = labels[name]
        step = m["last_step"] if m["last_step"] is not None else "-"
        lines.append(f"{label:<{width}}  {_num(m['last']):>12} {_num(m['min']):>12} "
                     f"{_num(m['max']):>12} {step:>8}")
    end = d.get("train_summary")
    if end:
        at = f" (step {end['step']})" if end["step"] is not None else ""
        values = ", ".join(f"{k} {_num(v)}" for k, v in end["values"].items())
        lines.append("")
        lines.append(f"end of training{at}: {values}")
    if d["events"]:
        lines.append("")
        lines.extend(f"step {e['step'] if e['step'] is not None else '-':>7}  {e['text']}"
                     for e in d["events"])
    return "\n".join(lines)
