"""Health flags (store/health.py), rule by rule on made-up series with known answers:
what is said, from which step, seen at which step, with which numbers; the reward
ceiling's fit; `stalled`; the flags on the snapshot and as events."""

from __future__ import annotations

import json

import numpy as np
import pytest

from carl_tui.events import Job, RunRef, ScalarBatch
from carl_tui.store import RunStore
from carl_tui.store.health import (
    CeilingFit,
    HealthWatch,
    flags_of,
    stalled_flag,
)

RUN = RunRef("jsonl", "p", "r", "r")


def noise(n, sd, seed=0):
    return np.random.default_rng(seed).normal(0, sd, n)


def only(flags, name):
    [flag] = [f for f in flags if f.flag == name]
    return flag


def test_most_groups_without_reward_variance_is_no_learning_signal():
    n = 60
    steps = np.arange(1, n + 1)
    zero = np.where(steps < 30, 0.2, 1.0)  # from step 30 every group scores the same
    reward = np.where(steps < 30, 0.3, 0.0) + noise(n, 0.01)
    flags = flags_of(steps, {"frac_reward_zero_std": zero, "reward": reward})
    f = only(flags, "no_learning_signal")
    # the level of 10 rows reaches 0.8 at the 8th row of ones (0.2*2 + 8)/10 = 0.84
    assert (f.from_step, f.seen_at, f.severity) == (30, 37, "warning")
    assert f.evidence.metric == "frac_reward_zero_std"
    assert f.evidence.level == pytest.approx(0.84) and f.evidence.threshold == 0.8
    assert f.evidence.window == 10 and f.evidence.text.startswith("no learning signal: 84%")


def test_a_reward_saturated_at_its_top_is_said_solved_not_failing():
    n = 80
    steps = np.arange(1, n + 1)
    reward = np.clip(np.linspace(0.1, 1.2, n), 0, 1.0)  # climbs to 1.0 and stays
    # the spread within groups shrinks as they come to agree (0 or 1 per completion)
    std = 0.5 * np.sqrt(reward * (1 - reward))
    zero = np.where(reward < 1.0, 0.1, 1.0)
    f = only(flags_of(steps, {"frac_reward_zero_std": zero, "reward": reward,
                              "reward_std": std}), "no_learning_signal")
    assert f.severity == "information" and f.evidence.text.startswith("solved: ")
    # a constant reward below what the completions scored before: a failure
    reward2 = np.where(steps < 40, 0.35, 0.5)
    std2 = np.where(steps < 40, 0.4, 0.0)  # some completions scored well above 0.5
    zero2 = np.where(steps < 40, 0.1, 1.0)
    f2 = only(flags_of(steps, {"frac_reward_zero_std": zero2, "reward": reward2,
                               "reward_std": std2}), "no_learning_signal")
    assert f2.severity == "warning" and f2.from_step == 40


def test_clipped_completions_are_truncation():
    n = 40
    steps = np.arange(1, n + 1)
    clipped = np.where(steps < 20, 0.0, 0.9)
    f = only(flags_of(steps, {"completions/clipped_ratio": clipped}), "truncation")
    # the mean of 5 reaches 0.5 at the third row of 0.9 (2.7/5 = 0.54)
    assert (f.from_step, f.seen_at) == (20, 22)
    assert f.evidence.level == pytest.approx(0.54) and f.evidence.threshold == 0.5


def test_entropy_far_below_its_start_is_entropy_collapse_with_the_ceiling_fit():
    n = 100
    steps = np.arange(1, n + 1)
    h = np.concatenate([np.full(40, 1.5), np.linspace(1.5, 0.1, 60)]) + noise(n, 0.01)
    a, b = 0.2, 0.9
    reward = -a * np.exp(h) + b + noise(n, 0.005, seed=1)
    flags = flags_of(steps, {"entropy": h, "reward": reward})
    f = only(flags, "entropy_collapse")
    assert 40 <= f.from_step < f.seen_at
    assert f.evidence.level < f.evidence.threshold < 0.5 * 1.5  # a fast fall, under half
    fit = f.evidence.fit
    assert fit is not None and fit.stated
    assert fit.a == pytest.approx(a, rel=0.05) and fit.b == pytest.approx(b, abs=0.01)
    assert fit.ceiling == pytest.approx(b - a, abs=0.01) and 0 < fit.ceiling_se < 0.01
    assert "reward ceiling 0.7" in f.evidence.text


def test_the_ceiling_is_not_stated_when_the_reward_does_not_follow_the_entropy():
    watch = HealthWatch()
    n = 60
    h = np.linspace(1.5, 1.0, n)
    watch.feed(np.arange(1, n + 1), {"entropy": h, "reward": noise(n, 0.1)})
    assert watch.ceiling() is None
    assert not CeilingFit(0.2, 0.9, 0.7, 0.01, 0.5, 40).stated  # R^2 too low
    assert not CeilingFit(-0.2, 0.9, 1.1, 0.01, 0.9, 40).stated  # the reward falls with H
    assert CeilingFit(0.2, 0.9, 0.7, 0.01, 0.9, 40).stated


def test_entropy_in_sft_rows_is_never_a_collapse():
    n = 100  # SFT: entropy falls as the model learns (rows with token accuracy)
    flags = flags_of(np.arange(1, n + 1), {"entropy": np.linspace(3, 0.1, n),
                                            "mean_token_accuracy": np.linspace(0, 1, n),
                                            "reward": np.linspace(0, 1, n)})
    assert [f.flag for f in flags if f.flag == "entropy_collapse"] == []


def test_a_kl_jump_off_its_plateau_while_the_reward_stays_is_kl_drift():
    n = 80
    steps = np.arange(1, n + 1)
    kl = np.where(steps < 50, 0.05, 0.5) + noise(n, 0.005)
    reward = 0.4 + noise(n, 0.02, seed=2)
    f = only(flags_of(steps, {"kl": kl, "reward": reward}), "kl_drift")
    assert f.from_step <= 50 <= f.seen_at <= 56
    assert f.evidence.level > 2 * 0.05 and f.evidence.threshold == pytest.approx(0.1, abs=0.01)
    # the same KL while the reward climbs with it: no flag
    climbing = np.where(steps < 50, 0.4, 0.8) + noise(n, 0.02, seed=2)
    assert [f.flag for f in flags_of(steps, {"kl": kl, "reward": climbing})] == []
    # the ramp every run climbs from zero: no flag
    ramp = np.minimum(steps / 40, 1.0) * 0.1
    assert [f.flag for f in flags_of(steps, {"kl": ramp, "reward": reward})] == []


def test_one_reward_function_carrying_the_gain_while_another_falls_is_an_audit():
    n = 60
    steps = np.arange(1, n + 1)
    up = np.linspace(0.1, 0.9, n) + noise(n, 0.01)
    down = np.linspace(0.8, 0.2, n) + noise(n, 0.01, seed=3)
    f = only(flags_of(steps, {"rewards/length/mean": up, "rewards/correct/mean": down}),
             "reward_dominance")
    assert f.severity == "information" and f.evidence.text.startswith("audit: length")
    assert f.evidence.metric == "rewards/length/mean"


def test_a_loss_spike_and_a_grad_spike_on_their_own_scale():
    n = 100
    steps = np.arange(1, n + 1)
    loss = 2.0 - steps * 0.01 + noise(n, 0.01)
    loss[70] = 5.0  # one value far above its level
    grad = 1.0 + noise(n, 0.05, seed=4)
    grad[80:] = 10.0  # the gradient norm jumps and stays
    flags = flags_of(steps, {"loss": loss, "grad_norm": grad})
    ls, gs = only(flags, "loss_spike"), only(flags, "grad_spike")
    assert (ls.from_step, ls.seen_at, ls.evidence.level) == (71, 71, 5.0)
    assert ls.evidence.threshold < 5.0 and ls.evidence.window == 50
    assert gs.seen_at == 83  # three values over the bar, the divergence watch's patience
    # a GRPO loss near zero is not read: rows with a reward
    grpo = flags_of(steps, {"loss": loss * 1e-3, "reward": np.full(n, 0.5)})
    assert "loss_spike" not in {f.flag for f in grpo}


def test_a_task_metric_falling_from_what_was_learned_is_task_collapse():
    n = 120
    steps = np.arange(1, n + 1)
    acc = np.concatenate([np.linspace(0.05, 0.8, 60), np.full(20, 0.8), np.full(40, 0.05)])
    acc = acc + noise(n, 0.005)
    f = only(flags_of(steps, {"mean_token_accuracy": acc}), "task_collapse")
    assert 60 <= f.from_step <= 80 < f.seen_at <= 90  # from its best on
    assert f.evidence.metric == "mean_token_accuracy" and f.evidence.trend < -0.3
    # noise around a level never collapses
    flat = 0.5 + noise(2000, 0.1)
    assert flags_of(np.arange(1, 2001), {"mean_token_accuracy": flat}) == []


def test_stalled_needs_a_running_job_and_several_silent_intervals():
    steps = np.arange(1, 21)
    times = 1000.0 + 10.0 * steps  # a row every 10 s, the last at 1200
    assert stalled_flag(steps, times, 1200 + 59, running=True) is None  # under a minute
    f = stalled_flag(steps, times, 1200 + 61, running=True)
    assert (f.flag, f.from_step, f.seen_at) == ("stalled", 20, 20)
    assert f.evidence.level == pytest.approx(61) and f.evidence.threshold == 60
    assert stalled_flag(steps, times, 1200 + 600, running=False) is None
    slow = 1000.0 + 100.0 * steps  # every 100 s: silent 5 intervals is 500 s
    assert stalled_flag(steps, slow, 3000 + 499, running=True) is None
    assert stalled_flag(steps, slow, 3000 + 501, running=True) is not None


def test_flags_reach_the_snapshot_and_the_events_and_nan_is_a_flag():
    store = RunStore()
    rows = [(s, {"completions/clipped_ratio": 0.0 if s < 10 else 1.0, "loss": 1.0})
            for s in range(1, 20)]
    store.apply([ScalarBatch.from_rows(RUN, rows, wall_time=1000.0)])
    store.apply([ScalarBatch.from_rows(RUN, [(20, {"epoch": 1.0})], wall_time=1001.0,
                                       nonfinite=[("loss", 20)])])
    snap = store.snapshot(RUN.key)
    assert [f.flag for f in snap.health] == ["truncation", "nan_loss"]
    assert snap.health[0].as_dict()["evidence"]["threshold"] == 0.5
    events = [(e.kind, e.step) for e in snap.events]
    assert ("truncation", 12) in events and ("nan_loss", 20) in events
    notices = {n.kind for n in store.take_notices()}
    assert {"truncation", "nan_loss"} <= notices
    # stalled: only with the clock, while the job runs
    assert snap.health_at(5000.0) == snap.health
    store.apply([Job(RUN, "j", "RUNNING")])
    later = store.snapshot(RUN.key)
    assert [f.flag for f in later.health_at(5000.0)][-1] == "stalled"
    assert [f.flag for f in later.health_at(1002.0)] == ["truncation", "nan_loss"]


def test_the_store_passes_each_flag_once_to_a_guard():
    store = RunStore()
    store.apply([ScalarBatch.from_rows(RUN, [(s, {"completions/clipped_ratio": 1.0})
                                             for s in range(1, 8)])])
    store.watch_flags()  # flags said before the guard watched are passed too
    assert [(r.key, f.flag) for r, f in store.take_flags()] == [(RUN.key, "truncation")]
    store.apply([ScalarBatch.from_rows(RUN, [(8, {"completions/clipped_ratio": 1.0})])])
    assert store.take_flags() == []


def test_summary_json_lists_the_health_flags(tmp_path, capsys):
    from tests.report.test_report import summary

    rows = [{"step": s, "loss": 1.0, "completions/clipped_ratio": 0.0 if s < 2 else 0.9}
            for s in range(1, 7)]
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + '\n{"step": 7, "loss": NaN}\n')
    d = summary([str(path)], capsys)
    assert d["health"] == [
        {"flag": "truncation", "from_step": 2, "seen_at": 5, "severity": "warning",
         "evidence": {"metric": "completions/clipped_ratio", "level": pytest.approx(0.72),
                      "trend": pytest.approx(0.9), "threshold": 0.5, "window": 5,
                      "text": "72% of completions clipped at the length cap (>= 50%)"}},
        {"flag": "nan_loss", "from_step": 7, "seen_at": 7, "severity": "error",
         "evidence": {"metric": "loss", "level": None, "trend": None, "threshold": None,
                      "window": 0, "text": "loss is NaN or infinite at step 7"}}]
