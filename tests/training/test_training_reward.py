"""The batched CARL reward against a slow float64 reference, and the cascade."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from carl_tui.coherence.gates import CascadeGate
from carl_tui.coherence.rewards import score_sequence
from carl_tui.training.callback import CarlCallback
from carl_tui.training.cascade_reward import CascadeReward
from carl_tui.training.reward import batch_token_stats, carl_reward
from carl_tui.training.tiny import (
    EOS,
    reverse_reward,
    tiny_model,
    tiny_tokenizer,
    warm_start_copy,
)

PROMPTS = ["12>", "987654>", "3>", "40213>", "55>"]
COMPLETIONS = ["21", "456789" + EOS, "3333333333", "31204" + EOS, "5"]


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def trained(tok):
    """A tiny model with peaked, position-dependent predictions (so alignment matters)."""
    model = tiny_model(seed=5)
    warm_start_copy(model, tok, steps=40, seed=5)
    return model


@pytest.fixture(scope="module")
def wide(tok):
    """Same body with a wide output layer and large random weights (peaked logits)."""
    model = tiny_model(4000, seed=6)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(40.0)
    return model


def reference(model, tok, prompt: str, completion_ids: list[int], shift: int = 0):
    """One completion at a time: full logits on the host, float64 softmax, explicit alignment.

    The row at position k predicts token k + 1: completion token j (at position P + j)
    is scored by row P + j - 1. `shift` misaligns on purpose (to prove the test can fail)."""
    p_ids = tok(prompt)["input_ids"]
    seq = torch.tensor([p_ids + completion_ids])
    with torch.no_grad():
        logits = model(input_ids=seq).logits[0].double().numpy()
    n_p, n_c = len(p_ids), len(completion_ids)
    rows = logits[n_p - 1 + shift : n_p - 1 + shift + n_c]
    z = rows - rows.max(axis=1, keepdims=True)
    probs = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.where(probs > 0, probs * np.log(probs), 0.0).sum(axis=1)
    phi = np.clip(1.0 - ent / math.log(logits.shape[1]), 0.0, 1.0)
    p_next = probs[np.arange(n_c), completion_ids] if n_c else np.zeros(0)
    return phi, p_next, score_sequence(phi, p_next, ent)


def ids_of(tok, texts):
    return [tok(t, add_special_tokens=False)["input_ids"] for t in texts]


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("which", ["trained", "wide"])
def test_reward_matches_float64_reference(request, tok, side, which):
    model = request.getfixturevalue(which)
    c_ids = ids_of(tok, COMPLETIONS)
    assert len({len(c) for c in c_ids}) > 3  # padding of different lengths in the batch
    reward = carl_reward(model, tok, padding_side=side, chunk_size=7)
    got = reward(prompts=PROMPTS, completions=COMPLETIONS, completion_ids=c_ids)
    phis, probs = batch_token_stats(model, [tok(p)["input_ids"] for p in PROMPTS], c_ids,
                                    padding_side=side, chunk_rows=5)
    for i, (prompt, cid) in enumerate(zip(PROMPTS, c_ids)):
        phi, p_next, score = reference(model, tok, prompt, cid)
        np.testing.assert_allclose(phis[i], phi, atol=1e-5)
        np.testing.assert_allclose(probs[i], p_next, atol=1e-5)
        assert got[i] == pytest.approx(score.composite, abs=1e-4)
        s = reward.last_scores[i]
        for field in ("multiscale", "cloud", "discontinuity", "phi_mean", "entropy_mean"):
            assert getattr(s, field) == pytest.approx(getattr(score, field), abs=1e-4), field
    # the values are not all alike: the test can tell completions apart
    assert max(got) - min(got) > 0.01


def test_reference_detects_misalignment(tok, trained):
    """An off-by-one pairing differs far beyond the tolerance, so the test above can fail."""
    c_ids = ids_of(tok, COMPLETIONS)
    got = carl_reward(trained, tok)(prompts=PROMPTS, completions=COMPLETIONS, completion_ids=c_ids)
    worst = 0.0
    for i, (prompt, cid) in enumerate(zip(PROMPTS, c_ids)):
        if len(cid) < 2:
            continue
        _, p_shift, _ = reference(trained, tok, prompt, cid, shift=1)
        _, p_ok, _ = reference(trained, tok, prompt, cid)
        worst = max(worst, float(np.abs(p_shift[:-1] - p_ok[:-1]).max()))
        assert got[i] == pytest.approx(reference(trained, tok, prompt, cid)[2].composite, abs=1e-4)
    assert worst > 0.05


def test_reward_text_path_chunks_and_mode(tok, trained):
    c_ids = ids_of(tok, COMPLETIONS)
    trained.train()
    r = carl_reward(trained, tok, chunk_size=1)
    with_ids = r(prompts=PROMPTS, completions=COMPLETIONS, completion_ids=c_ids)
    assert trained.training  # restored after scoring in eval mode
    trained.eval()
    from_text = carl_reward(trained, tok, chunk_size=1000)(prompts=PROMPTS, completions=COMPLETIONS)
    assert not trained.training
    np.testing.assert_allclose(with_ids, from_text, atol=1e-6)
    assert all(0.0 <= x <= 1.0 for x in with_ids)
    assert r.__name__ == "carl"


def test_reward_empty_completion_and_no_grad(tok, trained):
    out = carl_reward(trained, tok)(prompts=["12>", "34>"], completions=["", "43"],
                                    completion_ids=[[], ids_of(tok, ["43"])[0]])
    empty = score_sequence(np.zeros(0), np.zeros(0))
    assert out[0] == pytest.approx(empty.composite)
    assert all(p.grad is None for p in trained.parameters())


def test_reward_logs_components_through_log_metric(tok, trained):
    logged: dict[str, float] = {}
    r = carl_reward(trained, tok)
    vals = r(prompts=PROMPTS, completions=COMPLETIONS, log_metric=logged.__setitem__)
    assert logged["carl/composite"] == pytest.approx(float(np.mean(vals)))
    ms = [s.multiscale for s in r.last_scores]
    assert logged["carl/multiscale"] == pytest.approx(float(np.mean(ms)))
    assert {"carl/cloud", "carl/discontinuity", "carl/completion_phi"} <= set(logged)
    logged.clear()
    carl_reward(trained, tok, log_components=False)(
        prompts=PROMPTS, completions=COMPLETIONS, log_metric=logged.__setitem__)
    assert logged == {}


# -- cascade ---------------------------------------------------------------------


def _batch_reward(values):
    """A task reward returning preset values per call (one list per batch)."""
    it = iter(values)

    def task(prompts, completions, **kwargs):
        v = next(it)
        return [v] * len(completions)

    return task


def test_cascade_switches_on_only_after_the_gate(tmp_path, tok, trained):
    metric = [0.1, 0.12, 0.11, 0.1, 0.13, 0.3, 0.5, 0.7, 0.8, 0.81, 0.8, 0.82, 0.8, 0.81, 0.8,
              0.82, 0.81, 0.8, 0.8, 0.81]
    gate_kw = {"window": 3, "warmup": 5, "patience": 2}
    expected = CascadeGate(**gate_kw)
    predicted = next(i for i, v in enumerate(metric) if expected.update(i + 1, v))
    cb = CarlCallback(tmp_path / "s.jsonl", 13, phases=False)
    cb.step_offset = 100
    cascade = CascadeReward([_batch_reward(metric)], carl_reward(trained, tok),
                            gate=CascadeGate(**gate_kw), callback=cb)
    task_fn, carl_fn = cascade.reward_funcs
    assert carl_fn.__name__ == "carl" and task_fn.__name__ == "task"
    prompts, comps = PROMPTS[:2], COMPLETIONS[:2]
    stages = []
    for step, _ in enumerate(metric):
        logged = {}
        kw = {"trainer_state": SimpleNamespace(global_step=step), "log_metric": logged.__setitem__}
        task_fn(prompts=prompts, completions=comps, **kw)
        out = carl_fn(prompts=prompts, completions=comps, **kw)
        stages.append(logged["cascade/stage"])
        if step < predicted:
            assert out == [None, None]
        else:
            assert all(isinstance(x, float) for x in out)
    assert stages == [0.0] * predicted + [1.0] * (len(metric) - predicted)
    assert cascade.fired_step == predicted + 1  # the step whose log carries that batch
    cb.close()
    lines = [json.loads(x) for x in (tmp_path / "s.jsonl").read_text().splitlines()]
    markers = [x for x in lines if x.get("kind") == "cascade"]
    assert len(markers) == 1 and markers[0]["step"] == 100 + predicted + 1
    assert markers[0]["task_metric"] == pytest.approx(metric[predicted])


def test_cascade_never_fires_on_flat_task_metric_and_computes_missing_task_rewards(tok, trained):
    cascade = CascadeReward([reverse_reward], carl_reward(trained, tok),
                            gate=CascadeGate(window=3, warmup=5, patience=2))
    _, carl_fn = cascade.reward_funcs
    for step in range(30):
        # the CARL function called alone still sees the task metric (computed for it)
        out = carl_fn(prompts=["12>"], completions=["21"], answer=["21"],
                      trainer_state=SimpleNamespace(global_step=step))
        assert out == [None]
    assert cascade.stage == "A" and cascade.fired_step is None
    assert [m for _, m, _ in cascade.history] == [1.0] * 30


#: The batch above and an empty completion (the reward on CUDA).
PROMPTS_E = [*PROMPTS, "7>"]
COMPLETIONS_E = [*COMPLETIONS, ""]


def _scores(model, tok, device, dtype):
    on = model.to(device=device, dtype=dtype)
    c_ids = [tok(t, add_special_tokens=False)["input_ids"] for t in COMPLETIONS_E]
    reward = carl_reward(on, tok, chunk_size=4)
    got = reward(prompts=PROMPTS_E, completions=COMPLETIONS_E, completion_ids=c_ids)
    return got, reward.last_scores, c_ids


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize(("dtype", "tol"), [("float32", 1e-4), ("bfloat16", 0.03)])
def test_reward_on_cuda_matches_the_host_reference(tok, trained, dtype, tol):
    import copy

    host = copy.deepcopy(trained).float()
    model = copy.deepcopy(trained)
    got, scores, c_ids = _scores(model, tok, "cuda", getattr(torch, dtype))
    assert next(model.parameters()).device.type == "cuda"
    empty = score_sequence(np.zeros(0), np.zeros(0))
    assert got[-1] == pytest.approx(empty.composite)  # the empty completion, on any device
    for i, (prompt, cid) in enumerate(zip(PROMPTS_E[:-1], c_ids[:-1], strict=True)):
        _phi, _p, ref = reference(host, tok, prompt, cid)
        assert got[i] == pytest.approx(ref.composite, abs=tol), (dtype, i)
        for field in ("multiscale", "cloud", "discontinuity", "phi_mean"):
            assert getattr(scores[i], field) == pytest.approx(getattr(ref, field), abs=tol), field
    assert max(got) - min(got) > 0.01  # the scores tell the completions apart


