"""What Slurm's commands print, read into one record per job, and a record as a `Job`.

Three shapes, one record (`SlurmRecord`):

- `squeue --json` (Slurm 21.08 on): `{"jobs": [...]}`; in 22.05 a job's `job_state` is a
  word and its times are epoch seconds (0: not yet), in 23.02 on `job_state` is a list of
  words and times and exit codes are `{"set": bool, "number": int}` objects. 22.05's
  `standard_output` is the unexpanded pattern (`out-%j.log`), so a job's log path is read
  from `scontrol show job`. Older versions have no `--json`: then `squeue -o` with
  `SQUEUE_FORMAT` (fields apart by `FIELD_SEP`).
- `scontrol show job -o ID`: one line of `Key=Value` words (`JobState=PENDING
  Reason=Resources ... StdOut=/path/out-12.log`), times as local `YYYY-MM-DDTHH:MM:SS`.
- `sacct --json` (where accounting is set up): `state.current`, `time.{submission,start,
  end}`; no log path.

A job's stage is the dashboard's word (`STAGES`: PENDING -> SCHEDULING, RUNNING and
COMPLETING -> RUNNING, COMPLETED, FAILED/TIMEOUT/OUT_OF_MEMORY/NODE_FAIL/... -> ERROR,
CANCELLED -> CANCELED); Slurm's own word and a pending job's reason are its message:
"PENDING (Resources)", "FAILED (NonZeroExitCode, exit 1)".
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from carl_tui.events import Job
from carl_tui.identity import slurm_run
from carl_tui.redact import redact

#: Slurm's job states -> the dashboard's stage words (`events.STAGE_LIFE`).
STAGES = {
    "PENDING": "SCHEDULING",
    "CONFIGURING": "SCHEDULING",
    "REQUEUED": "SCHEDULING",
    "REQUEUE_HOLD": "SCHEDULING",
    "REQUEUE_FED": "SCHEDULING",
    "RESV_DEL_HOLD": "SCHEDULING",
    "RUNNING": "RUNNING",
    "COMPLETING": "RUNNING",
    "STAGE_OUT": "RUNNING",
    "SIGNALING": "RUNNING",
    "RESIZING": "RUNNING",
    "SUSPENDED": "RUNNING",
    "STOPPED": "RUNNING",
    "COMPLETED": "COMPLETED",
    "FAILED": "ERROR",
    "TIMEOUT": "ERROR",
    "OUT_OF_MEMORY": "ERROR",
    "NODE_FAIL": "ERROR",
    "BOOT_FAIL": "ERROR",
    "DEADLINE": "ERROR",
    "PREEMPTED": "ERROR",
    "SPECIAL_EXIT": "ERROR",
    "CANCELLED": "CANCELED",
    "REVOKED": "CANCELED",
}

#: `squeue -o` fields (versions without --json): id, state, reason, name, user,
#: partition, submit, start, end, command, work dir (no exit code, no log path).
FIELD_SEP = "\x1f"
SQUEUE_FORMAT = FIELD_SEP.join(["%i", "%T", "%r", "%j", "%u", "%P", "%V", "%S", "%e", "%o",
                                "%Z"])
_FORMAT_KEYS = ("job_id", "state", "reason", "name", "user", "partition", "submit", "start",
                "end", "command", "workdir")


@dataclass(frozen=True)
class SlurmRecord:
    """One job as Slurm's commands tell it (times: epoch seconds, None when not yet)."""

    job_id: str
    state: str
    reason: str = ""
    name: str = ""
    user: str = ""
    partition: str = ""
    submitted: float | None = None
    started: float | None = None
    ended: float | None = None
    stdout: str = ""
    command: str = ""
    workdir: str = ""
    exit_code: int | None = None
    comment: str = ""  # the labels carl-tui gave it (`key=value,...`), or the user's comment

    @property
    def stage(self) -> str:
        """The dashboard's word; a state this does not know is still running."""
        return STAGES.get(self.state, "RUNNING")

    @property
    def message(self) -> str:
        """Slurm's own word, with a pending job's reason and a failed job's exit code."""
        said = self.reason not in ("", "None", "(null)") and self.stage not in (
            "COMPLETED", "CANCELED")  # a job cancelled while pending keeps its reason
        why = [self.reason] if said else []
        if self.exit_code and self.stage == "ERROR":
            why.append(f"exit {self.exit_code}")
        return f"{self.state} ({', '.join(why)})" if why else self.state

    def job(self) -> Job:
        ended = STAGES.get(self.state) in ("COMPLETED", "ERROR", "CANCELED")
        return Job(
            run=slurm_run(self.user, self.job_id, self.name), job_id=self.job_id, stage=self.stage,
            namespace=self.user, name=self.name, message=self.message,
            created_at=self.submitted, started_at=self.started,
            finished_at=(self.ended or self.started) if ended else None,
            command=(self.command,) if self.command else (),
            label=redact(self.comment) or self.name,
        )


# -- squeue --json ---------------------------------------------------------------------


def _number(value: Any) -> float | None:
    """A time or count of either shape: a number (22.05), or `{"set", "number"}` (23.02 on);
    0 and unset are None."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return None
    return float(value)


def _state(value: Any) -> str:
    """`job_state`: a word, or a list of words whose first is the base state."""
    if isinstance(value, list):
        value = value[0] if value else ""
    return str(value or "").upper()


def _exit(value: Any) -> int | None:
    """`exit_code`: the wait status as a number (22.05: its high byte is the exit code,
    a signal in its low bits), or `{"return_code": N or {"number": N}, ...}` (sacct,
    23.02 on)."""
    if isinstance(value, dict):
        code = _number(value.get("return_code"))
        return int(code) if code is not None else None
    if isinstance(value, int) and not isinstance(value, bool):
        return value >> 8
    return None


def from_squeue_json(data: Any) -> list[SlurmRecord]:
    """Every job of `squeue --json`'s reply (entries that are not jobs are left out)."""
    jobs = data.get("jobs") if isinstance(data, dict) else None
    out = []
    for j in jobs if isinstance(jobs, list) else []:
        if not isinstance(j, dict) or j.get("job_id") is None:
            continue
        out.append(SlurmRecord(
            job_id=str(j["job_id"]), state=_state(j.get("job_state")),
            reason=str(j.get("state_reason") or ""), name=str(j.get("name") or ""),
            user=str(j.get("user_name") or ""), partition=str(j.get("partition") or ""),
            submitted=_number(j.get("submit_time")), started=_number(j.get("start_time")),
            ended=_number(j.get("end_time")),
            stdout="" if "%" in str(j.get("standard_output") or "")
            else str(j.get("standard_output") or ""),
            command=str(j.get("command") or ""),
            workdir=str(j.get("current_working_directory") or ""),
            exit_code=_exit(j.get("exit_code")), comment=str(j.get("comment") or ""),
        ))
    return out


# -- squeue -o, scontrol show job -o ---------------------------------------------------


def _clock(text: str) -> float | None:
    """A local `YYYY-MM-DDTHH:MM:SS`; "Unknown", "None", "N/A" -> None."""
    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def from_squeue_format(text: str) -> list[SlurmRecord]:
    """Jobs of `squeue -h -o SQUEUE_FORMAT` (a line each)."""
    out = []
    for line in text.splitlines():
        parts = line.split(FIELD_SEP)
        if len(parts) != len(_FORMAT_KEYS) or not parts[0].strip():
            continue
        f = dict(zip(_FORMAT_KEYS, (p.strip() for p in parts)))
        out.append(SlurmRecord(
            job_id=f["job_id"], state=f["state"].upper(), reason=f["reason"], name=f["name"],
            user=f["user"], partition=f["partition"], submitted=_clock(f["submit"]),
            started=_clock(f["start"]), ended=_clock(f["end"]), command=_null(f["command"]),
            workdir=_null(f["workdir"]),
        ))
    return out


#: A word of `scontrol -o` output: `Key=` starts it (values may hold spaces: a command's).
_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z/:_]*)=")


def scontrol_fields(line: str) -> dict[str, str]:
    """`Key=Value` words of one `scontrol show job -o` line."""
    marks = list(_KEY.finditer(line))
    fields = {}
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(line)
        fields.setdefault(m.group(1), line[m.end():end].strip())
    return fields


def from_scontrol(text: str) -> list[SlurmRecord]:
    """Jobs of `scontrol show job -o` (a line each)."""
    out = []
    for line in text.splitlines():
        f = scontrol_fields(line)
        if "JobId" not in f:
            continue
        user = f.get("UserId", "").split("(", 1)[0]
        exit_code = f.get("ExitCode", "").split(":", 1)[0]
        out.append(SlurmRecord(
            job_id=f["JobId"], state=f.get("JobState", "").upper(),
            reason=f.get("Reason", ""), name=f.get("JobName", ""), user=user,
            partition=f.get("Partition", ""), submitted=_clock(f.get("SubmitTime", "")),
            started=_clock(f.get("StartTime", "")), ended=_clock(f.get("EndTime", "")),
            stdout=f.get("StdOut", ""), command=_null(f.get("Command", "")),
            workdir=_null(f.get("WorkDir", "")),
            exit_code=int(exit_code) if exit_code.isdigit() else None,
            comment=_null(f.get("Comment", "")),
        ))
    return out


def _null(text: str) -> str:
    return "" if text == "(null)" else text


# -- sacct --json ----------------------------------------------------------------------


def from_sacct_json(data: Any) -> list[SlurmRecord]:
    """Jobs of `sacct --json` (accounting): `state.current`, `time.*`, no log path."""
    jobs = data.get("jobs") if isinstance(data, dict) else None
    out = []
    for j in jobs if isinstance(jobs, list) else []:
        if not isinstance(j, dict) or j.get("job_id") is None:
            continue
        state = j.get("state") if isinstance(j.get("state"), dict) else {}
        times = j.get("time") if isinstance(j.get("time"), dict) else {}
        out.append(SlurmRecord(
            job_id=str(j["job_id"]), state=_state(state.get("current")),
            reason=str(state.get("reason") or ""), name=str(j.get("name") or ""),
            user=str(j.get("user") or ""), partition=str(j.get("partition") or ""),
            submitted=_number(times.get("submission")), started=_number(times.get("start")),
            ended=_number(times.get("end")), workdir=str(j.get("working_directory") or ""),
            exit_code=_exit(j.get("exit_code")),
        ))
    return out
