"""The phase checks of the real-run corpus, run by run and half by half.

Each run of the corpus (tests/real_runs.py) is read through the store as the dashboard
reads it (its rows in batches of 50), and each stage's phases, as the store said them
(`from_step`: where a phase began; `seen_at`: the step at which the dashboard first said
so; phases said and later corrected count too), are judged against what hindsight says
of the stage's progress curve (`Hindsight`, computed from the curve alone):

- dated: a run that learned has its transition dated within the first 35% of its climb
  (the transition's `from_step` at or before the step whose level reached 35% of the
  rise);
- early: nothing said crystallised before the level did half of its rise, nor converged
  before nine tenths of it (unless the phase-transition gate fired first);
- ended: a finished climb (hindsight's `settled`) ends crystallised, converged or plateau;
- quiet: a stage that never moved beyond its noise says nothing but baseline;
- floor: nothing crystallised or converged while token accuracy is under 0.5 (the mean
  of its last values at the step it was said).

`python -m tests.phase_checks` prints the table of both halves (the corpus's split, by
repository: `RealRun.half`); the suite asserts the check half's figures.
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from carl_tui.events import RunRef, ScalarBatch
from carl_tui.store import RunStore
from tests.real_runs import Hindsight, RealRun, load_runs

ORDER = ("baseline", "melting", "transition", "plateau", "crystallisation", "converged")
CHECKS = ("dated", "early", "ended", "quiet", "floor")
REF = RunRef("corpus", "p", "r", "real")
#: The Done-when figures of the phases work, on the check half: the share of the runs a
#: check applies to that pass it.
TARGETS = {"dated": 0.85, "early": 0.90, "ended": 0.90, "quiet": 1.0, "floor": 1.0}


def read(rows, batch: int = 50):
    store = RunStore()
    for i in range(0, len(rows), batch):
        store.apply([ScalarBatch.from_rows(REF, rows[i:i + batch])])
    return store.snapshot(REF.key)


@dataclass
class StageVerdict:
    kind: str
    hindsight: Hindsight
    said: list[tuple[str, int, int]]  # (phase, from_step, seen_at), everything ever said
    final: str
    results: dict[str, bool] = field(default_factory=dict)  # check -> passed (if it applies)


def said_by_stage(snap) -> list[tuple[str, list[tuple[str, int, int]], str]]:
    """(stage kind, every phase said in it, its phase now), stage by stage."""
    if not hasattr(snap.phase, "stages"):  # the classifier before dating (the "before" figures)
        out: list = []
        for phase, step, kind in snap.phase.history:
            if not out or out[-1][0] != kind:
                out.append((kind, [], phase))
            out[-1][1].append((phase, step, step))
            out[-1] = (kind, out[-1][1], phase)
        return out
    return [(stage.kind, [(p, f, seen) for p, f, seen, _ in stage.said], stage.phase)
            for stage in snap.phase.stages]


def judge(run: RealRun, snap=None) -> list[StageVerdict]:
    snap = snap if snap is not None else read(run.rows)
    stages = said_by_stage(snap)
    gate = snap.gate.trigger_step if snap.gate.fired else math.inf
    out = []
    for st in (s for s in run.stages if s.values.size >= 8):
        h = Hindsight(st.steps, st.values)
        # the store's stage holding this stage's first step
        match = [(k, said, now) for k, said, now in stages if k == st.kind]
        _kind, said, now = next(
            ((k, s, n) for k, s, n in match if s and s[0][1] <= st.steps[0]),
            match[0] if match else (st.kind, [], "baseline"))
        v = StageVerdict(st.kind, h, said, now)
        if h.learned:
            trans = [f for p, f, _ in said if ORDER.index(p) >= ORDER.index("transition")]
            v.results["dated"] = bool(trans) and trans[0] <= h.step_at(0.35)
            ok = True
            for p, f, seen in said:
                if min(f, seen) >= gate:
                    continue
                if p == "converged" and f < h.step_at(0.9):
                    ok = False
                if p == "crystallisation" and f < h.step_at(0.5):
                    ok = False
            v.results["early"] = ok
        if h.settled:
            v.results["ended"] = now in ("crystallisation", "converged", "plateau")
        if h.still:
            v.results["quiet"] = all(p == "baseline" for p, _, _ in said)
        if st.kind == "accuracy" and any(p in ("crystallisation", "converged")
                                         for p, _, _ in said):
            ok = True
            for p, _f, seen in said:
                if p in ("crystallisation", "converged"):
                    upto = st.values[st.steps <= seen]
                    if upto.size and float(np.mean(upto[-max(3, h.k):])) < 0.5:
                        ok = False
            v.results["floor"] = ok
        out.append(v)
    return out


def table(runs: list[RealRun]) -> dict[str, dict[str, tuple[int, int, list[str]]]]:
    """half -> check -> (passed, applied, names of the runs that failed)."""
    out: dict[str, dict[str, tuple[int, int, list[str]]]] = {}
    for half in ("tune", "check"):
        unused_input: dict[str, list] = {c: [0, 0, []] for c in CHECKS}
        for run in (r for r in runs if r.half == half):
            for v in judge(run):
                for c, ok in v.results.items():
                    unused_input[c][1] += 1
                    unused_input[c][0] += bool(ok)
                    if not ok:
                        unused_input[c][2].append(f"{run.name}:{v.kind}")
        out[half] = {c: (p, n, fails) for c, (p, n, fails) in unused_input.items()}
    return out


def main(argv: list[str]) -> None:
    runs = [r for r in load_runs(more=True) if any(st.values.size >= 8 for st in r.stages)]
    print("runs:", Counter((r.half, r.kind) for r in runs))
    t = table(runs)
    for half, checks in t.items():
        print(f"\n{half} half")
        for c, (p, n, fails) in checks.items():
            share = f"{p / n:.0%}" if n else "-"
            print(f"  {c:6s} {p:3d}/{n:<3d} {share:>5s}  target {TARGETS[c]:.0%}"
                  + (f"   failed: {', '.join(fails)}" if fails and "-v" in argv else ""))


if __name__ == "__main__":
    main(sys.argv[1:])
