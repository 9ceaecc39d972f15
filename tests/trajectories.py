"""Trajectories shaped like real training runs, with the truth known.

Every generator is seeded and returns the columns a TRL trainer logs (its key
names), with noise, slow drift and non-round values, plus what a correct reader
should conclude from them: the first step of each phase (`Trajectory.edges`)
or the step from which a cascade case is sustained (`CascadeCase`).

- `sft_story`: a supervised run shaped like the phase table of the CARL
  definitions (baseline, melting, transition, crystallisation, converged),
  each change spread over a ramp of a few noisy steps centred on the table's
  boundary, over any run length (the table's 46 steps stretched).
- `grpo_story`: a GRPO run whose task reward (a mean of per-completion
  rewards) rises once and levels off, on any reward scale, with entropy flat,
  slowly decaying or not logged.
- `cascade_case`: task-reward series for the cascade gate (already high,
  early rise, slow rise, noisy plateau, pure noise, still climbing).

Other tests (store, summary) can feed `Trajectory.rows()` to a store as
`ScalarBatch.from_rows(run, traj.rows())`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

PHASE_NAMES = ("baseline", "melting", "transition", "crystallisation", "converged")

#: The phase table: first step of each phase in a 46-step run.
TABLE_LENGTH = 46
TABLE_EDGES = (10, 20, 25, 35)
#: Token accuracy and entropy of each phase in the table.
TABLE_ACCURACY = (0.03, 0.08, 0.65, 0.99, 0.993)
TABLE_ENTROPY = (1.0, 9.3, 4.1, 0.4, 0.12)


@dataclass(frozen=True)
class Trajectory:
    """A run: `steps` and TRL-named `columns` (NaN where a row did not log a key).

    `edges` maps each phase the run goes through to its true first step
    (phases the run never shows are absent); `progress_key` is the metric the
    phase classifier reads (token accuracy, or the task reward)."""

    name: str
    steps: np.ndarray
    columns: dict[str, np.ndarray]
    progress_key: str
    edges: dict[str, int]
    params: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.steps.size)

    @property
    def progress(self) -> np.ndarray:
        return self.columns[self.progress_key]

    @property
    def entropy(self) -> np.ndarray:
        return self.columns.get("entropy", np.full(self.steps.size, np.nan))

    def labels(self) -> np.ndarray:
        """The true phase of every row, as an index into PHASE_NAMES."""
        out = np.zeros(self.steps.size, dtype=np.int8)
        for name, step in self.edges.items():
            out[self.steps >= step] = np.maximum(out[self.steps >= step], PHASE_NAMES.index(name))
        return out

    def rows(self) -> list[tuple[int, dict[str, float]]]:
        """`(step, {key: value})` rows without the keys a row did not log."""
        out = []
        for i, step in enumerate(self.steps.tolist()):
            vals = {k: float(v[i]) for k, v in self.columns.items() if np.isfinite(v[i])}
            out.append((int(step), vals))
        return out


# ----------------------------------------------------------------------------- helpers


def _ramp(t: np.ndarray, edge: float, width: int, shape: str) -> np.ndarray:
    """0 before, 1 after a change centred on `edge`, spread over `width` steps.

    Width 0 is an instant step (1 from `edge` on); width w >= 1 is a ramp from
    edge - w/2 to edge + w/2, so the value at the edge is exactly halfway."""
    if width <= 0:
        return (t >= edge).astype(np.float64)
    f = np.clip((t - (edge - width / 2)) / width, 0.0, 1.0)
    if shape == "smooth":
        f = f * f * (3 - 2 * f)
    return f


def _levels(values: Sequence[float], t: np.ndarray, edges: Sequence[float],
            widths: Sequence[int], shape: str, log: bool) -> np.ndarray:
    """Piecewise-constant levels joined by centred ramps (in log space if `log`)."""
    v = np.log(np.asarray(values)) if log else np.asarray(values, dtype=np.float64)
    out = np.full(t.shape, v[0])
    for k, (edge, width) in enumerate(zip(edges, widths)):
        out = out + (v[k + 1] - v[k]) * _ramp(t, edge, width, shape)
    return np.exp(out) if log else out


def _phase_drift(t: np.ndarray, bounds: Sequence[float], amplitude: Sequence[float]):
    """A slow linear drift inside each phase (-a/2 .. +a/2 over the phase)."""
    out = np.zeros(t.shape)
    edges = [0.0, *bounds, float(t[-1]) + 1 if t.size else 1.0]
    for k in range(len(edges) - 1):
        lo, hi = edges[k], edges[k + 1]
        inside = (t >= lo) & (t < hi)
        span = max(hi - lo, 1.0)
        out[inside] = amplitude[k] * ((t[inside] - lo) / span - 0.5)
    return out


def _stretch(length: int) -> float:
    return length / TABLE_LENGTH


# ----------------------------------------------------------------------------- SFT


def sft_story(
    length: int = TABLE_LENGTH,
    ramp: int | Sequence[int] = 3,
    acc_noise: float = 0.01,
    ent_noise: float = 0.05,
    seed: int = 0,
    *,
    shape: str | None = None,
    entropy_space: str | None = None,
    entropy_scale: float | None = None,
    jitter: bool = True,
    accuracy: bool = True,
    entropy: bool = True,
) -> Trajectory:
    """An SFT run shaped like the phase table, stretched to `length` steps.

    True edges: melting, transition, crystallisation and converged start at the
    table's boundaries 10, 20, 25 and 35 scaled by length / 46 (rounded), e.g.
    43, 87, 109 and 152 for 200 steps. Each change of accuracy and entropy is a
    ramp of `ramp` steps (one width for all, or one per change) centred on its
    edge: at the edge the value is halfway between the two phases' levels
    (`ramp=0` is an instant step). `shape` is "linear" or "smooth" (smoothstep)
    and `entropy_space` "log" or "linear" (how entropy moves between levels);
    None picks them from the seed.

    Levels are the table's, each nudged by the seed (`jitter`): accuracy about
    0.03 / 0.08 / 0.65 / 0.99 / 0.993, entropy about 1 / 9.3 / 4.1 / 0.4 / 0.12
    times `entropy_scale` (None: a seeded scale between 0.5 and 2; entropy is
    read relative to the run's own baseline). Noise: accuracy Gaussian
    (`acc_noise`, clipped to [0, 1]), entropy log-normal (`ent_noise`); both
    drift slowly inside each phase. `accuracy=False` / `entropy=False` leave
    that column out (an entropy-only or accuracy-only run).
    """
    rng = np.random.default_rng(seed)
    s = _stretch(length)
    edges = [round(b * s) for b in TABLE_EDGES]
    widths = [int(ramp)] * 4 if np.ndim(ramp) == 0 else [int(w) for w in ramp]
    shape = shape or ("linear", "smooth")[int(rng.integers(2))]
    entropy_space = entropy_space or ("log", "linear")[int(rng.integers(2))]
    if entropy_scale is None:
        entropy_scale = float(np.exp(rng.uniform(np.log(0.5), np.log(2.0))))
    t = np.arange(length, dtype=np.float64)

    acc_lv = np.array(TABLE_ACCURACY)
    ent_lv = np.array(TABLE_ENTROPY)
    if jitter:
        acc_lv = acc_lv + np.array([rng.uniform(-0.01, 0.01), rng.uniform(-0.015, 0.015),
                                    rng.uniform(-0.04, 0.04), rng.uniform(-0.006, 0.002), 0.0])
        acc_lv[4] = min(acc_lv[3] + rng.uniform(0.002, 0.005), 0.999)
        ent_lv = ent_lv * np.exp(rng.uniform(-0.08, 0.08, 5))
    ent_lv = ent_lv * entropy_scale

    acc = _levels(acc_lv, t, edges, widths, shape, log=False)
    acc = acc + _phase_drift(t, edges, rng.uniform(-0.6, 0.6, 5) * acc_noise)
    acc = np.clip(acc + rng.normal(0.0, acc_noise, length), 0.0, 1.0)
    ent = _levels(ent_lv, t, edges, widths, shape, log=entropy_space == "log")
    ent = ent * np.exp(_phase_drift(t, edges, rng.uniform(-0.04, 0.04, 5)))
    ent = ent * np.exp(rng.normal(0.0, ent_noise, length))

    steps = np.arange(length, dtype=np.int64)
    loss = 3.1 * (1.0 - acc) ** 1.3 + 0.018 + np.abs(rng.normal(0, 0.01, length))
    grad_norm = (1.7 + 6.0 * _levels([0, 1, 0.3, 0.05, 0.02], t, edges, widths, shape, False)
                 ) * np.exp(rng.normal(0, 0.15, length))
    warm = max(1, length // 12)
    lr = 2e-5 * np.minimum((t + 1) / warm, 1 - np.maximum(t - warm, 0) / max(length - warm, 1))
    nan = np.full(length, np.nan)
    columns = {
        "loss": loss,
        "grad_norm": grad_norm,
        "learning_rate": lr,
        "entropy": ent if entropy else nan,
        "num_tokens": 2048.0 * (t + 1) + rng.integers(0, 300, length).cumsum(),
        "mean_token_accuracy": acc if accuracy else nan,
        "epoch": (t + 1) / length,
    }
    if not entropy:
        del columns["entropy"]
    if not accuracy:
        del columns["mean_token_accuracy"]
    truth = dict(zip(PHASE_NAMES[1:], edges))
    truth = {"baseline": 0, **truth}
    params = {"length": length, "ramp": widths, "acc_noise": acc_noise, "ent_noise": ent_noise,
              "seed": seed, "shape": shape, "entropy_space": entropy_space}
    key = "mean_token_accuracy" if accuracy else "entropy"
    return Trajectory(f"sft-{length}-r{widths}-{seed}", steps, columns, key, truth, params)


# ----------------------------------------------------------------------------- GRPO

#: Reward scales of the GRPO stories: [0, 1] (a success rate), [-1, 3] (a sum of
#: shaped rewards with a penalty), [0, 10] (a 0-10 score).
REWARD_SCALES = ((0.0, 1.0), (-1.0, 3.0), (0.0, 10.0))


def grpo_story(
    length: int = 200,
    scale: tuple[float, float] = (0.0, 1.0),
    entropy: str = "flat",
    seed: int = 0,
    *,
    group: int = 64,
    reward_name: str = "reverse_reward",
) -> Trajectory:
    """A GRPO run: the task reward sits low, rises once, levels off and holds.

    The story (stretched to `length` like the table): the success rate p is
    about 0.09 until step 20 * length / 46, then climbs steadily (with softly
    rounded corners) to about 0.9 at step 25 * length / 46 and holds there,
    drifting slowly. Each logged reward is the mean over `group` completions
    (binomial noise, quantised like a real one), mapped onto `scale`: the
    [-1, 3] and [0, 10] versions of a seed are the [0, 1] version rescaled, so
    a scale-free reader gives them the same phases.

    True edges: transition at the start of the climb (20 * length / 46),
    crystallisation where it levels off (25 * length / 46), converged at
    35 * length / 46 (it has held its top twice as long as it took to climb,
    the table's proportions). No melting: GRPO shows no entropy spike here.
    An online reader can only see the climb once it stands out of the noise,
    so the transition is seen a little after its edge: about
    4 * noise / slope steps (the slope per step is about 0.8 / (5 * length / 46)).

    `entropy`: "flat" (noise around a constant), "decay" (a slow, spike-free
    fall over the whole run, as policies sharpen) or "absent" (not logged).
    """
    rng = np.random.default_rng(seed)
    s = _stretch(length)
    e_trans, e_cryst, e_conv = (round(b * s) for b in TABLE_EDGES[1:])
    t = np.arange(length, dtype=np.float64)
    p0 = rng.uniform(0.06, 0.12)
    p1 = rng.uniform(0.86, 0.93)
    corner = max(0.5, 0.04 * (e_cryst - e_trans))  # a steady climb with rounded corners
    soft = np.logaddexp(0, (t - e_trans) / corner) - np.logaddexp(0, (t - e_cryst) / corner)
    climb = np.clip(soft * corner / max(e_cryst - e_trans, 1), 0, 1)
    p = p0 + (p1 - p0) * climb
    p = np.clip(p + _phase_drift(t, [e_trans, e_cryst], [0.02, 0.0, 0.03]), 0.005, 0.995)
    success = rng.binomial(group, p) / group
    lo, hi = scale
    reward = lo + (hi - lo) * success
    reward_std = (hi - lo) * np.sqrt(np.clip(success * (1 - success), 0, None)) * rng.uniform(
        0.9, 1.1, length)
    nan = np.full(length, np.nan)
    if entropy == "flat":
        ent = 0.83 * np.exp(rng.normal(0, 0.03, length))
    elif entropy == "decay":
        ent = (0.28 + 0.95 * np.exp(-t / (0.6 * length))) * np.exp(rng.normal(0, 0.03, length))
    elif entropy == "absent":
        ent = nan
    else:
        raise ValueError(f"entropy must be flat, decay or absent, not {entropy!r}")
    columns = {
        "loss": rng.normal(0, 0.004, length),
        "grad_norm": 0.4 * np.exp(rng.normal(0, 0.3, length)),
        "learning_rate": np.full(length, 1e-6),
        "num_tokens": 9000.0 * (t + 1),
        "completions/mean_length": 41.0 - 9.0 * climb + rng.normal(0, 1.3, length),
        "completions/clipped_ratio": np.clip(0.1 - 0.08 * climb + rng.normal(0, 0.01, length),
                                             0, 1),
        f"rewards/{reward_name}/mean": reward,
        f"rewards/{reward_name}/std": reward_std,
        "reward": reward,
        "reward_std": reward_std,
        "frac_reward_zero_std": np.clip(p ** 8 + (1 - p) ** 8 + rng.normal(0, 0.01, length), 0,
                                        1),
        "kl": 0.0004 * t + np.abs(rng.normal(0, 0.0005, length)),
        "entropy": ent,
        "clip_ratio/region_mean": np.abs(rng.normal(0, 0.001, length)),
    }
    if entropy == "absent":
        del columns["entropy"]
    steps = np.arange(1, length + 1, dtype=np.int64)  # TRL's global_step starts at 1
    edges = {"baseline": 1, "transition": e_trans + 1, "crystallisation": e_cryst + 1,
             "converged": e_conv + 1}
    params = {"length": length, "scale": scale, "entropy": entropy, "seed": seed,
              "group": group, "p0": p0, "p1": p1}
    name = f"grpo-{length}-{lo:g}..{hi:g}-{entropy}-{seed}"
    return Trajectory(name, steps, columns, f"rewards/{reward_name}/mean", edges, params)


def noise_run(length: int = 1000, seed: int = 0, *, scale: tuple[float, float] = (0.0, 1.0),
              entropy: bool = True) -> Trajectory:
    """No learning at all: the task reward is binomial noise around a low success
    rate (about 0.2) with a faint drift, entropy noise around a constant. True
    phase: baseline throughout."""
    rng = np.random.default_rng(seed)
    t = np.arange(length, dtype=np.float64)
    p = np.clip(rng.uniform(0.15, 0.25) + 0.01 * np.sin(t / 97.0), 0.01, 0.99)
    lo, hi = scale
    reward = lo + (hi - lo) * rng.binomial(32, p) / 32
    columns = {"reward": reward, "rewards/task/mean": reward,
               "kl": 0.0003 * t + np.abs(rng.normal(0, 0.0005, length))}
    if entropy:
        columns["entropy"] = 1.37 * np.exp(rng.normal(0, 0.05, length))
    steps = np.arange(1, length + 1, dtype=np.int64)
    return Trajectory(f"noise-{length}-{seed}", steps, columns, "rewards/task/mean",
                      {"baseline": 1}, {"seed": seed, "scale": scale})


# ----------------------------------------------------------------------------- cascade

CASCADE_KINDS = ("already_high", "early_rise", "slow_rise", "noisy_plateau", "pure_noise",
                 "climbing")


@dataclass(frozen=True)
class CascadeCase:
    """A task-reward series for the cascade gate.

    `sustained_from`: the first step from which the metric stays where it ends up
    (None when it never settles: pure noise settles from the start, so it is 1;
    a metric still climbing at the end has None). `climbing_until`: the last step
    at which the metric is still climbing fast (the gate must not fire before
    it; None when it never climbs)."""

    kind: str
    steps: np.ndarray
    values: np.ndarray
    key: str
    sustained_from: int | None
    climbing_until: int | None
    noise: float

    def rows(self) -> list[tuple[int, dict[str, float]]]:
        return [(int(s), {self.key: float(v)}) for s, v in zip(self.steps, self.values)]


def cascade_case(kind: str, seed: int = 0, length: int = 500,
                 scale: tuple[float, float] = (0.0, 1.0)) -> CascadeCase:
    """One cascade case (`kind` in CASCADE_KINDS), a task reward on `scale`.

    - already_high: about 0.95 +- 0.02 from the first step (sustained from step 1);
    - early_rise: about 0.12, climbing to about 0.86 between steps 4 and 9, inside
      any warm-up (sustained from step 10);
    - slow_rise: about 0.1, climbing steadily from step 50 to about 0.8 at step 350
      (0.0023 a step, under its noise of 0.03), then holding (sustained from 351);
    - noisy_plateau: a learning curve (logistic, centre 120, width 10) from 0.15 to
      0.7, then a plateau with noise 0.08 (sustained from about step 160);
    - pure_noise: 0.3 +- 0.1, no trend (flat from the start: sustained from step 1);
    - climbing: a steady fast climb from 0.05 to 0.95 over the whole run (never
      sustained; climbing until the last step).
    """
    rng = np.random.default_rng(seed)
    t = np.arange(length, dtype=np.float64)
    if kind == "already_high":
        noise = 0.02
        x = 0.95 + 0.004 * np.sin(t / 37) + rng.normal(0, noise, length)
        sustained, climbing = 1, None
    elif kind == "early_rise":
        noise = 0.025
        x = 0.12 + 0.74 * np.clip((t - 3) / 6, 0, 1) + rng.normal(0, noise, length)
        sustained, climbing = 10, 9
    elif kind == "slow_rise":
        noise = 0.03
        x = 0.1 + 0.7 * np.clip((t - 49) / 300, 0, 1) + rng.normal(0, noise, length)
        sustained, climbing = 351, 350
    elif kind == "noisy_plateau":
        noise = 0.08
        x = 0.15 + 0.55 / (1 + np.exp(-(t - 120) / 10)) + rng.normal(0, noise, length)
        sustained, climbing = 161, 140
    elif kind == "pure_noise":
        noise = 0.1
        x = 0.3 + rng.normal(0, noise, length)
        sustained, climbing = 1, None
    elif kind == "climbing":
        noise = 0.02
        x = 0.05 + 0.9 * t / max(length - 1, 1) + rng.normal(0, noise, length)
        sustained, climbing = None, length
    else:
        raise ValueError(f"kind must be one of {CASCADE_KINDS}, not {kind!r}")
    lo, hi = scale
    values = lo + (hi - lo) * x
    steps = np.arange(1, length + 1, dtype=np.int64)
    return CascadeCase(kind, steps, values, "rewards/task/mean", sustained, climbing,
                       noise * (hi - lo))
