"""What to train and where: the launch form's values, checked and turned into commands.

`LaunchSpec.validate()` lists every problem in plain words before anything is
sent. `to_train_args()` is the `carl-tui train ...` command line;
`job_command()` is the command a Hugging Face Job runs (a `uv run` that
installs carl-tui with its training extra, trains, and pushes the result);
`submission()` is what a cluster engine runs (`engines.base.Submission`: a Ray job's
entrypoint or a Slurm batch script's command, `python -m carl_tui train ...` printing
the Trainer's log to stdout).
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from dataclasses import dataclass, field, replace
from typing import Literal

from carl_tui.engines.base import Submission
from carl_tui.engines.slurm import SlurmEngine
from carl_tui.errors import CarlError

Target = Literal["hf-jobs", "local", "ray", "slurm"]
TARGETS = ("hf-jobs", "local", "ray", "slurm")
CLUSTER_TARGETS = ("ray", "slurm")  # run by a `JobEngine` (actions/engines.py)
MAX_GPUS = 1024
Method = Literal["sft", "grpo"]

DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
DEFAULT_DATASET = "trl-lib/DeepMath-103K"
DEFAULT_FLAVOR = "a10g-small"
DEFAULT_TIMEOUT = "2h"
# Image with uv and Python 3.12: the same default `run_uv_job` uses.
JOB_IMAGE = "ghcr.io/astral-sh/uv:python3.12-bookworm"
# What the job installs to get carl-tui's training code. A git URL works too:
# "carl-tui[train,hub] @ git+https://github.com/OWNER/carl-tui".
DEFAULT_PACKAGE_SPEC = "carl-tui[train,hub,trackio]"
JOB_OUTPUT_DIR = "/tmp/carl-output"
JOB_STREAM_PATH = "/tmp/carl-output/stream.jsonl"

_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.\-]{0,95}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,95}$")
_TIMEOUT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_FLAVOR = re.compile(r"^[a-z0-9][a-z0-9\-]*$")
_MULTI = re.compile(r"x(\d+)$")
_TIMEOUT_FACTORS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_TIMEOUT_S = 7 * 86400


def timeout_seconds(timeout: str | float) -> int | None:
    """'90m' -> 5400, '2h' -> 7200, 300 -> 300; None when it does not parse."""
    if isinstance(timeout, bool):
        return None
    if isinstance(timeout, (int, float)):
        return int(timeout) if timeout > 0 else None
    m = _TIMEOUT.match(str(timeout))
    if not m:
        return None
    return int(float(m.group(1)) * _TIMEOUT_FACTORS[m.group(2)])


def gpus_in_flavor(flavor: str) -> int:
    """GPUs of a Jobs hardware flavor, read from its name: 'a10g-largex4' -> 4, 'l4x1' -> 1,
    'a10g-small' -> 1, 'cpu-basic' -> 0."""
    if flavor.startswith("cpu"):
        return 0
    m = _MULTI.search(flavor)
    return int(m.group(1)) if m else 1


@dataclass(frozen=True)
class LaunchSpec:
    """The launch form. Defaults make a small GRPO run with the CARL reward on."""

    model: str = DEFAULT_MODEL
    dataset: str = DEFAULT_DATASET
    method: str = "grpo"
    max_steps: int = 500
    learning_rate: float = 1e-6
    num_generations: int = 8
    carl: bool = True
    output_repo: str = ""  # "user/name": where the trained model is pushed (private)
    flavor: str = DEFAULT_FLAVOR
    timeout: str = DEFAULT_TIMEOUT
    trackio_space: str = ""  # "user/space": live metrics in a Trackio Space
    target: str = "hf-jobs"
    namespace: str = ""  # where the job runs; empty: the token's user
    run_name: str = ""
    output_dir: str = "runs/carl"  # local target only; jobs write to JOB_OUTPUT_DIR
    num_processes: int = 0  # 0: one per GPU of the flavor (jobs), 1 (local)
    ray_address: str = ""  # the Ray dashboard (ray target); empty: $RAY_ADDRESS or local
    num_gpus: int = 0  # a cluster job's GPU request (`--gpus N`; ray and slurm)
    partition: str = ""  # the Slurm partition (slurm target); empty: the cluster's default
    package_spec: str = DEFAULT_PACKAGE_SPEC
    extra_args: tuple[str, ...] = field(default_factory=tuple)

    # -- checking ------------------------------------------------------------

    def validate(self, *, flavors: list[str] | None = None) -> list[str]:
        """Every problem with the spec, each a sentence for the user; empty when fine.

        `flavors` is the list of hardware names the Hub offers, when known.
        """
        p: list[str] = []
        if self.target not in TARGETS:
            p.append(f"Target must be one of {', '.join(TARGETS)}, not {self.target!r}.")
        p += self._training_problems()
        p += self._name_problems()
        if self.num_processes < 0:
            p.append("Number of processes cannot be negative.")
        if self.target == "hf-jobs":
            p += self._job_problems(flavors)
        if self.target in CLUSTER_TARGETS:
            p += self._cluster_problems()
        return p

    def _cluster_problems(self) -> list[str]:
        """A cluster job's GPU request and where the cluster is."""
        p: list[str] = []
        n = self.num_gpus
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            p.append(f"GPUs must be a whole number of 0 or more (got {n!r}).")
        elif n > MAX_GPUS:
            p.append(f"{n} GPUs for one job is more than {MAX_GPUS}: is that a typo?")
        if self.target == "ray":
            from carl_tui.engines.ray import dashboard_url  # lazy: httpx, only for a Ray launch

            try:
                dashboard_url(self.ray_address or None)
            except CarlError as exc:
                p.append(f"Ray address: {exc}.")
        if self.target == "slurm" and not p:
            p += _slurm_problems(self)
        return p

    def _training_problems(self) -> list[str]:
        """Model, dataset, method, steps, learning rate and generations."""
        p: list[str] = []
        if not self.model.strip():
            p.append("Model is empty: give a Hub model id such as Qwen/Qwen2.5-0.5B-Instruct.")
        elif " " in self.model.strip():
            p.append(f"Model {self.model!r} contains spaces: give a Hub model id or a local path.")
        if not self.dataset.strip():
            p.append("Dataset is empty: give a Hub dataset id such as trl-lib/DeepMath-103K.")
        elif " " in self.dataset.strip():
            p.append(f"Dataset {self.dataset!r} contains spaces: "
                     "give a Hub dataset id or a local path.")
        if self.method not in ("sft", "grpo"):
            p.append(f"Method must be 'sft' or 'grpo', not {self.method!r}.")
        steps = self.max_steps
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
            p.append(f"Max steps must be a whole number of at least 1 (got {steps!r}).")
        elif steps > 1_000_000:
            p.append(f"Max steps {steps} is more than 1,000,000: is that a typo?")
        lr = self.learning_rate
        if not isinstance(lr, (int, float)) or isinstance(lr, bool) or not (0 < lr < 1):
            p.append(f"Learning rate must be a number between 0 and 1, e.g. 1e-6 (got {lr!r}).")
        if self.method == "grpo":
            g = self.num_generations
            if not isinstance(g, int) or isinstance(g, bool) or g < 2:
                p.append(f"GRPO needs at least 2 generations per prompt (got {g!r}).")
            elif g > 256:
                p.append(f"{g} generations per prompt is more than 256: is that a typo?")
        return p

    def _name_problems(self) -> list[str]:
        """The output repo, the Trackio Space and the run name."""
        p: list[str] = []
        if self.output_repo and not _REPO_ID.match(self.output_repo):
            p.append(f"Output repo {self.output_repo!r} is not of the form user/name.")
        if self.trackio_space and not _REPO_ID.match(self.trackio_space):
            p.append(f"Trackio Space {self.trackio_space!r} is not of the form user/space.")
        if self.run_name and not _NAME.match(self.run_name):
            p.append(f"Run name {self.run_name!r} may use letters, digits, '-', '_' and '.' only.")
        return p

    def _job_problems(self, flavors: list[str] | None) -> list[str]:
        """What a Hugging Face Job needs: an output repo, a GPU flavor, a timeout, a package."""
        p: list[str] = []
        if not self.output_repo:
            p.append("Output repo is empty: a job's disk is wiped when it ends, so give a repo "
                     "(user/name) to push the trained model to.")
        p += self._flavor_problems(flavors)
        p += self._timeout_problems()
        if self.namespace and not _NAME.match(self.namespace):
            p.append(f"Namespace {self.namespace!r} is not a user or organisation name.")
        if not self.package_spec.strip():
            p.append("Package spec is empty: the job needs to install carl-tui.")
        elif self.package_spec.strip().startswith((".", "/", "~")):
            p.append(f"Package spec {self.package_spec!r} is a local path, which a job cannot "
                     "see: give a package name or a git URL.")
        return p

    def _flavor_problems(self, flavors: list[str] | None) -> list[str]:
        if not _FLAVOR.match(self.flavor or ""):
            return [f"Hardware flavor {self.flavor!r} is not a flavor name such as a10g-small."]
        if flavors is not None and self.flavor not in flavors:
            return [f"Hardware flavor {self.flavor!r} is not offered; choose one of: "
                    + ", ".join(flavors) + "."]
        if gpus_in_flavor(self.flavor) == 0:
            return [f"Hardware flavor {self.flavor!r} has no GPU: training needs a GPU flavor."]
        return []

    def _timeout_problems(self) -> list[str]:
        secs = timeout_seconds(self.timeout)
        if secs is None:
            return [f"Timeout {self.timeout!r} is not a duration such as 90m, 2h or 3600."]
        if secs < 60:
            return [f"Timeout {self.timeout!r} is under a minute: the job could not even start."]
        if secs > MAX_TIMEOUT_S:
            return [f"Timeout {self.timeout!r} is more than 7 days."]
        return []

    # -- commands ------------------------------------------------------------

    @property
    def gpus(self) -> int:
        if self.target in CLUSTER_TARGETS:
            return self.num_gpus
        return gpus_in_flavor(self.flavor) if self.target == "hf-jobs" else 1

    @property
    def processes(self) -> int:
        if self.num_processes > 0:
            return self.num_processes
        return max(1, self.gpus) if self.target == "hf-jobs" else 1

    def train_options(self, *, output_dir: str | None = None,
                      stream_path: str | None = None) -> list[str]:
        """The options of `carl-tui train` (everything after the word `train`)."""
        out = output_dir or (JOB_OUTPUT_DIR if self.target == "hf-jobs" else self.output_dir)
        args = [
            "--model", self.model.strip(),
            "--dataset", self.dataset.strip(),
            "--method", self.method,
            "--output", out,
            "--max-steps", str(int(self.max_steps)),
            "--learning-rate", repr(float(self.learning_rate)),
        ]
        if self.method == "grpo":
            args += ["--num-generations", str(int(self.num_generations))]
        args.append("--carl" if self.carl else "--no-carl")
        if stream_path:
            args += ["--stream", stream_path]
        if self.trackio_space:
            args += ["--report-to", "trackio"]
        args += list(self.extra_args)
        return args

    def to_train_args(self, *, output_dir: str | None = None,
                      stream_path: str | None = None) -> list[str]:
        """`carl-tui train ...` as an argv list."""
        options = self.train_options(output_dir=output_dir, stream_path=stream_path)
        return ["carl-tui", "train", *options]

    def local_argv(self, stream_path: str, *, python: str | None = None) -> list[str]:
        """The command that trains on this machine, streaming metrics to `stream_path`.

        Several processes run through `accelerate launch`."""
        opts = self.train_options(stream_path=stream_path)
        py = python or sys.executable
        if self.processes > 1:
            return [py, "-m", "accelerate.commands.launch",
                    "--num_processes", str(self.processes),
                    "-m", "carl_tui", "train", *opts]
        return [py, "-m", "carl_tui", "train", *opts]

    def job_command(self) -> list[str]:
        """The command a Hugging Face Job runs in `JOB_IMAGE`.

        `uv run` installs carl-tui with its training extra (plus accelerate on
        multi-GPU flavors), then `carl_tui.training.job_entry` trains and pushes
        the output folder to `output_repo` with the job's HF_TOKEN secret.
        """
        cmd = ["uv", "run", "--python", "3.12", "--with", self.package_spec.strip()]
        if self.processes > 1:
            cmd += ["--with", "accelerate"]
        cmd += ["python", "-m", "carl_tui.training.job_entry",
                "--output-dir", JOB_OUTPUT_DIR,
                "--num-processes", str(self.processes)]
        if self.output_repo:
            cmd += ["--push-to", self.output_repo]
        cmd += ["--",
                *self.train_options(output_dir=JOB_OUTPUT_DIR, stream_path=JOB_STREAM_PATH)]
        return cmd

    def submission(self, *, python: str = "python") -> Submission:
        """What a cluster engine runs: `python -m carl_tui train ...` (through `accelerate
        launch` for several processes), printing the Trainer's log to stdout, where the
        engine's log reads it; `num_gpus` is the job's GPU request. `python` resolves on
        the cluster (its PATH). No secrets: the cluster is given its own (see the engine)."""
        opts = self.train_options(output_dir=self.output_dir)
        procs = self.num_processes if self.num_processes > 0 else max(1, self.num_gpus)
        if procs > 1:
            command = [python, "-m", "accelerate.commands.launch", "--num_processes",
                       str(procs), "-m", "carl_tui", "train", *opts]
        else:
            command = [python, "-m", "carl_tui", "train", *opts]
        if self.target == "slurm":  # its time limit, partition and folder: in the script
            return Submission(
                name=self.job_name(), command=tuple(command), env=self.job_env(),
                gpus=self.num_gpus, cpus=1, labels=self.job_labels(),
                time_limit_s=timeout_seconds(self.timeout), working_dir=os.getcwd(),
                options={"partition": self.partition.strip()} if self.partition.strip() else {})
        return Submission(name=self.job_name(), command=tuple(command), env=self.job_env(),
                          gpus=self.num_gpus, cpus=1, labels=self.job_labels())

    def job_env(self) -> dict[str, str]:
        """Plain (non-secret) environment of the job. The token travels as a secret."""
        env = {"PYTHONUNBUFFERED": "1"}
        if self.trackio_space:
            env["TRACKIO_SPACE_ID"] = self.trackio_space
            env["TRACKIO_PROJECT"] = self.run_name or "carl-tui"
        return env

    def job_labels(self) -> dict[str, str]:
        return {
            "app": "carl-tui",
            "method": self.method,
            "carl": "on" if self.carl else "off",
        }

    def job_name(self) -> str:
        if self.run_name:
            return self.run_name
        model = self.model.strip().rsplit("/", 1)[-1].lower()
        model = re.sub(r"[^a-z0-9\-]+", "-", model).strip("-")[:40] or "model"
        return f"carl-{self.method}-{model}"

    def describe(self) -> str:
        """One line for a confirmation dialog (no secrets in a spec)."""
        where = (f"HF Jobs {self.flavor}" if self.target == "hf-jobs" else
                 f"Ray ({self.ray_address or 'default address'}, {self.num_gpus} GPU)"
                 if self.target == "ray" else
                 f"Slurm ({self.partition or 'default partition'}, {self.num_gpus} GPU, "
                 f"{self.timeout})" if self.target == "slurm" else "this machine")
        carl = "CARL on" if self.carl else "CARL off"
        return (f"{self.method.upper()} {self.model} on {self.dataset}, {self.max_steps} steps, "
                f"lr {self.learning_rate:g}, {carl}, {where}"
                + (f" -> {self.output_repo}" if self.output_repo else ""))

    def shell_command(self) -> str:
        """The job command as one shell-quoted line, for display."""
        if self.target in CLUSTER_TARGETS:
            return shlex.join(self.submission().command)
        return shlex.join(self.job_command() if self.target == "hf-jobs" else self.to_train_args())

    def with_(self, **changes) -> LaunchSpec:
        return replace(self, **changes)


def _slurm_problems(spec: LaunchSpec) -> list[str]:
    """A Slurm batch job's own options, checked before anything is sent: the partition,
    the time limit (the form's timeout), then the engine's check of the submission."""
    p: list[str] = []
    partition = spec.partition.strip()
    if partition and not _NAME.match(partition):
        p.append(f"Partition {partition!r} is a name of letters, digits, '-', '_' and '.' "
                 "(`sinfo` lists them); leave it empty for the cluster's default.")
    p += spec._timeout_problems()  # the batch job's time limit
    if not p:
        p += [f"Slurm: {problem}." for problem in
              SlurmEngine(user="").check(spec.submission())]
    return p
