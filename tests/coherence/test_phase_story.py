"""The phases' story everywhere it is told: each phase dated where the curve changed and
said when seen, on the panel ("TRANSITION since step 5 · seen at step 12"), with its
evidence on `h`; "too few to tell" while the history is short; `summary` (text and
JSON), `export` (each step's phase) and `fleet --json` give the same steps; the events
say each phase at the step it was seen and each correction."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
from rich.console import Console

from carl_tui.cli import main
from carl_tui.events import RunRef, ScalarBatch
from carl_tui.store import RunStore
from carl_tui.ui.widgets.phase_panel import PhasePanel

REF = RunRef("test", "p", "climb", "real")


class Panel(PhasePanel):
    def _color(self, phase: str) -> str:  # no app (theme) here
        return "bold"


def panel_text(snap, width: int = 100, evidence: bool = False) -> str:
    panel = Panel()
    panel.evidence = evidence
    console = Console(width=width, file=io.StringIO(), color_system=None)
    console.print(panel._render_snapshot(snap))
    return " ".join(console.file.getvalue().split())


def climb_rows(n_flat=10, n_up=30, n_top=40, lo=0.1, hi=0.45, seed=0):
    rng = np.random.default_rng(seed)
    x = np.concatenate([np.full(n_flat, lo), np.linspace(lo, hi, n_up), np.full(n_top, hi)])
    x = x + rng.normal(0, 0.01, x.size)
    return [(i + 1, {"mean_token_accuracy": float(v), "loss": 2.0 - float(v)})
            for i, v in enumerate(x)]


def snapshot(rows):
    store = RunStore()
    for i in range(0, len(rows), 7):
        store.apply([ScalarBatch.from_rows(REF, rows[i:i + 7])])
    return store.snapshot(REF.key)


def test_the_panel_says_where_the_phase_began_and_when_it_was_seen():
    snap = snapshot(climb_rows())
    ph = snap.phase
    assert ph.phase == "plateau"  # 0.1 -> 0.45 token accuracy: far below the ceiling
    assert ph.seen_at > ph.since_step
    text = panel_text(snap)
    assert f"PLATEAU since step {ph.since_step} · seen at step {ph.seen_at}" in text, text
    assert "why" not in text.split("driven by")[-1]
    why = panel_text(snap, evidence=True)
    assert "why level 0.4" in why and "to the ceiling 1" in why, why


def test_too_few_values_are_said_so_not_baseline():
    snap = snapshot(climb_rows()[:3])
    assert snap.phase.too_few and snap.phase.values == 3
    assert "phase: 3 values, too few to tell" in panel_text(snap)


def test_summary_export_and_fleet_give_the_same_steps(tmp_path, capsys):
    path = tmp_path / "climb.jsonl"
    with open(path, "w") as f:
        f.writelines(json.dumps({"step": s, **v}) + "\n" for s, v in climb_rows())
    assert main(["summary", str(path), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    phases = [(p["phase"], p["from_step"], p["seen_at"]) for p in d["phases"]]
    assert [p for p, _, _ in phases][-1] == "plateau"
    assert all(seen >= start for _, start, seen in phases)
    assert d["phase_evidence"].startswith("level ")
    said = [e for e in d["events"] if e["kind"] == "phase"]
    last = phases[-1]
    assert any(e["step"] == last[2] and f"{last[0]} since step {last[1]}" in e["text"]
               for e in said), said

    assert main(["summary", str(path)]) == 0
    text = capsys.readouterr().out
    assert f"plateau@{last[1]} (seen {last[2]})" in text and "why     level" in text

    assert main(["export", str(path), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    by_step = {int(r["step"]): r for r in rows}
    assert by_step[last[1]]["phase"] == "plateau"
    assert by_step[last[1]]["phase_from"] == str(last[1])
    assert by_step[last[1]]["phase_seen_at"] == str(last[2])
    assert by_step[last[1] - 1]["phase"] != "plateau"
    assert by_step[1]["phase"] == phases[0][0]

    assert main(["fleet", str(path), "--json"]) == 0
    fleet = json.loads(capsys.readouterr().out)
    row = fleet["runs"][0] if isinstance(fleet, dict) else fleet[0]
    assert row["phase"]["phase"] == "plateau"
    assert (row["phase"]["from_step"], row["phase"]["seen_at"]) == (last[1], last[2])


def test_a_correction_is_an_event_of_its_own():
    """A climb paused live (a plateau said), then resumed: the plateau said is corrected
    or left behind, and the events say so at the step it was seen."""
    rng = np.random.default_rng(2)
    level = np.concatenate([np.full(5, 0.1), np.linspace(0.1, 0.4, 20), np.full(40, 0.4),
                            np.linspace(0.4, 0.8, 40)])
    rows = [(i + 1, {"mean_token_accuracy": float(v)})
            for i, v in enumerate(level + rng.normal(0, 0.01, level.size))]
    snap = snapshot(rows)
    texts = [e.text for e in snap.events if e.kind == "phase"]
    assert any(t.startswith("Phase: plateau since step") for t in texts), texts
    assert texts[-1].startswith("Phase: plateau from step") and "corrected at step" in \
        texts[-1], texts  # the last plateau said is corrected: the climb went on
    assert snap.phase.phase == "transition"


def test_the_phase_events_are_the_same_however_the_rows_are_batched():
    """The events derive from what the classifier said (batch-invariant) by rules of the
    said entries alone: a run read 7 rows at a time tells the same story as read whole."""
    from tests.real_runs import MORE, load_run

    run = load_run(MORE / "tiny-sft-collapse.json")

    def events(batch: int):
        store = RunStore()
        for i in range(0, len(run.rows), batch):
            store.apply([ScalarBatch.from_rows(REF, run.rows[i:i + batch])])
        return [(e.step, e.text) for e in store.snapshot(REF.key).events if e.kind == "phase"]

    whole = events(len(run.rows))
    assert events(7) == whole == events(50)
    assert len(whole) <= 12  # a collapse after a slow climb: not a flood of corrections
