"""Ask Claude what is going on in a run.

`build_summary()` turns a run snapshot into a compact, honest text (what is
known, and what was not logged); `Diagnoser.stream()` sends it with the
anthropic SDK (`messages.stream`) and yields the answer's text as it arrives.
Follow-up questions resend the conversation. Every text sent passes through
`redact()`; nothing else (no environment, no token) is put in the request.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from carl_tui.actions.action_error import ActionError
from carl_tui.errors import is_network_error
from carl_tui.redact import StreamRedactor, redact

DEFAULT_MODEL = "claude-sonnet-5-5"
MODEL_ENV = "CARL_TUI_CLAUDE_MODEL"
DEFAULT_QUESTION = (
    "What is happening in this run? Is it healthy, which phase is it in, and what would you "
    "change (learning rate, KL, generations, reward) if anything?"
)
SYSTEM_PROMPT = (
    "You are an expert in reinforcement learning of language models (GRPO, SFT, TRL). "
    "You read a summary of a training run watched in carl-tui: phi is the CARL order parameter "
    "1 - H/ln V (H the token entropy, V the vocabulary size), the phase classifier labels the run "
    "baseline, melting, transition, crystallisation or converged, the phase-transition gate fires "
    "when accuracy holds above its threshold, and the cascade gate switches the CARL reward on. "
    "Answer in concise Markdown: a one-line verdict, the evidence from the numbers, then concrete "
    "next steps. Say plainly when the data is too short or a metric is missing; "
    "never invent values."
)

# Metric families in the summary: display name -> names a run may log them under.
SUMMARY_METRICS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("phi", ("phi",)),
    ("entropy", ("entropy",)),
    ("reward", ("reward",)),
    ("reward std", ("reward_std",)),
    ("accuracy", ("mean_token_accuracy",)),
    ("loss", ("loss",)),
    ("learning rate", ("learning_rate", "lr")),
    ("KL", ("kl", "objective/kl")),
    ("completion length",
     ("completions/mean_length", "completion_length", "completions/mean_length_mean")),
    ("grad norm", ("grad_norm",)),
)
SHAPE_POINTS = 8
RECENT_POINTS = 8
MAX_MARKERS = 20
MAX_OTHER_METRICS = 24


def _fmt(v: float | None) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    a = abs(v)
    if a != 0 and (a < 1e-3 or a >= 1e5):
        return f"{v:.3e}"
    return f"{v:.4g}"


def _shape(steps: np.ndarray, values: np.ndarray, points: int = SHAPE_POINTS) -> str:
    """A few (step: value) samples spread over the run: the curve in one line."""
    n = int(values.shape[0])
    if n == 0:
        return ""
    idx = sorted(set(np.linspace(0, n - 1, num=min(points, n)).round().astype(int).tolist()))
    return ", ".join(f"{int(steps[i])}: {_fmt(float(values[i]))}" for i in idx)


def _pick(series, names: Sequence[str]):
    for name in names:
        if name in series:
            return name, series[name]
    return None, None


def build_summary(snapshot, *, log_lines: int = 40) -> str:
    """A compact Markdown summary of a `RunSnapshot` for Claude, with secrets removed."""
    s = snapshot
    out: list[str] = [f"# Run {s.run.label}"]
    out += _identity_lines(s)
    out += _phase_lines(s.phase)
    out += _gate_lines(s.gate, s.cascade)
    out += _metric_lines(s.series)
    out += _event_lines(s.markers)
    out += _log_tail_lines(s.log_tail, log_lines)
    return redact("\n".join(out))


SUMMARY_CONFIG_KEYS = (
    "learning_rate", "num_generations", "beta", "max_steps", "per_device_train_batch_size",
    "gradient_accumulation_steps", "max_completion_length", "temperature", "carl",
)


def _identity_lines(s) -> list[str]:
    """Who the run is (source, model, vocabulary), how far it got, its job and its config."""
    meta = dict(s.meta or {})
    ident = [f"source {s.run.source}", f"project {s.run.project}", f"run id {s.run.run_id}"]
    for key in ("model", "model_name", "method", "dataset", "trainer"):
        if meta.get(key) not in (None, ""):
            ident.append(f"{key} {meta[key]}")
    if s.vocab_size:
        ident.append(f"vocab size {s.vocab_size}")
    out = ["- " + "; ".join(ident)]
    last = s.last_step if s.last_step is not None else "-"
    progress = f"- steps logged: {s.steps_logged}, last step: {last}"
    if s.progress is not None and s.progress.total:
        progress += f" of {s.progress.total}"
    out.append(progress)
    if s.job is not None:
        job = f"- job {s.job.job_id}: {s.job.stage}"
        if s.job.flavor:
            job += f" on {s.job.flavor}"
        if s.job.message:
            job += f" ({s.job.message})"
        out.append(job)
    config = meta.get("config")
    if isinstance(config, dict) and config:
        cfg = [f"{k}={config[k]}" for k in SUMMARY_CONFIG_KEYS if k in config]
        if cfg:
            out.append("- config: " + ", ".join(cfg))
    return out


def _phase_lines(ph) -> list[str]:
    out = ["", "## Phase"]
    if ph.timeline:
        out.append("- timeline: " + " -> ".join(f"{p} (step {st})" for p, st in ph.timeline))
        out.append(f"- now: {ph.phase or 'unknown'}"
                   + (f" since step {ph.since_step}" if ph.since_step is not None else ""))
    else:
        out.append("- no phase yet (not enough accuracy/entropy data)")
    out.append(f"- classifier inputs: {ph.inputs}")
    return out


def _gate_lines(g, c) -> list[str]:
    """The phase-transition gate `g` and the cascade gate `c`."""
    out = ["", "## Gates"]
    gate = (f"- phase-transition gate on {g.metric} >= {g.threshold:g} "
            f"({g.min_above} of the last {g.window} steps): ")
    gate += (f"FIRED at step {g.trigger_step}" if g.fired else f"not fired ({g.progress_text})")
    out.append(gate)
    if g.peak_entropy is not None:
        out.append(f"- peak entropy {_fmt(g.peak_entropy)} at step {g.peak_entropy_step}")
    carl = (f", CARL reward on since step {c.trigger_step}" if c.fired
            else ", CARL reward not yet on")
    out.append(f"- cascade gate on {c.metric}: stage {c.stage}" + carl)
    return out


def _metric_lines(series) -> list[str]:
    """The table of the summary metrics, their shape over the run, the recent window, the rest."""
    out = ["", "## Metrics",
           ("recent = mean of the last 50 points; whole = mean over the run; "
            "trend = mean of the last 10 minus the 10 before"),
           "",
           "| metric | last | recent | whole | min | max | trend | points |",
           "|---|---|---|---|---|---|---|---|"]
    shown: set[str] = set()
    missing: list[str] = []
    shapes: list[str] = []
    for label, names in SUMMARY_METRICS:
        name, v = _pick(series, names)
        if v is None:
            missing.append(label)
            continue
        shown.add(name)
        out.append(_table_row(label, name, v))
        shape = _shape(v.steps, v.values)
        if shape:
            shapes.append(f"- {label}: {shape}")
    if missing:
        out += ["", "Not logged: " + ", ".join(missing) + "."]
    if shapes:
        out += ["", "## Over the run (step: value)", *shapes]
    out += _recent_lines(series)
    out += _other_metric_lines(series, shown)
    return out


def _table_row(label: str, name: str, v) -> str:
    tag = f"{label} ({name})" if name != label else label
    if getattr(v, "derived", False):
        tag += " [derived from entropy]"
    return (f"| {tag} | {_fmt(v.last)} | {_fmt(v.recent_mean)} | {_fmt(v.whole_mean)} | "
            f"{_fmt(v.min)} | {_fmt(v.max)} | {_fmt(v.trend)} | {v.count} |")


def _recent_lines(series) -> list[str]:
    """The last points of phi, entropy, reward and KL, for runs long enough to have a shape."""
    recent = []
    for label, names in SUMMARY_METRICS[:3] + (("KL", ("kl", "objective/kl")),):
        _, v = _pick(series, names)
        if v is not None and v.count > 2 * SHAPE_POINTS:
            recent.append(f"- {label}: "
                          + _shape(v.steps[-RECENT_POINTS:], v.values[-RECENT_POINTS:]))
    if not recent:
        return []
    return ["", f"## Recent window (last {RECENT_POINTS} points, step: value)", *recent]


def _other_metric_lines(series, shown: set[str]) -> list[str]:
    others = sorted(n for n in series if n not in shown)
    if not others:
        return []
    out = ["", "## Other metrics (last value)"]
    out += [f"- {n}: {_fmt(series[n].last)}" for n in others[:MAX_OTHER_METRICS]]
    if len(others) > MAX_OTHER_METRICS:
        out.append(f"- ... and {len(others) - MAX_OTHER_METRICS} more")
    return out


def _event_lines(markers) -> list[str]:
    out = ["", "## Notable events"]
    if not markers:
        return out + ["- none reported"]
    for m in markers[-MAX_MARKERS:]:
        detail = ", ".join(f"{k}={v}" for k, v in dict(m.detail).items())
        out.append(f"- step {m.step}: {m.kind.replace('_', ' ')}"
                   + (f" ({detail})" if detail else ""))
    if len(markers) > MAX_MARKERS:
        out.append(f"- ({len(markers) - MAX_MARKERS} earlier events not shown)")
    return out


def _log_tail_lines(log_tail, log_lines: int) -> list[str]:
    tail = list(log_tail)[-log_lines:] if log_lines > 0 else []
    out = ["", f"## Last {len(tail)} log lines"]
    if not tail:
        return out + ["- no log lines"]
    return out + ["```", *(line.rstrip("\n")[:400] for line in tail), "```"]


@dataclass(frozen=True)
class Exchange:
    """One question and Claude's answer, for follow-ups."""

    question: str
    answer: str


def has_key() -> bool:
    return bool(os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN"))


# Worded with no `NAME=value` in it: every text on screen is redacted, and the hint's
# own placeholder was shown as `export ANTHROPIC_API_KEY=[REDACTED]`.
NO_KEY_MESSAGE = (
    "No Anthropic API key. Export ANTHROPIC_API_KEY, set to your key (one from "
    "https://console.anthropic.com/settings/keys), in the shell that starts carl-tui, "
    "then press d again."
)


def build_messages(summary: str, question: str | None,
                   history: Sequence[Exchange | tuple[str, str]]):
    """The conversation: the summary with the first question, then the follow-ups."""
    turns = [e if isinstance(e, Exchange) else Exchange(*e) for e in history]
    questions = [t.question for t in turns] + [question or (DEFAULT_QUESTION if not turns else "")]
    if not questions[-1].strip():
        raise ActionError("Ask a question first.", kind="invalid")
    msgs = []
    for i, q in enumerate(questions):
        text = q if i else f"{summary}\n\n---\n\n{q or DEFAULT_QUESTION}"
        msgs.append({"role": "user", "content": redact(text)})
        if i < len(turns):
            msgs.append({"role": "assistant", "content": redact(turns[i].answer) or "(no answer)"})
    return msgs


class Diagnoser:
    """Streams Claude's diagnosis of a run summary.

    `client` is an `anthropic.Anthropic` (made on first use from the
    environment: ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL)."""

    def __init__(self, client=None, *, model: str | None = None, max_tokens: int = 2048,
                 max_retries: int = 2, timeout: float = 120.0):
        self._client = client
        self.model = model or os.environ.get(MODEL_ENV) or DEFAULT_MODEL
        self.max_tokens = max_tokens
        self.max_retries = max_retries
        self.timeout = timeout

    def client(self):
        if self._client is None:
            if not has_key():
                raise ActionError(NO_KEY_MESSAGE, kind="no_key")
            try:
                import anthropic  # lazy: anthropic only when Claude is asked (the [claude] extra)
            except ImportError:
                raise ActionError("The diagnosis needs the anthropic package: "
                                  "pip install 'carl-tui[claude]'.", kind="missing") from None
            self._client = anthropic.Anthropic(max_retries=self.max_retries, timeout=self.timeout)
        return self._client

    def stream(self, summary: str, question: str | None = None,
               history: Sequence[Exchange | tuple[str, str]] = ()) -> Iterator[str]:
        """Yield the answer's text deltas. Blocking I/O: iterate in a worker thread.

        Raises `ActionError`: at once for a missing key or an empty question;
        while iterating for a rejected key, rate limit, overload, server or
        connection error (possibly mid-answer)."""
        messages = build_messages(summary, question, history)
        client = self.client()
        return self._deltas(client, messages)

    def _deltas(self, client, messages) -> Iterator[str]:
        try:
            with client.messages.stream(
                model=self.model,
                max_tokens=self.max_tokens,
                system=SYSTEM_PROMPT,
                messages=messages,
            ) as stream:
                masked = StreamRedactor()  # a secret split across pieces is masked too
                for piece in stream.text_stream:
                    if safe := masked.feed(piece):
                        yield safe
                if rest := masked.flush():
                    yield rest
        except ActionError:
            raise
        except Exception as exc:  # noqa: BLE001  (any client failure becomes a plain message)
            raise api_error(exc, self.model) from None

    def ask(self, summary: str, question: str | None = None,
            history: Sequence[Exchange | tuple[str, str]] = ()) -> str:
        return "".join(self.stream(summary, question, history))


def _api_message(exc: BaseException) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error") if isinstance(body.get("error"), dict) else body
        msg = err.get("message") if isinstance(err, dict) else None
        if isinstance(msg, str) and msg:
            return redact(msg)[:200]
    return ""


def _api_error_type(exc: BaseException) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error") if isinstance(body.get("error"), dict) else body
        t = err.get("type") if isinstance(err, dict) else None
        return t if isinstance(t, str) else ""
    return ""


def api_error(exc: BaseException, model: str = "") -> ActionError:
    """A plain message for an exception of the anthropic SDK."""
    status = getattr(exc, "status_code", None)
    etype = _api_error_type(exc)
    detail = _api_message(exc)
    tail = f" ({detail})" if detail else ""
    if status == 529 or etype == "overloaded_error" or type(exc).__name__ == "OverloadedError":
        return ActionError("Claude is overloaded right now (529). Try again in a minute.",
                           kind="overloaded", status=529)
    if status == 401 or etype == "authentication_error":
        return ActionError("The Anthropic API rejected the key (401). Check ANTHROPIC_API_KEY.",
                           kind="auth", status=401)
    if status == 403 or etype == "permission_error":
        return ActionError(f"The key may not use this model or feature (403){tail}.",
                           kind="forbidden", status=403)
    if status == 404 or etype == "not_found_error":
        return ActionError(f"Model {model!r} was not found (404); choose another model "
                           f"(e.g. set {MODEL_ENV}).", kind="not_found", status=404)
    if status == 429 or etype == "rate_limit_error":
        return ActionError("Rate limited by the Anthropic API (429). Wait a minute and ask again.",
                           kind="rate_limit", status=429)
    if status == 400 or etype == "invalid_request_error":
        return ActionError(f"The Anthropic API refused the request (400){tail}.",
                           kind="invalid", status=400)
    if isinstance(status, int) and status >= 500 or etype == "api_error":
        return ActionError(f"The Anthropic API had a server error ({status or 500}). "
                           "Try again shortly.", kind="server", status=status or 500)
    if type(exc).__name__ == "APITimeoutError":
        return ActionError("The Anthropic API did not answer in time. Try again.", kind="network")
    if is_network_error(exc) or type(exc).__name__ == "APIConnectionError":
        return ActionError("Could not reach the Anthropic API: check your network "
                           "(and ANTHROPIC_BASE_URL if set).", kind="network")
    if isinstance(status, int):
        return ActionError(f"The Anthropic API answered {status}{tail}.", kind="unknown",
                           status=status)
    return ActionError(f"The diagnosis failed: {type(exc).__name__}.", kind="unknown")


def save_markdown(path: str | Path, text: str) -> Path:
    """Write the answer to a Markdown file (secrets removed); returns the path written."""
    p = Path(path).expanduser()
    if p.suffix == "" and not p.exists():
        p = p.with_suffix(".md")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(redact(text).rstrip("\n") + "\n", encoding="utf-8")
    except OSError as exc:
        raise ActionError(f"Could not save to {p}: {exc.strerror or exc}.",
                          kind="missing") from None
    return p
