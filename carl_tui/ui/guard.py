"""Guards on the dashboard: the user's policy (`[guard]` in the config file, `--guard
FLAG=ACTION`) applied to each health flag as the store says it (`actions/guard.py`
decides; this module acts).

`ask` opens the stop confirmation naming the flag and its evidence; `stop` stops the
run's job through the controller's stop paths (Hugging Face Jobs: cancel; a local run:
interrupt, then terminate) with no key pressed; `stop+push` pushes the last checkpoint
first. What a guard did is said on screen and written in the run's events (a `guard`
marker) and in the audit log; an act is never repeated for a run and flag, by this
dashboard or another one (the audit log says which were done).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from carl_tui.errors import describe
from carl_tui.events import Marker
from carl_tui.identity import REPLAY
from carl_tui.ui.attention import config_path
from carl_tui.ui.screens.confirm import ConfirmScreen
from carl_tui.ui.themes import toml_loads

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

    from textual.app import App

    from carl_tui.actions.guard import GuardAct
    from carl_tui.events import RunRef
    from carl_tui.store import RunSnapshot


def load_guard_policy(path: Path | None = None) -> tuple[dict[str, str], str]:
    """The config file's `[guard]` table, and a problem with it to tell ("" when none)."""
    # lazy: actions/guard.py loads the store (numpy): not before the first frame
    from carl_tui.actions.guard import policy_of

    path = path or config_path()
    if not path.exists():
        return {}, ""
    try:
        data = toml_loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return {}, f"{path}: {describe(exc)}; no guard"
    if "guard" not in data:
        return {}, ""
    policy, problem = policy_of(data["guard"])
    return policy, (f"{path}: {problem}; no guard" if problem else "")


def start_guard(app: App) -> GuardKeeper:
    """The app's guards: `--guard` over the config file's [guard] (the app starts them at
    the first update it raises; the flags said before it are kept for them:
    `RunStore.watch_flags`)."""
    policy, problem = load_guard_policy()
    if problem:
        app.notify(problem, severity="warning", timeout=10)
    policy.update(app.settings.guard or {})
    return GuardKeeper(app, policy, app.settings.read_only)


class GuardKeeper:
    """Applies the policy to the flags the store says (`check`, on the UI thread)."""

    def __init__(self, app: App, policy: dict[str, str], read_only: bool) -> None:
        # lazy: actions/guard.py loads the store (numpy): not before the first frame
        from carl_tui.actions.guard import acted_before

        self.app, self.policy, self.read_only = app, dict(policy), read_only
        self.done: set[tuple[str, str]] = acted_before() if policy else set()
        if policy:
            app.store.watch_flags()

    def check(self, snapshot: RunSnapshot | None = None, now: float = 0.0) -> None:
        """Act on the flags said since the last check; `snapshot` (the run on screen) at
        `now` adds its `stalled` flag, which needs the clock."""
        # lazy: actions/guard.py loads the store (numpy): not before the first frame
        from carl_tui.actions.guard import ACTING, GuardMode, decide

        if not self.policy:
            return
        pairs = list(self.app.store.take_flags())
        if snapshot is not None and "stalled" in self.policy:
            pairs += [(snapshot.run, f) for f in snapshot.health_at(now)
                      if f.flag == "stalled"]
        for run, flag in pairs:
            mode = GuardMode(read_only=self.read_only, replay=run.source == REPLAY)
            for act in decide(run.key, [flag], self.policy, mode, self.done):
                if act.action in ACTING:
                    self.done.add((run.key, flag.flag))
                self._act(run, act)

    def _act(self, run: RunRef, act: GuardAct) -> None:
        flag = act.flag
        said = (f"Guard: {flag.flag} on {run.label} since step {flag.from_step} (seen at "
                f"step {flag.seen_at}): {act.evidence}")
        if act.action == "notify":
            held = f" (not acted on: {act.why_not})" if act.why_not else ""
            self.app.notify(said + held, title="guard", severity="warning", timeout=10)
            return
        # lazy: actions/guard.py loads the store (numpy): not before the first frame
        from carl_tui.actions.guard import acted_before

        if (run.key, flag.flag) in acted_before():  # another dashboard did, since this began
            return
        why_not = self.app.controller.stoppable(run.key)
        if why_not:
            self._done(run, act, f"not stopped: {why_not}")
            return
        if act.action == "ask":
            self._ask(run, act, said)
            return
        self._stop(run, act)

    def _ask(self, run: RunRef, act: GuardAct, said: str) -> None:
        def answered(yes: bool | None) -> None:
            if yes:
                self._stop(run, act)
            else:
                self._done(run, act, "asked: the user kept it running")

        self.app.push_screen(ConfirmScreen(f"Guard: stop {run.label}?",
                                           f"{said}\n\nStop its job now?", "Stop"), answered)

    def _stop(self, run: RunRef, act: GuardAct) -> None:
        controller = self.app.controller

        def work() -> None:
            try:
                result = controller.guard_stop(run, push=act.action == "stop+push")
            except Exception as exc:  # noqa: BLE001  (said, logged: never a traceback)
                result = f"stop failed: {describe(exc)}"
            self.app.call_from_thread(self._done, run, act, result)

        self.app.run_worker(work, thread=True, group="guard", exit_on_error=False,
                            description=f"guard: stopping {run.label}")

    def _done(self, run: RunRef, act: GuardAct, result: str) -> None:
        """Said on screen (through the run's events) and written in the audit log."""
        # lazy: actions/guard.py loads the store (numpy): not before the first frame
        from carl_tui.actions.guard import write_audit

        try:
            write_audit(act, run.label, result)
        except OSError as exc:
            self.app.notify(f"guard log: {describe(exc)}", severity="error")
        text = (f"Guard ({act.action}) on {act.flag.flag} since step {act.flag.from_step}: "
                f"{result}. Why: {act.evidence}")
        self.app.follower.emit([Marker(run, "guard", act.flag.seen_at, {"text": text})])
