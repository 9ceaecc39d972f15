"""`carl-tui launch ...`: start a training run on Hugging Face Jobs (or on this machine)
from the command line, with the same checks as the dashboard's launch form."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from carl_tui.actions.jobs import JobsClient
from carl_tui.actions.launch_spec import (
    DEFAULT_DATASET,
    DEFAULT_FLAVOR,
    DEFAULT_MODEL,
    DEFAULT_PACKAGE_SPEC,
    DEFAULT_TIMEOUT,
    TARGETS,
    LaunchSpec,
)
from carl_tui.actions.local_job import LocalJob
from carl_tui.engines.slurm import SlurmEngine, batch_script
from carl_tui.errors import CarlError


def build_parser() -> argparse.ArgumentParser:
    d = LaunchSpec()
    p = argparse.ArgumentParser(
        prog="carl-tui launch",
        description="Launch a GRPO (or SFT) run with the CARL callback and reward on Hugging Face "
                    "Jobs, or on this machine. The HF token (HF_TOKEN or `hf auth login`) reaches "
                    "the job as a secret only.",
    )
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--dataset", default=DEFAULT_DATASET)
    p.add_argument("--method", choices=("grpo", "sft"), default=d.method)
    p.add_argument("--max-steps", type=int, default=d.max_steps)
    p.add_argument("--learning-rate", type=float, default=d.learning_rate)
    p.add_argument("--num-generations", type=int, default=d.num_generations)
    p.add_argument("--carl", action=argparse.BooleanOptionalAction, default=True,
                   help="add the CARL reward (default: on)")
    p.add_argument("--output-repo", default="",
                   help="user/name to push the trained model to (private)")
    p.add_argument("--flavor", default=DEFAULT_FLAVOR, help="Jobs hardware (see --list-hardware)")
    p.add_argument("--timeout", default=DEFAULT_TIMEOUT, help="e.g. 90m, 2h (default 2h)")
    p.add_argument("--trackio-space", default="", help="user/space for live Trackio metrics")
    p.add_argument("--namespace", default="", help="user or organisation that runs the job")
    p.add_argument("--run-name", default="")
    p.add_argument("--target", choices=TARGETS, default="hf-jobs")
    p.add_argument("--ray-address", default="",
                   help="ray target: the Ray dashboard (default: $RAY_ADDRESS, else "
                        "http://127.0.0.1:8265)")
    p.add_argument("--gpus", type=int, default=0,
                   help="ray and slurm targets: the job's GPU request")
    p.add_argument("--partition", default="",
                   help="slurm target: the partition (default: the cluster's); --timeout is "
                        "the batch job's time limit")
    p.add_argument("--output-dir", default=d.output_dir, help="local target: output folder")
    p.add_argument("--stream", default="",
                   help="local target: metrics stream (default OUTPUT_DIR/stream.jsonl)")
    p.add_argument("--num-processes", type=int, default=0)
    p.add_argument("--package-spec", default=DEFAULT_PACKAGE_SPEC,
                   help="what the job installs, e.g. 'carl-tui[train,hub] @ git+https://...'")
    p.add_argument("--list-hardware", action="store_true",
                   help="list Jobs hardware with prices and exit")
    p.add_argument("--dry-run", action="store_true",
                   help="check and print the command, send nothing")
    return p


def spec_from_args(a: argparse.Namespace) -> LaunchSpec:
    return LaunchSpec(
        model=a.model, dataset=a.dataset, method=a.method, max_steps=a.max_steps,
        learning_rate=a.learning_rate, num_generations=a.num_generations, carl=a.carl,
        output_repo=a.output_repo, flavor=a.flavor, timeout=a.timeout,
        trackio_space=a.trackio_space, target=a.target, namespace=a.namespace,
        run_name=a.run_name, output_dir=a.output_dir, num_processes=a.num_processes,
        package_spec=a.package_spec, ray_address=a.ray_address, num_gpus=a.gpus,
        partition=a.partition,
    )


def main(argv: Sequence[str] | None = None) -> int:
    a = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        if a.list_hardware:
            for opt in JobsClient(namespace=a.namespace or None).hardware():
                print(opt.label())
            return 0
        spec = spec_from_args(a)
        problems = spec.validate()
        if problems:
            print("carl-tui launch: cannot launch:", file=sys.stderr)
            for prob in problems:
                print(f"  - {prob}", file=sys.stderr)
            return 2
        if a.dry_run:
            print(spec.describe())
            if spec.target == "slurm":  # what sbatch would be given
                print(batch_script(spec.submission()), end="")
            else:
                print(spec.shell_command())
            return 0
        if spec.target == "local":

            stream = Path(a.stream) if a.stream else Path(spec.output_dir) / "stream.jsonl"
            job = LocalJob.start(spec, stream)
            print(f"started pid {job.pid}; log {job.log_path}")
            print(f"watch it: carl-tui --watch {stream}")
            return 0
        if spec.target == "ray":
            from carl_tui.engines.ray import RayEngine  # lazy: httpx, only for a Ray launch

            engine = RayEngine(spec.ray_address or None)
            job = engine.submit(spec.submission())
            print(f"launched Ray job {job.job_id} ({job.message}) on {engine.describe()}")
            print(f"watch it: carl-tui --ray-job {job.job_id} --ray-address {engine.url}")
            return 0
        if spec.target == "slurm":
            job = SlurmEngine().submit(spec.submission())
            print(f"submitted Slurm job {job.job_id} ({job.message})")
            print(f"watch it: carl-tui --slurm-job {job.job_id}")
            return 0

        launched = JobsClient().launch(spec)
        print(f"launched job {launched.job_id} ({launched.flavor}) in {launched.namespace}")
        print(launched.url)
        print(f"watch it: carl-tui --job {launched.job_id} --namespace {launched.namespace}")
        return 0
    except CarlError as exc:  # ActionError among them
        print(f"carl-tui launch: {exc}", file=sys.stderr)
        return 1
