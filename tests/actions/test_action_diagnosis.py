"""Claude diagnosis: the run summary, and the real anthropic client against a loopback
`POST /v1/messages` fake (streamed SSE, errors, secrets kept out of the request)."""

from __future__ import annotations

import json
import socket

import pytest

from carl_tui.redact import redact

anthropic = pytest.importorskip("anthropic")

from carl_tui.actions.action_error import ActionError
from carl_tui.actions.diagnosis import (
    DEFAULT_MODEL,
    DEFAULT_QUESTION,
    SYSTEM_PROMPT,
    Diagnoser,
    Exchange,
    build_summary,
    save_markdown,
)
from carl_tui.events import Job, LogLines, Marker, RunMeta, RunRef, ScalarBatch
from carl_tui.store import RunStore
from tests.conftest import spec_trajectory
from tests.fakes.anthropic_api import TEST_KEY, AnthropicState, Reply, install_messages_routes

HF_SECRET = "hf_PlantedHubTokenShouldNeverLeave42"
OTHER_SECRET = "pw-Planted-Database-Password-77"


def make_snapshot(log_lines=(), n=46):
    run = RunRef("hf-job", "alice", "job-7", "grpo-tiny")
    rows = spec_trajectory(n)
    for step, r in rows:
        r["reward"] = r["mean_token_accuracy"]
        r["kl"] = 0.01 * step
        r["learning_rate"] = 1e-6
        r["completions/mean_length"] = 100.0 + step
        r["rewards/carl/mean"] = 0.25
    store = RunStore()
    store.apply([
        RunMeta(run, {"model": "tiny-llama", "method": "grpo", "vocab_size": 20,
                      "config": {"learning_rate": 1e-6, "num_generations": 8}}),
        ScalarBatch.from_rows(run, rows),
        Marker(run, "phase_transition", 30, {"accuracy": 0.99}),
        Job(run, "job-7", "RUNNING", flavor="a10g-small"),
        LogLines(run, tuple(log_lines) or ("step 45: loss 0.031",)),
    ])
    return store.snapshot(run.key)


# -- the summary ----------------------------------------------------------------------


def test_summary_tells_phase_gates_metrics_events_and_logs():
    text = build_summary(make_snapshot(["step 44 ok", "step 45: loss 0.031"]))
    assert text.startswith("# Run grpo-tiny")
    assert "model tiny-llama" in text and "method grpo" in text and "vocab size 20" in text
    assert "steps logged: 46, last step: 45" in text
    assert "job job-7: RUNNING on a10g-small" in text
    assert "learning_rate=1e-06, num_generations=8" in text
    # crystallised where the gate fired (one step for it), converged after a hold
    assert ("timeline: baseline (step 0) -> melting (step 10) -> transition (step 20) -> "
            "crystallisation (step 27) -> converged (step 37)") in text
    assert "now: converged since step 37" in text
    assert "FIRED at step 27" in text
    assert "cascade gate on reward: stage" in text
    lines = text.splitlines()
    loss = next(line for line in lines if line.startswith("| loss |"))
    assert loss.split("|")[2].strip() == "0.031"  # last loss of the trajectory
    assert loss.split("|")[-2].strip() == "46"  # points
    kl = next(line for line in lines if line.startswith("| KL (kl) |"))
    assert kl.split("|")[2].strip() == "0.45" and kl.split("|")[6].strip() == "0.45"  # last, max
    assert any(line.startswith("| phi [derived from entropy] |") for line in lines)
    assert "| completion length (completions/mean_length) | 145 |" in text
    assert "Not logged: reward std, grad norm." in text
    assert "- KL: 0: 0, 6: 0.06" in text  # the shape over the run
    assert "## Recent window (last 8 points" in text
    assert "- rewards/carl/mean: 0.25" in text
    assert "- step 30: phase transition (accuracy=0.99)" in text
    assert "## Last 2 log lines" in text and "step 45: loss 0.031" in text


def test_summary_is_honest_about_an_empty_run():
    run = RunRef("jsonl", "p", "r")
    store = RunStore()
    store.apply([RunMeta(run, {"model": "m"})])
    text = build_summary(store.snapshot(run.key))
    assert "no phase yet" in text and "not fired" in text
    assert "Not logged: phi, entropy, reward" in text
    assert "- none reported" in text and "- no log lines" in text


def test_summary_keeps_only_the_last_log_lines_and_removes_secrets(monkeypatch):
    monkeypatch.setenv("DB_PASSWORD", OTHER_SECRET)
    logs = [f"line {i}" for i in range(100)] + [
        f"using token {HF_SECRET}",
        f"export ANTHROPIC_API_KEY={TEST_KEY}",
        f"connecting with {OTHER_SECRET}",
        "Authorization: Bearer abcdef.ghijkl",
    ]
    text = build_summary(make_snapshot(logs), log_lines=10)
    assert "## Last 10 log lines" in text
    assert "line 93" not in text and "line 94" in text
    for secret in (HF_SECRET, TEST_KEY, OTHER_SECRET, "abcdef.ghijkl"):
        assert secret not in text
    assert text.count("[REDACTED]") == 4


# -- Claude through the real SDK -------------------------------------------------------


@pytest.fixture
def claude(server):
    server.routes.clear()
    server.requests.clear()
    state = AnthropicState()
    install_messages_routes(server, state)
    return server, state


def diagnoser(srv, key=TEST_KEY, **kw) -> Diagnoser:
    return Diagnoser(anthropic.Anthropic(base_url=srv.url, api_key=key, max_retries=0), **kw)


def test_answer_streams_in_deltas(claude):
    srv, state = claude
    answer = "## Verdict\nHealthy: phi rose from 0.2 to 0.99 after the transition."
    state.replies.append(Reply(answer, chunk=10))
    deltas = list(diagnoser(srv).stream("SUMMARY"))
    assert "".join(deltas) == answer and len(deltas) == 7
    body = state.bodies[0]
    assert body["model"] == DEFAULT_MODEL and body["stream"] is True
    assert body["system"] == SYSTEM_PROMPT and body["max_tokens"] == 2048
    assert body["messages"] == [
        {"role": "user", "content": f"SUMMARY\n\n---\n\n{DEFAULT_QUESTION}"}
    ]
    headers = state.headers[0]
    assert (headers.get("authorization") == f"Bearer {TEST_KEY}"
            or headers.get("x-api-key") == TEST_KEY)
    assert headers["anthropic-version"]


def test_follow_up_keeps_the_conversation(claude):
    srv, state = claude
    state.replies += ["It is crystallising.", "Lower the learning rate to 5e-7."]
    d = diagnoser(srv, model="claude-haiku-5-5", max_tokens=300)
    first = d.ask("SUMMARY", "What phase?")
    second = d.ask("SUMMARY", "What should I change?", history=[Exchange("What phase?", first)])
    assert second == "Lower the learning rate to 5e-7."
    body = state.bodies[1]
    assert body["model"] == "claude-haiku-5-5" and body["max_tokens"] == 300
    assert body["messages"] == [
        {"role": "user", "content": "SUMMARY\n\n---\n\nWhat phase?"},
        {"role": "assistant", "content": "It is crystallising."},
        {"role": "user", "content": "What should I change?"},
    ]


def test_empty_follow_up_is_refused_before_sending(claude):
    srv, state = claude
    with pytest.raises(ActionError, match="Ask a question"):
        diagnoser(srv).stream("S", "  ", history=[("q", "a")])
    assert state.bodies == []


def test_model_from_the_environment(claude, monkeypatch):
    srv, state = claude
    monkeypatch.setenv("CARL_TUI_CLAUDE_MODEL", "claude-opus-5")
    assert diagnoser(srv).ask("S") == "Nothing scripted."
    assert state.bodies[0]["model"] == "claude-opus-5"


def test_no_key_is_a_clear_message_and_sends_nothing(claude, monkeypatch):
    srv, _ = claude
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", srv.url)
    with pytest.raises(ActionError) as ei:
        Diagnoser().stream("S")
    assert ei.value.kind == "no_key"
    assert "Export ANTHROPIC_API_KEY, set to your key" in str(ei.value)
    # shown whole: every text on screen is redacted, and the hint has nothing to hide
    # (its placeholder was shown as `export ANTHROPIC_API_KEY=[REDACTED]`)
    assert redact(str(ei.value)) == str(ei.value)
    assert srv.requests == []


def test_key_and_base_url_from_the_environment(claude, monkeypatch):
    srv, state = claude
    monkeypatch.setenv("ANTHROPIC_API_KEY", TEST_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", srv.url)
    state.replies.append("From the environment.")
    assert Diagnoser(max_retries=0).ask("S") == "From the environment."
    assert len(srv.requests_to("POST", r"^/v1/messages$")) == 1


@pytest.mark.parametrize("status,kind,words", [
    (401, "auth", "rejected the key (401)"),
    (429, "rate_limit", "Rate limited"),
    (500, "server", "server error (500)"),
    (529, "overloaded", "overloaded"),
])
def test_api_errors_are_plain(claude, status, kind, words):
    srv, state = claude
    state.replies.append(Reply(status=status))
    with pytest.raises(ActionError) as ei:
        list(diagnoser(srv).stream("S"))
    assert ei.value.kind == kind and ei.value.status == status
    assert words in str(ei.value)


def test_wrong_key(claude):
    srv, _ = claude
    with pytest.raises(ActionError) as ei:
        list(diagnoser(srv, key="sk-ant-api03-not-the-right-one-000000").stream("S"))
    assert ei.value.kind == "auth" and "not-the-right-one" not in str(ei.value)


def test_overload_in_the_middle_of_the_answer(claude):
    srv, state = claude
    state.replies.append(Reply("The run looks fine so far, but", chunk=8, error_after=2))
    got = []
    with pytest.raises(ActionError) as ei:
        for delta in diagnoser(srv).stream("S"):
            got.append(delta)  # noqa: PERF402  (the error interrupts the loop)
    # What arrived, up to the last whole word: a word cut off by the error could be the
    # start of a secret, so it is not shown.
    assert "".join(got) == "The run looks "
    assert ei.value.kind == "overloaded"


def test_unreachable_api():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    d = Diagnoser(anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key=TEST_KEY,
                                      max_retries=0))
    with pytest.raises(ActionError) as ei:
        list(d.stream("S"))
    assert ei.value.kind == "network" and "Could not reach" in str(ei.value)


def test_request_body_never_carries_secrets(claude, monkeypatch):
    srv, state = claude
    monkeypatch.setenv("HF_TOKEN", HF_SECRET)
    monkeypatch.setenv("ANTHROPIC_API_KEY", TEST_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", srv.url)
    monkeypatch.setenv("MY_SERVICE_PASSWORD", OTHER_SECRET)
    logs = [
        f"HF_TOKEN={HF_SECRET}",
        f"Calling the API with key {TEST_KEY}",
        f"db password {OTHER_SECRET}",
        f"curl -H 'Authorization: Bearer {HF_SECRET}' https://huggingface.co/api/whoami-v2",
    ]
    summary = build_summary(make_snapshot(logs))
    d = Diagnoser(max_retries=0)
    first = d.ask(summary, f"Is my token {HF_SECRET} the problem?")
    d.ask(summary, f"And {TEST_KEY}?", history=[(f"Is my token {HF_SECRET} the problem?",
                                                 first + f" (you wrote {OTHER_SECRET})")])
    assert len(state.raw_bodies) == 2
    for raw in state.raw_bodies:
        text = raw.decode()
        for secret in (HF_SECRET, TEST_KEY, OTHER_SECRET, "hf_Planted", "sk-ant-api03"):
            assert secret not in text
        assert "[REDACTED]" in text
        assert "crystallisation" in json.loads(text)["messages"][0]["content"]


def test_save_markdown(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", HF_SECRET)
    p = save_markdown(tmp_path / "notes" / "diagnosis", f"# Verdict\nfine, token {HF_SECRET}\n\n")
    assert p.name == "diagnosis.md"
    assert p.read_text() == "# Verdict\nfine, token [REDACTED]\n"
    with pytest.raises(ActionError, match="Could not save"):
        save_markdown(p / "below-a-file.md", "x")
