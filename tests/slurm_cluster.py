"""A real single-node Slurm cluster for the tests: munged, slurmctld and slurmd from the
system's packages (Debian's `slurm-wlm` and `munge`; `make slurm` installs them), each a
child process of the tests with every file of its own in one temporary folder: its munge
key and socket, `slurm.conf`, state, spool, pid and log files. Nothing of the system's
(no /etc/slurm, no /run/munge, no systemd) is used or changed.

Every daemon runs as the user running the tests (`SlurmUser` and `SlurmdUser` are that
user: no root needed; the jobs run as that user too). The node is this machine as
`slurmd -C` describes it, with no cgroups
(`proctrack/linuxproc`, `task/none`), no accounting (`sacct` says it is disabled), and
finished jobs remembered for an hour (`MinJobAge`), so `squeue`/`scontrol` still tell
their end. The ports are free ones, so two suites may run at once. The commands reach
it through `SLURM_CONF` (`cluster.env`).

Run as a script, it starts a cluster, prints its `SLURM_CONF`, and stops it on Ctrl-C
(or SIGTERM).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.machine import free_port, skip_or_fail

DAEMONS = ("munged", "slurmctld", "slurmd")
COMMANDS = ("sbatch", "squeue", "scontrol", "scancel", "sinfo")
READY_S = 30.0  # the longest the node may take to be idle


def missing() -> str:
    """Why a real cluster cannot be started here ("" when it can)."""
    absent = [c for c in (*DAEMONS, *COMMANDS) if shutil.which(c) is None
              and not Path("/usr/sbin", c).exists()]
    if absent:
        return (f"no {', '.join(absent)} on PATH: `make slurm` installs Slurm and munge "
                "(Debian's slurm-wlm and munge packages)")
    return ""




def _binary(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def node_line(name: str) -> str:
    """This machine as a node of slurm.conf (`slurmd -C`), named `name`, on loopback."""
    out = subprocess.run([_binary("slurmd"), "-C"], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    words = [w for w in out.split("\n", 1)[0].split() if not w.startswith("NodeName=")]
    return f"NodeName={name} NodeAddr=127.0.0.1 {' '.join(words)} State=UNKNOWN"


@dataclass
class SlurmCluster:
    """One node, one partition (`PARTITION`), run from `root`."""

    root: Path
    partition: str = "carl"
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    setup_s: float = 0.0
    teardown_s: float = 0.0
    cpus: int = 0

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """The environment the Slurm commands need to reach this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def write_conf(self) -> None:
        r = self.root
        for d in ("state", "spool", "log"):
            (r / d).mkdir(parents=True, exist_ok=True)
        host = socket.gethostname().split(".")[0]
        user = pwd.getpwuid(os.geteuid()).pw_name
        node = node_line(host)
        self.cpus = int(node.split("CPUs=", 1)[1].split()[0])
        self.conf.write_text("\n".join([
            "ClusterName=carltest",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={free_port()}",
            f"SlurmdPort={free_port()}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={r / 'munge.sock'}",
            f"SlurmUser={user}",
            f"SlurmdUser={user}",
            f"StateSaveLocation={r / 'state'}",
            f"SlurmdSpoolDir={r / 'spool'}",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}",
            f"SlurmdPidFile={r / 'slurmd.pid'}",
            f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={r / 'log' / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "MpiDefault=none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/backfill",
            "ReturnToService=2",
            "MinJobAge=3600",
            node,
            f"PartitionName={self.partition} Nodes={host} Default=YES State=UP",
            "",
        ]))
        key = r / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)

    def _spawn(self, name: str, *args: str) -> None:
        log = open(self.root / "log" / f"{name}.out", "wb")  # noqa: SIM115 - the child's
        self.procs[name] = subprocess.Popen([_binary(name), *args], stdout=log,
                                            stderr=subprocess.STDOUT, env=self.env,
                                            start_new_session=True)
        log.close()

    def start(self) -> SlurmCluster:
        began = time.monotonic()
        self.write_conf()
        r = self.root
        self._spawn("munged", "-F", "--force", f"--socket={r / 'munge.sock'}",
                    f"--key-file={r / 'munge.key'}", f"--pid-file={r / 'munged.pid'}",
                    f"--log-file={r / 'log' / 'munged.log'}",
                    f"--seed-file={r / 'munge.seed'}")
        self._wait(lambda: (r / "munge.sock").exists(), "munged's socket")
        self._spawn("slurmctld", "-D", "-f", str(self.conf))
        self._spawn("slurmd", "-D", "-f", str(self.conf))
        self._wait(self._idle, "the node to be idle (sinfo)")
        self.setup_s = time.monotonic() - began
        return self

    def stop_controller(self) -> None:
        """slurmctld down (SIGTERM), the node and its jobs left running."""
        proc = self.procs["slurmctld"]
        proc.terminate()
        proc.wait(15)

    def start_controller(self) -> None:
        """slurmctld up again, from its saved state (its jobs as they were)."""
        self._spawn("slurmctld", "-D", "-f", str(self.conf))
        self._wait(lambda: self._node_state() not in ("", "down", "unknown"),
                   "the controller to answer again (sinfo)")

    def _node_state(self) -> str:
        out = subprocess.run(["sinfo", "-h", "-o", "%T"], check=False, capture_output=True,
                             text=True, env=self.env, timeout=10)
        return out.stdout.strip() if out.returncode == 0 else ""

    def _idle(self) -> bool:
        return self._node_state() == "idle"

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + READY_S
        while not ready():
            dead = [n for n, p in self.procs.items() if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                self.stop()
                why = f"{', '.join(dead)} exited" if dead else f"not within {READY_S:g} s"
                raise RuntimeError(f"Slurm did not start: waiting for {what}: {why}\n"
                                   + self.logs())
            time.sleep(0.1)

    def logs(self) -> str:
        """The daemons' own output, for a failure's message."""
        out = []
        for f in sorted((self.root / "log").glob("*")):
            lines = f.read_text(errors="replace").splitlines()[-15:]
            out.append(f"== {f.name}\n" + "\n".join(lines))
        return "\n".join(out)

    def _end_jobs(self) -> None:
        """Cancel every job left and wait (10 s at most) for their processes to end: a
        job's processes outlive slurmd (`proctrack/linuxproc` keeps them across a restart)."""
        run = {"capture_output": True, "text": True, "env": self.env, "timeout": 10}
        subprocess.run(["scancel", "--user", str(os.geteuid())], check=False, **run)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            out = subprocess.run(["squeue", "-h", "-t", "R,CG,CF,S", "-o", "%i"], check=False,
                                 **run)
            if out.returncode != 0 or not out.stdout.strip():
                return
            time.sleep(0.2)

    def stop(self) -> None:
        """Every job cancelled, then SIGTERM to each daemon (slurmd, slurmctld, munged: the
        reverse of their start), SIGKILL after 15 s."""
        began = time.monotonic()
        if self.procs.get("slurmctld") is not None and self.procs["slurmctld"].poll() is None:
            self._end_jobs()
        for name in reversed(list(self.procs)):
            proc = self.procs[name]
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        self.procs.clear()
        self.teardown_s = time.monotonic() - began


def cluster_fixture(tmp_path_factory, request):
    """A pytest fixture's body (each test module makes it one, `scope="module"`): the
    cluster up for the module's tests, its set-up and tear-down times said at the end.
    Without the packages the tests skip, saying why; under CI (CI set) they fail."""

    why = missing()
    if why:
        skip_or_fail("Slurm", why)
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm")).start()
    try:
        yield cluster
    finally:
        cluster.stop()
        plugins = request.config.pluginmanager
        reporter, capture = (plugins.get_plugin("terminalreporter"),
                             plugins.get_plugin("capturemanager"))
        if reporter is not None and capture is not None:
            with capture.global_and_fixture_disabled():
                reporter.write_line(f"\nslurm cluster ({request.module.__name__}): up in "
                                    f"{cluster.setup_s:.1f} s, down in "
                                    f"{cluster.teardown_s:.1f} s")


if __name__ == "__main__":
    import tempfile

    why = missing()
    if why:
        raise SystemExit(why)
    def interrupted(_signum, _frame):
        raise KeyboardInterrupt

    for signum in (signal.SIGINT, signal.SIGTERM):  # a shell's background job ignores SIGINT
        signal.signal(signum, interrupted)
    with tempfile.TemporaryDirectory(prefix="slurm-") as tmp:
        cluster = SlurmCluster(Path(tmp)).start()
        print(f"export SLURM_CONF={cluster.conf}   (ready in {cluster.setup_s:.1f} s; "
              "Ctrl-C stops it)", flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
        finally:
            cluster.stop()
            print(f"stopped in {cluster.teardown_s:.1f} s")
