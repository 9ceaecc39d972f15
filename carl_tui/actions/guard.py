"""Guards: what the dashboard does, by the user's policy, when a run's health flag (or a
NaN or diverging loss) is said. The policy maps a flag to an action:

    notify     a notice (the alert, as without a guard)
    ask        the stop confirmation, naming the flag and its evidence
    stop       the run's job is stopped (a Hugging Face job cancelled; a local run
               interrupted, then terminated), with no key pressed
    stop+push  the run's last checkpoint is pushed to the Hub, then the job is stopped

It comes from the config file's `[guard]` table (`truncation = "stop"`) and the flag
`--guard FLAG=ACTION` (repeatable; over the file). `decide` is the decision, a pure
function of the flags, the policy and the mode: a guard never acts (ask, stop, push)
under `--read-only` (so never under `serve` without `--allow-actions`), never on a
replay, and never twice for one run and flag. Every act is a line of the audit log
(`guard_log_path()`, JSON lines: time, run, flag, evidence, action, result).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from carl_tui.store.health import ALERT_FLAGS, FLAGS, HealthFlag

ACTIONS = ("notify", "ask", "stop", "stop+push")
ACTING = ("ask", "stop", "stop+push")  # what a guard does to the world (or asks to)
GUARDED = (*FLAGS, *ALERT_FLAGS)


@dataclass(frozen=True)
class GuardMode:
    """Where the dashboard runs: `read_only` (`--read-only`, `serve` without
    `--allow-actions`) and `replay` (the run is a replay: nothing to stop)."""

    read_only: bool = False
    replay: bool = False

    @property
    def may_act(self) -> bool:
        return not (self.read_only or self.replay)


@dataclass(frozen=True)
class GuardAct:
    """What a guard does about one flag of one run."""

    run_key: str
    flag: HealthFlag
    action: str  # one of ACTIONS
    why_not: str = ""  # when an acting action was held back: why (read-only, replay)

    @property
    def evidence(self) -> str:
        return self.flag.evidence.text


def parse_guard(text: str) -> tuple[str, str]:
    """`FLAG=ACTION` -> (flag, action); ValueError naming what is wrong."""
    flag, sep, action = text.partition("=")
    flag, action = flag.strip(), action.strip().lower()
    if not sep or not flag or not action:
        raise ValueError(f"{text!r}: expected FLAG=ACTION, e.g. truncation=stop")
    problem = rule_problem(flag, action)
    if problem:
        raise ValueError(problem)
    return flag, action


def rule_problem(flag: str, action: object) -> str:
    """What is wrong with `flag = action` ("" when nothing)."""
    if flag not in GUARDED:
        return f"unknown guard flag {flag!r}; known: {', '.join(GUARDED)}"
    if not isinstance(action, str) or action not in ACTIONS:
        return f"guard action {action!r} for {flag}: one of {', '.join(ACTIONS)}"
    return ""


def policy_of(table: object) -> tuple[dict[str, str], str]:
    """The config file's `[guard]` table as a policy, and what is wrong with it ("" when
    nothing; a wrong table gives no policy: a guard half read could act unasked)."""
    if not isinstance(table, Mapping):
        return {}, '[guard] must be a table of FLAG = "ACTION"'
    out = {}
    for flag, action in table.items():
        action = action.strip().lower() if isinstance(action, str) else action
        problem = rule_problem(str(flag), action)
        if problem:
            return {}, f"[guard] {problem}"
        out[str(flag)] = action
    return out, ""


def decide(run_key: str, flags: Iterable[HealthFlag], policy: Mapping[str, str],
           mode: GuardMode, done: Iterable[tuple[str, str]] = ()) -> list[GuardAct]:
    """The guard's acts for a run's newly said flags: one per flag the policy names and
    that was not acted on before for this run (`done`: (run key, flag) pairs). An acting
    action that the mode forbids becomes a notice that says why."""
    seen = set(done)
    out = []
    for flag in flags:
        action = policy.get(flag.flag)
        if action is None or (run_key, flag.flag) in seen:
            continue
        seen.add((run_key, flag.flag))
        if action in ACTING and not mode.may_act:
            why = "read-only" if mode.read_only else "a replay"
            out.append(GuardAct(run_key, flag, "notify", why_not=why))
            continue
        out.append(GuardAct(run_key, flag, action))
    return out


def guard_log_path() -> Path:
    """`$XDG_STATE_HOME/carl-tui/guard.log`, else `~/.local/state/carl-tui/guard.log`."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"),
                                                             ".local", "state")
    return Path(base) / "carl-tui" / "guard.log"


def write_audit(act: GuardAct, run_label: str, result: str, *, path: Path | None = None,
                now: float | None = None) -> dict:
    """Append one act to the audit log; the line written (as a dict)."""
    path = path or guard_log_path()
    t = time.time() if now is None else now
    line = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)),
        "run": act.run_key,
        "run_name": run_label,
        "flag": act.flag.flag,
        "from_step": act.flag.from_step,
        "seen_at": act.flag.seen_at,
        "evidence": act.flag.evidence.as_dict(),
        "action": act.action,
        "result": result,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(line, sort_keys=True) + "\n")
    return line


def acted_before(path: Path | None = None) -> set[tuple[str, str]]:
    """(run key, flag) pairs the audit log says a guard already acted on (stopped, or
    asked), by this dashboard or another one: a guard never acts twice."""
    path = path or guard_log_path()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return set()
    out = set()
    for text in lines:
        try:
            d = json.loads(text)
        except ValueError:
            continue
        if isinstance(d, dict) and d.get("action") in ACTING:
            out.add((str(d.get("run")), str(d.get("flag"))))
    return out
