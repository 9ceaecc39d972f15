"""The phases on the corpus of real training histories, judged by hindsight
(tests/phase_checks.py: dated, early, ended, quiet, floor), on the check half of the
corpus's split by repository (`RealRun.half`): the half no rule was tuned on. The
tuning half's figures are printed by `python -m tests.phase_checks` beside them.

Runs without a progress metric (loss-only, DPO) are read whole and have no phase."""

from __future__ import annotations

import pytest

from tests.phase_checks import TARGETS, judge, read, table
from tests.real_runs import load_runs

ALL = load_runs()
RUNS = [r for r in ALL if any(st.values.size >= 8 for st in r.stages)]
TABLE = table(RUNS)


@pytest.mark.parametrize("check", list(TARGETS))
def test_the_check_half_meets_its_target(check):
    passed, applied, failed = TABLE["check"][check]
    assert applied, check
    assert passed / applied >= TARGETS[check], (check, passed, applied, failed)


def test_the_recorded_split_is_the_rules():
    """tests/data/real_runs/SPLIT records each run's half; a run added later falls where
    the rule puts it, and no run moves."""
    from tests.real_runs import CORPUS

    recorded = {}
    for line in (CORPUS / "SPLIT").read_text().splitlines():
        if line and not line.startswith("#"):
            name, repository, half = line.split("\t")
            recorded[name] = (repository, half)
    assert recorded == {r.name: (r.repository, r.half) for r in ALL}


def test_the_split_is_by_repository_and_both_halves_hold_every_kind():
    by_repo: dict[str, set[str]] = {}
    for r in ALL:
        by_repo.setdefault(r.repository.lower(), set()).add(r.half)
    assert all(len(h) == 1 for h in by_repo.values())
    public = [r for r in RUNS if "/" in r.repository]
    for half in ("tune", "check"):
        kinds = {r.kind for r in RUNS if r.half == half}
        assert {"sft", "grpo"} <= kinds | {"sft+grpo"}, (half, kinds)
        assert sum(r.half == half for r in public) >= 10


@pytest.mark.parametrize("run", [r for r in ALL if r not in RUNS],
                         ids=[r.name for r in ALL if r not in RUNS])
def test_a_run_without_a_progress_metric_has_no_phases_to_tell(run):
    snap = read(run.rows)
    assert snap.phase.phase == "" and snap.phase.history == () and not snap.gate.fired
    assert snap.last_step == max(s for s, _ in run.rows)


@pytest.mark.parametrize("run", RUNS, ids=[r.name for r in RUNS])
def test_every_phase_is_said_after_it_began_and_the_story_runs_forward(run):
    snap = read(run.rows)
    for stage in snap.phase.stages:
        for _phase, from_step, seen_at, corrected in stage.said:
            assert seen_at >= from_step
            assert corrected is None or corrected >= seen_at
        standing = [s for s in stage.said if s[3] is None]
        assert [s[1] for s in standing] == sorted(s[1] for s in standing)
    assert snap.phase.dated == tuple(
        (p, f, seen, st.kind) for st in snap.phase.stages for p, f, seen, c in st.said
        if c is None)


def test_judge_reads_what_the_store_said():
    """The checks read the store's phases: a run whose climb is removed (its progress
    replaced by its first value) is quiet and said nothing but baseline."""
    run = next(r for r in RUNS if r.name == "tiny-sft-h32-lr3e-3")
    first = run.rows[0][1]["mean_token_accuracy"]
    flat = [(s, {**v, "mean_token_accuracy": first}) if "mean_token_accuracy" in v else (s, v)
            for s, v in run.rows]
    verdict = judge(run, read(flat))[0]
    assert {p for p, _, _ in verdict.said} == {"baseline"}
    assert verdict.results.get("dated") is False
