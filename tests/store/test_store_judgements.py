"""The run's judgements in the store: phases per stage (SFT, then GRPO on the task reward), and
when the CARL reward switched on: the run's own word first, a derived estimate only from the
task rewards, and never a switch for a run without CARL."""

from __future__ import annotations

import numpy as np
import pytest

from carl_tui.coherence.gates import CascadeGate
from carl_tui.events import Marker, RunMeta, RunRef, ScalarBatch
from carl_tui.store import RunStore
from tests.trajectories import cascade_case, grpo_story, sft_story

RUN = RunRef("test", "p", "r1", "story")


def feed(store, rows, batch=25):
    for i in range(0, len(rows), batch):
        store.apply([ScalarBatch.from_rows(RUN, rows[i : i + batch])])


def grpo_rows(case, carl_from=None, carl_key="rewards/carl/mean", stage_metric=False, seed=1):
    """A GRPO run's rows: the task reward, `reward` = the sum including CARL once it is on."""
    rng = np.random.default_rng(seed)
    rows = []
    for step, vals in case.rows():
        task = vals[case.key]
        row = {case.key: task, "loss": float(rng.normal(0, 0.01))}
        on = carl_from is not None and step >= carl_from
        carl = 0.8 + float(rng.normal(0, 0.02)) if on else None
        if carl is not None:
            row[carl_key] = carl
        row["reward"] = task + (carl or 0.0)
        if stage_metric:
            row["cascade/stage"] = 1.0 if on else 0.0
        rows.append((step, row))
    return rows


def notices(store, kind):
    return [n for n in store.take_notices() if n.kind == kind]


def test_the_runs_own_cascade_event_wins():
    store = RunStore()
    case = cascade_case("noisy_plateau", seed=3)
    feed(store, grpo_rows(case, carl_from=205))
    store.apply([Marker(RUN, "cascade", 203)])  # arrives after the rows, as in a stream chunk
    snap = store.snapshot(RUN.key)
    assert (snap.cascade.trigger_step, snap.cascade.source) == (203, "run")


def test_the_stage_metric_and_the_first_carl_reward_are_the_runs_own_word():
    case = cascade_case("early_rise", seed=2)
    store = RunStore()
    feed(store, grpo_rows(case, carl_from=77, stage_metric=True))
    c = store.snapshot(RUN.key).cascade
    assert (c.trigger_step, c.source, c.basis) == (77, "run", "cascade/stage turned 1")
    store = RunStore()
    feed(store, grpo_rows(case, carl_from=77))
    c = store.snapshot(RUN.key).cascade
    assert (c.trigger_step, c.source, c.basis) == (77, "run", "CARL reward first logged")
    texts = [n.text for n in notices(store, "cascade")]
    assert texts == ["Cascade: CARL reward on from step 77"]


@pytest.mark.parametrize("kind", ["already_high", "early_rise", "noisy_plateau"])
def test_a_derived_switch_reads_the_task_reward_alone(kind):
    """CARL configured but not on yet: the cascade gate on the task reward says when it
    would switch, labelled derived; `reward` (which would include CARL) is never read."""
    case = cascade_case(kind, seed=5, scale=(-1.0, 3.0))
    rows = grpo_rows(case)
    for _, r in rows:  # a composite that misleads anything reading `reward`
        r["reward"] = r[case.key] + 5.0 * np.sin(_ / 9.0)
    store = RunStore()
    store.apply([RunMeta(RUN, {"config": {"carl": True}})])
    feed(store, rows)
    reference = CascadeGate()
    reference.update_many(case.steps, case.values)
    c = store.snapshot(RUN.key).cascade
    assert c.has_carl and c.source == "derived"
    assert c.trigger_step == reference.trigger_step is not None
    said = notices(store, "cascade")
    assert [n.step for n in said] == [reference.trigger_step]
    assert said[0].text.endswith("(derived from the task reward)")


def test_a_grpo_run_without_carl_is_never_told_carl_switched_on():
    store = RunStore()
    feed(store, grpo_rows(cascade_case("noisy_plateau", seed=1)))
    c = store.snapshot(RUN.key).cascade
    assert (c.trigger_step, c.source, c.has_carl, c.stage) == (None, None, False, "")
    assert c.basis == "no CARL reward in this run"
    assert notices(store, "cascade") == []


def test_carl_from_the_first_reward_has_no_cascade():
    store = RunStore()
    feed(store, grpo_rows(cascade_case("slow_rise", seed=4), carl_from=1))
    c = store.snapshot(RUN.key).cascade
    assert c.trigger_step is None and c.basis == "CARL reward on from the start (no cascade)"
    assert notices(store, "cascade") == []


def test_sft_then_grpo_gets_a_reward_stage_with_its_own_baseline():
    sft = sft_story(length=200, ramp=3, seed=6)
    grpo = grpo_story(length=200, scale=(-1.0, 3.0), seed=6)
    rows = sft.rows()
    offset = int(sft.steps[-1])
    rows += [(offset + s, {k: v for k, v in vals.items() if k != "mean_token_accuracy"})
             for s, vals in grpo.rows()]
    store = RunStore()
    feed(store, rows, batch=37)
    phase = store.snapshot(RUN.key).phase
    stages = [(p, s, k) for p, s, k in phase.history]
    assert {k for _, _, k in stages} == {"accuracy", "reward"}
    first_reward = next(s for _, s, k in stages if k == "reward")
    assert first_reward == offset + int(grpo.steps[0])
    assert phase.stage == "reward" and phase.inputs == f"{grpo.progress_key} + entropy"
    reward_phases = [p for p, _, k in stages if k == "reward"]
    assert reward_phases[0] == "baseline" and "transition" in reward_phases
    # The SFT stage's story is the SFT run's own: what the store tells of its rows alone
    # (its end comes with the GRPO stage's start: the last phase may move on then).
    alone = RunStore()
    feed(alone, sft.rows(), batch=37)
    own = [(p, s) for p, s, k in alone.snapshot(RUN.key).phase.history]
    sft_stage = [(p, s) for p, s, k in stages if k == "accuracy"]
    assert sft_stage[:len(own) - 1] == own[:-1], (sft_stage, own)
    assert sft_stage[-1][0] in ("crystallisation", "converged", "plateau", own[-1][0])
