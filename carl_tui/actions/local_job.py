"""A training run on this machine, as a child process the dashboard can stop.

The process runs in its own process group (so a stop reaches the trainer and
any worker it forked, and the terminal's Ctrl+C does not). Metrics go to the
JSONL stream the trainer writes (`--stream PATH`); its stdout and stderr go to
a log file next to the stream. Stopping sends SIGINT (the trainer saves and
exits), waits, then SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from carl_tui.actions.errors import ActionError
from carl_tui.actions.launch_spec import LaunchSpec
from carl_tui.events import JobStatus, RunRef

RUNNING, STOPPING, COMPLETED, FAILED, CANCELED = "running", "stopping", "completed", "failed", "canceled"
_STAGE = {RUNNING: "RUNNING", STOPPING: "RUNNING", COMPLETED: "COMPLETED", FAILED: "ERROR",
          CANCELED: "CANCELED"}


class LocalJob:
    """Start with `LocalJob.start(spec_or_argv, stream_path)`; `poll()`, `stop()`."""

    def __init__(self, proc: subprocess.Popen, argv: list[str], stream_path: Path, log_path: Path):
        self.proc = proc
        self.argv = argv
        self.stream_path = stream_path
        self.log_path = log_path
        self.started_at = time.time()
        self._stop_requested = False
        self._lock = threading.Lock()

    @classmethod
    def start(
        cls,
        spec_or_argv: LaunchSpec | Sequence[str],
        stream_path: str | Path,
        *,
        log_path: str | Path | None = None,
        cwd: str | Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> LocalJob:
        """Start the run. A `LaunchSpec` becomes `python -m carl_tui train ... --stream PATH`;
        an argv list is run as given (it should write its stream to `stream_path`)."""
        stream_path = Path(stream_path)
        if isinstance(spec_or_argv, LaunchSpec):
            problems = [p for p in spec_or_argv.with_(target="local").validate()]
            if problems:
                raise ActionError("Cannot start:\n- " + "\n- ".join(problems), kind="invalid")
            argv = spec_or_argv.with_(target="local").local_argv(str(stream_path))
        else:
            argv = [str(a) for a in spec_or_argv]
            if not argv:
                raise ActionError("Cannot start: the command is empty.", kind="invalid")
        log = Path(log_path) if log_path else stream_path.with_suffix(".log")
        try:
            stream_path.parent.mkdir(parents=True, exist_ok=True)
            log.parent.mkdir(parents=True, exist_ok=True)
            log_file = open(log, "ab")  # noqa: SIM115  (closed below, once the child has it)
        except OSError as exc:
            raise ActionError(f"Cannot start: cannot write {log} ({exc.strerror}).", kind="missing") from None
        full_env = dict(os.environ if env is None else env)
        full_env.setdefault("PYTHONUNBUFFERED", "1")
        try:
            proc = subprocess.Popen(
                argv,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=str(cwd) if cwd else None,
                env=full_env,
                start_new_session=True,  # own session and process group
            )
        except OSError as exc:
            raise ActionError(f"Cannot start {argv[0]}: {exc.strerror or exc}.", kind="missing") from None
        finally:
            log_file.close()  # the child holds its own descriptor
        return cls(proc, argv, stream_path, log)

    # -- state ---------------------------------------------------------------

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def poll(self) -> str:
        """"running", "stopping", "completed", "failed" or "canceled"."""
        rc = self.proc.poll()
        if rc is None:
            return STOPPING if self._stop_requested else RUNNING
        if self._stop_requested:
            return CANCELED
        return COMPLETED if rc == 0 else FAILED

    def status_event(self, run: RunRef) -> JobStatus:
        state = self.poll()
        msg = "" if self.returncode in (None, 0) else f"exit status {self.returncode}"
        return JobStatus(run, f"local-{self.pid}", _STAGE[state], flavor="local", message=msg,
                         created_at=self.started_at)

    # -- stopping ------------------------------------------------------------

    def _signal_group(self, sig: int) -> bool:
        try:
            os.killpg(self.proc.pid, sig)
            return True
        except ProcessLookupError:
            return False

    def stop(self, grace: float = 30.0, term_grace: float = 10.0) -> str:
        """Interrupt (SIGINT), wait `grace` s; terminate (SIGTERM), wait `term_grace` s;
        then kill (SIGKILL). Blocking: call from a worker thread. Returns the final state."""
        with self._lock:
            if self.proc.poll() is not None:
                return self.poll()
            self._stop_requested = True
            for sig, wait in ((signal.SIGINT, grace), (signal.SIGTERM, term_grace), (signal.SIGKILL, 10.0)):
                if not self._signal_group(sig):
                    break
                try:
                    self.proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
            self._reap_group()
            return self.poll()

    def _reap_group(self) -> None:
        """Leave no stray worker of the group behind (e.g. dataloader children)."""
        try:
            os.killpg(self.proc.pid, 0)
        except (ProcessLookupError, PermissionError):
            return
        self._signal_group(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> str:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        return self.poll()
