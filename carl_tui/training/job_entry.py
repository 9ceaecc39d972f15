"""Entry point of a Hugging Face Job launched by carl-tui: train, then push.

    python -m carl_tui.training.job_entry --output-dir DIR [--push-to REPO]
        [--num-processes N] -- <carl-tui train options>

Runs `carl-tui train` (through `accelerate launch` when N > 1) with the job's
stdout, so the job logs show the trainer's output; forwards SIGTERM/SIGINT
(a cancelled job) to the trainer; on success pushes DIR to REPO (private)
with the HF_TOKEN secret. Exits with the trainer's exit status.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Sequence

from carl_tui.actions.action_error import ActionError
from carl_tui.actions.push import push_folder


def train_command(
    train_options: Sequence[str], num_processes: int, python: str | None = None
) -> list[str]:
    py = python or sys.executable
    if num_processes > 1:
        return [py, "-m", "accelerate.commands.launch", "--num_processes", str(num_processes),
                "-m", "carl_tui", "train", *train_options]
    return [py, "-m", "carl_tui", "train", *train_options]


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        own, rest = argv[:i], argv[i + 1 :]
    else:
        own, rest = argv, []
    p = argparse.ArgumentParser(prog="carl_tui.training.job_entry")
    p.add_argument("--output-dir", required=True)
    p.add_argument("--push-to", default="")
    p.add_argument("--num-processes", type=int, default=1)
    p.add_argument("--public", action="store_true", help="create the output repo public")
    return p.parse_args(own), rest


def main(argv: Sequence[str] | None = None, *, python: str | None = None) -> int:
    args, train_options = parse(sys.argv[1:] if argv is None else argv)
    cmd = train_command(train_options, args.num_processes, python)
    print(f"[carl-tui] training: {' '.join(cmd[1:])}", flush=True)
    proc = subprocess.Popen(cmd)

    def forward(signum, _frame):  # a cancelled job gets SIGTERM: let the trainer save and stop
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass

    old = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        rc = proc.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if rc != 0:
        print(f"[carl-tui] training exited with status {rc}; nothing pushed", flush=True)
        return rc
    if not args.push_to:
        return 0

    def show(p) -> None:
        print(f"[carl-tui] push: {p.text()}", flush=True)

    try:
        # The final model is in the output folder; intermediate checkpoints stay behind.
        result = push_folder(args.output_dir, args.push_to, private=not args.public,
                             token=os.environ.get("HF_TOKEN") or None, progress=show,
                             exclude=("checkpoint-*",))
    except ActionError as exc:
        print(f"[carl-tui] push failed: {exc}", flush=True)
        return 3
    print(f"[carl-tui] pushed to {result.commit_url}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
