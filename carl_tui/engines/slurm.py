"""Slurm as a `JobEngine`, through the commands every cluster has.

`sbatch --parsable` submits a batch script (`batch_script`: the launch form shows it
before anything is sent), `squeue --json` lists the jobs (`squeue -o` where the version
has no --json), `scontrol show job -o` tells one job (its state, reason and real `StdOut`
path), `sacct --json` tells a job the controller has forgotten (where accounting is set
up), `scancel` stops one. Each command runs with a timeout; the cluster is the one the
commands reach (`SLURM_CONF`, else the system's).

Secrets: Slurm has no secrets store. A submission's secrets reach the job through the
environment of `sbatch` (Slurm copies the submitting environment into the job, as it
does for every variable of the user's shell): never in the script, on a command line or
in what `squeue`/`scontrol` print. A plain variable whose name says it is secret
(`HF_TOKEN` in `env`) is refused by `check`: the script, shown on screen, would hold it.
"""

from __future__ import annotations

import getpass
import os
import re
import shlex
import shutil
import subprocess
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path

import orjson

from carl_tui.engines.base import LogChunk, Submission
from carl_tui.engines.slurm_records import (
    SQUEUE_FORMAT,
    SlurmRecord,
    from_sacct_json,
    from_scontrol,
    from_squeue_format,
    from_squeue_json,
)
from carl_tui.errors import CarlError
from carl_tui.events import Job
from carl_tui.identity import SLURM_JOB
from carl_tui.redact import is_secret_key, redact

TIMEOUT_S = 30.0  # the longest a command may take (a busy controller answers slowly)
OPTIONS = ("partition", "account", "qos", "output")  # a Submission's Slurm options
_WORD = re.compile(r"^[A-Za-z0-9_.:+@-]+$")  # a job name, partition, account, qos
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
LOG_READ_BYTES = 8 << 20  # the most of a job's log one `log` call reads
COMMANDS_KEPT = 100


def slurm_time(seconds: int) -> str:
    """`--time` from seconds, rounded up to the minute Slurm counts in: D-HH:MM:SS."""
    minutes = -(-int(seconds) // 60)
    days, minutes = divmod(minutes, 24 * 60)
    return f"{days}-{minutes // 60:02d}:{minutes % 60:02d}:00"


def log_path(submission: Submission) -> str:
    """Where the job's log goes: the `output` option, else `carl-NAME-%j.out` in its
    working folder (absolute: `scontrol` then names the file the job writes)."""
    given = submission.options.get("output", "")
    folder = Path(submission.working_dir or os.getcwd())
    path = Path(given) if given else Path(f"carl-{submission.name}-%j.out")
    return str(path if path.is_absolute() else folder / path)


def labels_text(labels: Mapping[str, str]) -> str:
    """A job's labels as its Slurm comment: `key=value,key=value`."""
    return ",".join(f"{k}={v}" for k, v in labels.items())


def batch_script(submission: Submission) -> str:
    """The batch script `submit` sends, shown before submitting: the job's name,
    partition, GPUs (when asked), CPUs, time limit and log file as `#SBATCH` lines, the
    plain environment exported, and the command, each word shell-quoted; its labels are
    its comment. No secret is in
    it: those come from the environment of `sbatch`."""
    s = submission
    lines = ["#!/bin/bash", f"#SBATCH --job-name={s.name}"]
    for option in ("partition", "account", "qos"):
        if s.options.get(option):
            lines.append(f"#SBATCH --{option}={s.options[option]}")
    if s.gpus > 0:
        lines.append(f"#SBATCH --gpus={s.gpus}")
    lines.append(f"#SBATCH --cpus-per-task={s.cpus}")
    if s.time_limit_s:
        lines.append(f"#SBATCH --time={slurm_time(s.time_limit_s)}")
    lines.append(f"#SBATCH --output={log_path(s)}")
    if s.working_dir:
        lines.append(f"#SBATCH --chdir={s.working_dir}")
    if s.labels:  # `squeue` and `scontrol` tell them back: the jobs list shows them
        lines.append(f"#SBATCH --comment={labels_text(s.labels)}")
    lines.append("# written by carl-tui")
    if s.secrets:
        lines.append(f"# {', '.join(sorted(s.secrets))}: from the environment sbatch was "
                     "given (never written here)")
    lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(s.env.items())]
    lines.append(f"exec {shlex.join(s.command)}")
    return "\n".join(lines) + "\n"


class SlurmEngine:
    """The cluster `sbatch`, `squeue`, `scontrol` and `scancel` reach from here. `user`:
    whose jobs `jobs` lists (default: yours; "*" every user's)."""

    kind = SLURM_JOB

    def __init__(self, user: str | None = None, *, timeout_s: float = TIMEOUT_S,
                 env: Mapping[str, str] | None = None, squeue_json: bool | None = None):
        self.user = user if user is not None else _whoami()
        self.timeout_s = timeout_s
        self.env = dict(env) if env is not None else None  # the commands' (None: ours)
        self.squeue_json = squeue_json  # None: tried first, then `squeue -o` if refused
        # the last command lines run (what was sent), for the tests and a bug report
        self.commands: deque[tuple[str, ...]] = deque(maxlen=COMMANDS_KEPT)

    def __repr__(self) -> str:
        return f"SlurmEngine(user={self.user!r})"

    # -- running a command --------------------------------------------------------------

    def run(self, *argv: str, env: Mapping[str, str] | None = None,
            stdin: str | None = None) -> subprocess.CompletedProcess:
        """One Slurm command; a missing command or a timeout is a `CarlError` saying so."""
        base = dict(self.env if self.env is not None else os.environ)
        exe = shutil.which(argv[0], path=base.get("PATH"))
        if exe is None:
            raise CarlError(f"no {argv[0]} on PATH: carl-tui drives Slurm through its "
                            "commands; run it on a login node", retry=False, kind="usage")
        self.commands.append(tuple(argv))
        try:
            return subprocess.run([exe, *argv[1:]], check=False, capture_output=True, text=True,
                                  input=stdin, timeout=self.timeout_s,
                                  env={**base, **(env or {})})
        except subprocess.TimeoutExpired:
            raise CarlError(f"{argv[0]} did not answer within {self.timeout_s:g} s (is the "
                            "controller up? `sinfo` says)", kind="network") from None
        except OSError as exc:
            raise CarlError(f"{argv[0]}: {exc.strerror or exc}", retry=False) from None

    def _checked(self, *argv: str, **kw) -> str:
        done = self.run(*argv, **kw)
        if done.returncode != 0:
            raise CarlError(_said(argv[0], done), kind="invalid")
        return done.stdout

    # -- the interface ------------------------------------------------------------------

    def describe(self) -> str:
        conf = (self.env or os.environ).get("SLURM_CONF")
        return f"Slurm cluster ({conf})" if conf else "Slurm cluster"

    def check(self, submission: Submission) -> list[str]:
        s, problems = submission, []
        if not _WORD.match(s.name or ""):
            problems.append("the job's name is letters, digits and _.:+@- (no spaces)")
        if not s.command or not all(isinstance(w, str) and w for w in s.command):
            problems.append("the job needs a command")
        if s.gpus < 0 or s.cpus < 1:
            problems.append("GPUs are 0 or more, CPUs 1 or more")
        if s.time_limit_s is not None and s.time_limit_s <= 0:
            problems.append("the time limit is a number of seconds > 0")
        for key, value in s.options.items():
            if key not in OPTIONS:
                problems.append(f"{key!r} is not a Slurm option here ({', '.join(OPTIONS)})")
            elif key != "output" and not _WORD.match(value or ""):
                problems.append(f"the {key} is letters, digits and _.:+@-")
            elif key == "output" and ("\n" in value or not value.strip()):
                problems.append("the log file is one line")
        for key, value in s.labels.items():
            if not (_WORD.match(key) and _WORD.match(value)) or "=" in key:
                problems.append(f"the label {key}={value} is letters, digits and _.:+@-")
        for name in (*s.env, *s.secrets):
            if not _ENV_NAME.match(name):
                problems.append(f"{name!r} is not an environment variable's name")
        problems += [f"{name} is a secret: give it as a secret (the script shows plain "
                     "variables)" for name in s.env if is_secret_key(name)]
        if any("\n" in w for w in (s.working_dir, *s.command)):
            problems.append("a command word or the working folder holds a line break")
        return problems

    def submit(self, submission: Submission) -> Job:
        problems = self.check(submission)
        if problems:
            raise CarlError("; ".join(problems), retry=False, kind="invalid")
        out = self._checked("sbatch", "--parsable", stdin=batch_script(submission),
                            env=dict(submission.secrets))
        job_id = out.strip().split(";", 1)[0]  # "ID" or "ID;cluster"
        if not job_id.isdigit():
            raise CarlError(f"sbatch: no job id in its answer: {_first_line(out)}")
        return self.job(job_id)

    def jobs(self) -> list[Job]:
        return [r.job() for r in self.records()]

    def records(self) -> list[SlurmRecord]:
        """Every job `squeue` knows of `user` (the finished ones while the controller
        remembers them, `MinJobAge`), newest first. A `squeue --json` that ignores
        `--user` (22.05's lists every user's jobs: megabytes on a big cluster, every
        refresh) is not asked again: `squeue -o` filters on the controller."""
        who = [] if self.user == "*" else ["--user", self.user]
        records = None
        if self.squeue_json is not False:
            done = self.run("squeue", "--json", *who)
            if done.returncode == 0:
                self.squeue_json = True
                records = from_squeue_json(_json(done.stdout, "squeue --json"))
            elif self.squeue_json or "json" not in (done.stderr or ""):
                raise CarlError(_said("squeue", done))
            else:
                self.squeue_json = False  # an older Slurm: no --json
        if records is None:
            records = from_squeue_format(self._checked(
                "squeue", "-h", "-t", "all", "-o", SQUEUE_FORMAT, *who))
        if self.user != "*":
            mine = [r for r in records if r.user == self.user]
            if len(mine) < len(records):
                self.squeue_json = False  # its --json ignored --user
            records = mine
        return sorted(records, key=lambda r: int(r.job_id) if r.job_id.isdigit() else 0,
                      reverse=True)

    def record(self, job_id: str) -> SlurmRecord:
        """One job as `scontrol` tells it, else as accounting does (`sacct`, where it is
        set up); a job neither knows is a `CarlError` (kind "not_found")."""
        job_id = str(job_id).strip()
        if not job_id.replace("_", "").isdigit():
            raise CarlError(f"{job_id!r} is not a Slurm job id (a number: `squeue` lists "
                            "them)", retry=False, kind="usage")
        done = self.run("scontrol", "show", "job", "-o", job_id)
        found = from_scontrol(done.stdout) if done.returncode == 0 else []
        if found:
            return found[0]
        said = _said("scontrol", done)
        if "Invalid job id" not in said:
            raise CarlError(said)
        acct = self.run("sacct", "--json", "-j", job_id)
        found = (from_sacct_json(_json(acct.stdout, "sacct --json"))
                 if acct.returncode == 0 else [])
        if found:
            return found[0]
        raise CarlError(f"Slurm knows no job {job_id} (the controller forgets a finished "
                        "job after MinJobAge; sacct: "
                        f"{_first_line(acct.stderr or acct.stdout) or 'no record'})",
                        retry=False, kind="not_found")

    def job(self, job_id: str) -> Job:
        return self.record(job_id).job()

    def log(self, job_id: str, offset: int = 0) -> LogChunk:
        """The job's `StdOut` file from byte `offset` on, to its last whole line."""
        path = self.record(job_id).stdout
        if not path:
            return LogChunk("", offset)
        try:
            with open(path, "rb") as fh:
                fh.seek(offset)
                data = fh.read(LOG_READ_BYTES)
        except FileNotFoundError:
            return LogChunk("", offset)  # not written yet (a pending job)
        except OSError as exc:
            raise CarlError(f"the log of job {job_id}: {path}: {exc.strerror}") from None
        whole = data[:data.rfind(b"\n") + 1]
        return LogChunk(whole.decode("utf-8", "replace"), offset + len(whole))

    def stop(self, job_id: str) -> Job:
        self.record(job_id)  # an unknown id is said as such, not as scancel's words
        self._checked("scancel", str(job_id))
        return self.job(job_id)


def _whoami() -> str:
    """The name Slurm knows this process's user by (its uid's, not $USER's)."""
    try:
        import pwd  # lazy: Unix only (as Slurm is); the module imports anywhere

        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError):
        return getpass.getuser()


def _json(text: str, what: str) -> object:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        raise CarlError(f"{what}: not JSON: {_first_line(text)}") from None


def _said(command: str, done: subprocess.CompletedProcess) -> str:
    """What a failed command said, in one line that names it once."""
    line = _first_line(done.stderr or done.stdout) or f"exit status {done.returncode}"
    return line if line.startswith(f"{command}:") else f"{command}: {line}"


def _first_line(text: str) -> str:
    lines: Sequence[str] = [t.strip() for t in (text or "").splitlines() if t.strip()]
    return redact(lines[0][:300]) if lines else ""
