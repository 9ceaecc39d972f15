"""A training run on this machine, as a child process the dashboard can stop.

The process runs in its own process group (so a stop reaches the trainer and
any worker it forked, and the terminal's Ctrl+C does not). Metrics go to the
JSONL stream the trainer writes (`--stream PATH`); its stdout and stderr go to
a log file next to the stream. Stopping sends SIGINT (the trainer saves and
exits), waits, then SIGTERM, then SIGKILL.

Outliving the dashboard. By default a run is independent: it keeps training
when the dashboard exits, however it exits (`LocalJob.outlives_dashboard` is
True; runs started with `l` are such runs, and `record_local_run` lists them
for the next dashboard). `LocalJob.start(..., tie_to_parent=True)` ties the run
to this process instead (the demo does): the child inherits the read end of a
pipe whose only write end this process holds, so when this process ends in
any way (quit, SIGHUP when the terminal closes, SIGTERM, SIGKILL, a crash) the
kernel closes it and the child reads end-of-file. A child that cooperates
calls `watch_parent(on_gone)` early: `on_gone` asks its trainer to stop at the
end of the current step, and if the process is still there `grace` seconds
later it exits anyway. On Linux the child also asks for SIGTERM when its
parent dies (`PR_SET_PDEATHSIG`; only when the run was started from the main
thread, since the kernel sends it when the starting thread ends).

The registry of runs started here is a JSON-lines file,
`$XDG_CACHE_HOME/carl-tui/local-runs.jsonl` (else `~/.cache/carl-tui/...`):
`record_local_run(...)` appends one, `list_local_runs()` reads them back with
whether each is still running (its pid is alive and has the start time that
was recorded, so a reused pid does not count).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from carl_tui.actions.action_error import ActionError
from carl_tui.actions.launch_spec import LaunchSpec
from carl_tui.events import Job, RunRef
from carl_tui.identity import local_run
from carl_tui.redact import redact_argv

RUNNING, STOPPING, COMPLETED, FAILED, CANCELED = (
    "running", "stopping", "completed", "failed", "canceled")
_STAGE = {RUNNING: "RUNNING", STOPPING: "RUNNING", COMPLETED: "COMPLETED", FAILED: "ERROR",
          CANCELED: "CANCELED"}


#: Environment of a tied child: the inherited pipe's read end, the parent's pid, and
#: "1" when the child should also ask for PR_SET_PDEATHSIG (Linux).
PARENT_FD_ENV = "CARL_TUI_PARENT_FD"
PARENT_PID_ENV = "CARL_TUI_PARENT_PID"
PARENT_DEATHSIG_ENV = "CARL_TUI_PARENT_DEATHSIG"


class LocalJob:
    """Start with `LocalJob.start(spec_or_argv, stream_path)`; `poll()`, `stop()`.

    `outlives_dashboard`: True for an independent run (the default: it keeps
    training when the dashboard exits); False for a run started with
    `tie_to_parent=True`, which stops when this process ends, however it ends.
    """

    def __init__(self, proc: subprocess.Popen, argv: list[str], stream_path: Path, log_path: Path,
                 *, tie_fd: int | None = None):
        self.proc = proc
        self.argv = argv
        self.stream_path = stream_path
        self.log_path = log_path
        self.started_at = time.time()
        self.ended_at: float | None = None  # when its end was first seen (epoch s)
        self.outlives_dashboard = tie_fd is None
        self._tie_fd = tie_fd  # the write end of the tie pipe (see the module docstring)
        self._stop_requested = False
        self._lock = threading.Lock()
        self._tie_lock = threading.Lock()

    @classmethod
    def start(
        cls,
        spec_or_argv: LaunchSpec | Sequence[str],
        stream_path: str | Path,
        *,
        log_path: str | Path | None = None,
        cwd: str | Path | None = None,
        env: Mapping[str, str] | None = None,
        tie_to_parent: bool = False,
    ) -> LocalJob:
        """Start the run. A `LaunchSpec` becomes `python -m carl_tui train ... --stream PATH`;
        an argv list is run as given (it should write its stream to `stream_path`).

        `tie_to_parent`: the run ends with this process (see the module docstring;
        the child must call `watch_parent`). Default: it may outlive the dashboard."""
        stream_path = Path(stream_path)
        argv = _command(spec_or_argv, stream_path)
        log = Path(log_path) if log_path else stream_path.with_suffix(".log")
        log_file = _open_log(stream_path, log)
        full_env, read_end, write_end = _child_env(env, tie_to_parent)
        try:
            proc = subprocess.Popen(
                argv,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=str(cwd) if cwd else None,
                env=full_env,
                start_new_session=True,  # own session and process group
                pass_fds=(read_end,) if read_end is not None else (),
            )
        except OSError as exc:
            if write_end is not None:
                os.close(write_end)
            raise ActionError(f"Cannot start {argv[0]}: {exc.strerror or exc}.",
                              kind="missing") from None
        finally:
            log_file.close()  # the child holds its own descriptor
            if read_end is not None:
                os.close(read_end)
        return cls(proc, argv, stream_path, log, tie_fd=write_end)

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
        if self.ended_at is None:
            self.ended_at = time.time()
        self._untie()
        if self._stop_requested:
            return CANCELED
        return COMPLETED if rc == 0 else FAILED

    def status_event(self, run: RunRef) -> Job:
        """The job of `run` (this process), as it stands now."""
        state = self.poll()
        msg = "" if self.returncode in (None, 0) else f"exit status {self.returncode}"
        return Job(run, f"local-{self.pid}", _STAGE[state], namespace=run.project,
                   name=run.label, flavor="local", message=msg, created_at=self.started_at,
                   started_at=self.started_at, finished_at=self.ended_at,
                   command=redact_argv(self.argv))

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
            steps = ((signal.SIGINT, grace), (signal.SIGTERM, term_grace), (signal.SIGKILL, 10.0))
            for sig, wait in steps:
                if not self._signal_group(sig):
                    break
                try:
                    self.proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
            self._reap_group()
            self._untie()
            return self.poll()

    def _untie(self) -> None:
        """Close the tie pipe once the child is gone (nothing reads it any more)."""
        with self._tie_lock:
            fd, self._tie_fd = self._tie_fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def record(self, name: str, *, path: str | Path | None = None) -> LocalRun:
        """Add this run to the registry of runs started on this machine."""
        return record_local_run(
            pid=self.pid, stream_path=self.stream_path, log_path=self.log_path, argv=self.argv,
            name=name, started_at=self.started_at, outlives_dashboard=self.outlives_dashboard,
            path=path,
        )

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


def _command(spec_or_argv: LaunchSpec | Sequence[str], stream_path: Path) -> list[str]:
    """The child's command line: a `LaunchSpec` as `python -m carl_tui train ... --stream
    PATH`, an argv list as given. Raises `ActionError` for an invalid spec or an empty argv."""
    if isinstance(spec_or_argv, LaunchSpec):
        problems = [p for p in spec_or_argv.with_(target="local").validate()]
        if problems:
            raise ActionError("Cannot start:\n- " + "\n- ".join(problems), kind="invalid")
        return spec_or_argv.with_(target="local").local_argv(str(stream_path))
    argv = [str(a) for a in spec_or_argv]
    if not argv:
        raise ActionError("Cannot start: the command is empty.", kind="invalid")
    return argv


def _open_log(stream_path: Path, log: Path):
    """The child's log file, opened for appending (its folder and the stream's made)."""
    try:
        stream_path.parent.mkdir(parents=True, exist_ok=True)
        log.parent.mkdir(parents=True, exist_ok=True)
        return open(log, "ab")  # the caller closes it once the child has it
    except OSError as exc:
        raise ActionError(f"Cannot start: cannot write {log} ({exc.strerror}).",
                          kind="missing") from None


def _child_env(
    env: Mapping[str, str] | None, tie_to_parent: bool
) -> tuple[dict[str, str], int | None, int | None]:
    """(the child's environment, the tie pipe's read end and write end, or None, None).

    A tie meant for this process is never passed on; a tied child gets the read end
    (both ends close on exec: the caller passes the read end on alone)."""
    full_env = dict(os.environ if env is None else env)
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    for key in (PARENT_FD_ENV, PARENT_PID_ENV, PARENT_DEATHSIG_ENV):
        full_env.pop(key, None)
    if not tie_to_parent:
        return full_env, None, None
    read_end, write_end = os.pipe()
    full_env[PARENT_FD_ENV] = str(read_end)
    full_env[PARENT_PID_ENV] = str(os.getpid())
    if threading.current_thread() is threading.main_thread():
        full_env[PARENT_DEATHSIG_ENV] = "1"
    return full_env, read_end, write_end


# -- the child's side of the tie ------------------------------------------------------

#: Exit status of a tied child that had to be ended `grace` seconds after its parent went.
EXIT_PARENT_GONE = 3

_PR_SET_PDEATHSIG = 1


def _set_parent_death_signal(sig: int) -> bool:
    """Linux: ask the kernel for `sig` when the parent (thread) ends. False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def watch_parent(
    on_gone: Callable[[], None],
    *,
    grace: float = 10.0,
    death_signal: int = signal.SIGHUP,
) -> bool:
    """In a child started with `LocalJob.start(..., tie_to_parent=True)`: call `on_gone()`
    once when the parent process ends (the tie pipe reads end-of-file, from a
    daemon thread); if the process still runs `grace` seconds later it exits
    with status `EXIT_PARENT_GONE`. `on_gone` should only ask for a stop.

    On Linux, when the parent said it is safe, it also asks the kernel for
    `death_signal` (SIGHUP: the parent hung up) when the parent dies, and
    handles that signal the same way (called from the main thread, the handler
    is installed here; from another thread, install one). Returns False (and
    does nothing) in a process that was not started tied."""
    raw_fd = os.environ.pop(PARENT_FD_ENV, None)
    raw_pid = os.environ.pop(PARENT_PID_ENV, None)
    deathsig = os.environ.pop(PARENT_DEATHSIG_ENV, None) == "1"
    try:
        fd = int(raw_fd) if raw_fd is not None else None
        parent = int(raw_pid) if raw_pid is not None else None
        if fd is not None:
            os.set_inheritable(fd, False)  # not passed on to this process's own children
    except (ValueError, OSError):
        fd = None
    if fd is None:
        return False
    fired = threading.Event()

    def gone() -> None:
        if fired.is_set():
            return
        fired.set()
        timer = threading.Timer(grace, os._exit, args=(EXIT_PARENT_GONE,))
        timer.daemon = True
        timer.start()
        on_gone()

    def watch() -> None:
        while True:
            try:
                data = os.read(fd, 512)
            except InterruptedError:
                continue
            except OSError:
                break
            if not data:
                break
        gone()

    if deathsig and threading.current_thread() is threading.main_thread():
        signal.signal(death_signal, lambda signum, frame: gone())
        if _set_parent_death_signal(death_signal) and parent is not None \
                and os.getppid() != parent:
            gone()  # the parent died before the request took effect
    threading.Thread(target=watch, name="carl-parent-watch", daemon=True).start()
    return True


# -- the registry of runs started on this machine --------------------------------------


@dataclass(frozen=True)
class LocalRun:
    """A run started on this machine, as recorded (`alive` is read when listed)."""

    pid: int
    started_at: float  # wall time the run started (epoch s)
    stream_path: Path
    log_path: Path
    argv: tuple[str, ...]
    name: str
    host: str
    outlives_dashboard: bool = True
    process_start: float | None = None  # the OS's start time of the pid (epoch s), if known
    alive: bool = False

    def job(self) -> Job:
        """This run as a line of the jobs list: RUNNING while its process lives, else
        ENDED (how it ended is not recorded)."""
        run = local_run(self.name, self.started_at, self.pid)
        return Job(run, f"local-{self.pid}", "RUNNING" if self.alive else "ENDED",
                   namespace=run.project, name=self.name, flavor="local",
                   created_at=self.started_at, started_at=self.started_at,
                   command=redact_argv(self.argv), label=f"{self.name} · {self.stream_path}")


def registry_path() -> Path:
    """`$XDG_CACHE_HOME/carl-tui/local-runs.jsonl`, else `~/.cache/carl-tui/local-runs.jsonl`."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".cache"
    return root / "carl-tui" / "local-runs.jsonl"


def process_start_time(pid: int) -> float | None:
    """When process `pid` started (epoch s, to 1/100 s), or None if unknown or gone."""
    try:
        import psutil  # lazy: psutil only to stop a job's process tree (an optional extra)
    except ImportError:
        psutil = None
    if psutil is not None:
        try:
            return float(psutil.Process(pid).create_time())
        except (psutil.Error, ValueError, OSError):
            return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _running(pid: int) -> bool:
    """The pid exists and is not a zombie."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process: it exists
    except OSError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        return True  # no /proc: the signal check is all there is


def _is_alive(run: LocalRun) -> bool:
    if not _running(run.pid):
        return False
    if run.process_start is None:
        return True
    now = process_start_time(run.pid)
    return now is None or abs(now - run.process_start) < 2.0


#: The registry is cut back to its newest entries when it grows past this many bytes.
REGISTRY_MAX_BYTES = 256 * 1024
REGISTRY_KEEP = 200


def record_local_run(
    *,
    pid: int,
    stream_path: str | Path,
    log_path: str | Path,
    argv: Sequence[str],
    name: str,
    started_at: float | None = None,
    outlives_dashboard: bool = True,
    path: str | Path | None = None,
) -> LocalRun:
    """Append a run to the registry (`registry_path()` unless `path`); returns it.
    Raises `ActionError` when the registry cannot be written."""
    run = LocalRun(
        pid=int(pid), started_at=float(time.time() if started_at is None else started_at),
        stream_path=Path(stream_path).resolve(), log_path=Path(log_path).resolve(),
        argv=tuple(str(a) for a in argv), name=str(name), host=socket.gethostname(),
        outlives_dashboard=bool(outlives_dashboard), process_start=process_start_time(int(pid)),
    )
    line = json.dumps({
        "pid": run.pid, "started_at": run.started_at, "process_start": run.process_start,
        "stream": str(run.stream_path), "log": str(run.log_path), "argv": list(run.argv),
        "name": run.name, "host": run.host, "outlives_dashboard": run.outlives_dashboard,
    }, separators=(",", ":")) + "\n"
    target = Path(path) if path is not None else registry_path()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        if size > REGISTRY_MAX_BYTES:
            _cut_registry(target)
    except OSError as exc:
        raise ActionError(f"Cannot record the run in {target}: {exc.strerror or exc}.",
                          kind="missing") from None
    return run


def _cut_registry(target: Path) -> None:
    """Keep the newest `REGISTRY_KEEP` lines (replace the file in one rename)."""
    lines = target.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text("".join(lines[-REGISTRY_KEEP:]), encoding="utf-8")
    os.replace(tmp, target)


def _parse_run(line: str) -> LocalRun | None:
    try:
        obj = json.loads(line)
        if not isinstance(obj, dict):
            return None
        argv = obj.get("argv") or []
        start = obj.get("process_start")
        return LocalRun(
            pid=int(obj["pid"]), started_at=float(obj["started_at"]),
            stream_path=Path(str(obj["stream"])), log_path=Path(str(obj["log"])),
            argv=tuple(str(a) for a in argv) if isinstance(argv, list) else (),
            name=str(obj.get("name") or ""), host=str(obj.get("host") or ""),
            outlives_dashboard=bool(obj.get("outlives_dashboard", True)),
            process_start=float(start) if isinstance(start, (int, float)) else None,
        )
    except (ValueError, TypeError, KeyError):
        return None


def list_local_runs(*, path: str | Path | None = None, all_hosts: bool = False) -> list[LocalRun]:
    """The runs in the registry, newest first, each with `alive` read now.

    Only runs recorded on this host (by name) unless `all_hosts` (a home folder
    shared between machines holds others' runs; their `alive` is always False).
    Lines that cannot be read are left out; a missing or unreadable registry
    lists nothing."""
    target = Path(path) if path is not None else registry_path()
    try:
        text = target.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    host = socket.gethostname()
    out: list[LocalRun] = []
    seen: set[tuple[str, int, float]] = set()  # a run recorded twice is listed once
    for line in reversed(text.splitlines()):
        run = _parse_run(line) if line.strip() else None
        if run is None or (run.host != host and not all_hosts):
            continue
        key = (run.host, run.pid, run.started_at)
        if key in seen:
            continue
        seen.add(key)
        alive = run.host == host and _is_alive(run)
        out.append(replace(run, alive=alive))
    return out
