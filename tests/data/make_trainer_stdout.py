"""Real Trainer stdout from real tiny runs, with the true step of every printed log.

Each run trains the offline tiny model (`carl_tui.training.tiny`) with a real
transformers / TRL trainer, default progress bars (tqdm's own rate limit on, at
0.5 s so that tiny steps stay much faster than it even on a loaded machine: most steps
are never drawn, as on a fast GPU), `report_to="none"`, and stdout and stderr
going to ONE file, as a job's log or `python train.py > train.log 2>&1` holds
them. A callback writes the Trainer's `state.global_step` at every `on_log` to
a side file (`NAME.steps.jsonl`, one `{"step": ..., "keys": [...], "values": {...}}`
per printed dict: the values as the Trainer logged them, before printing), so every
dict's true step is known.

Runs of one call share a process per worker (importing torch and TRL costs
more than the runs): each run's output goes to its own file by redirecting
file descriptors 1 and 2, with `PYTHONUNBUFFERED=1` as in a job.

    python tests/data/make_trainer_stdout.py OUTDIR [NAME ...]   # all runs by default
    python tests/data/make_trainer_stdout.py --fixture           # rewrite trainer_stdout.txt

tests/sources/test_trainer_log_real.py runs these in the suite and checks every
dict's parsed step against the side file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURE = HERE / "trainer_stdout.txt"
ROOT = HERE.parent.parent

# name -> how the run trains. Keys: kind (sft|grpo), max_steps, logging_steps,
# logging_first_step, save_steps (checkpoints: "Writing model shards" bars),
# eval_steps (an evaluation bar inside training), resume_from (train to this
# step with a checkpoint, output thrown away, then resume: the log starts at a
# high step), epochs + n_train (several short epochs, max_steps unset),
# grad_accum (gradient accumulation), buffered (stdout block-buffered, as
# without `python -u`), no_bars (disable_tqdm: the Trainer prints dicts only),
# then (a second training, in the same log, after the first), appended (the run is
# stopped (`stop_at`) or killed with SIGKILL (`kill_at`) after its checkpoint at
# `resume_from`, then resumed from it, both writing to the one log).
RUNS: dict[str, dict] = {
    "sft_ls1": {"kind": "sft", "max_steps": 60, "logging_steps": 1},
    "sft_ls5": {"kind": "sft", "max_steps": 120, "logging_steps": 5},
    "sft_ls7": {"kind": "sft", "max_steps": 100, "logging_steps": 7, "logging_first_step": True},
    "sft_save_eval": {"kind": "sft", "max_steps": 60, "logging_steps": 4, "save_steps": 20,
                      "eval_steps": 25},
    "sft_resume": {"kind": "sft", "max_steps": 90, "logging_steps": 3, "resume_from": 40},
    "sft_epochs_ga": {"kind": "sft", "epochs": 3, "logging_steps": 1, "n_train": 50,
                      "grad_accum": 3},
    "grpo_ls1": {"kind": "grpo", "max_steps": 30, "logging_steps": 1},
    "grpo_ls2": {"kind": "grpo", "max_steps": 30, "logging_steps": 2, "save_steps": 10},
    "sft_ls5_buffered": {"kind": "sft", "max_steps": 120, "logging_steps": 5, "buffered": True},
    "grpo_ls1_buffered": {"kind": "grpo", "max_steps": 40, "logging_steps": 1, "buffered": True},
    "sft_no_bars": {"kind": "sft", "max_steps": 40, "logging_steps": 4, "no_bars": True},
    "sft_no_bars_eval": {"kind": "sft", "max_steps": 160, "logging_steps": 8, "eval_steps": 40,
                         "no_bars": True},
    "sft_stop_resume": {"kind": "sft", "max_steps": 120, "logging_steps": 3, "save_steps": 30,
                        "appended": {"stop_at": 60, "resume_from": 60}},
    "sft_kill_resume": {"kind": "sft", "max_steps": 120, "logging_steps": 3, "save_steps": 30,
                        "appended": {"kill_at": 76, "resume_from": 60}},
    "sft_then_grpo": {"kind": "sft", "max_steps": 30, "logging_steps": 3,
                      "then": {"kind": "grpo", "max_steps": 12, "logging_steps": 1}},
}


def _child(outdir: str, names: list[str]) -> None:  # pragma: no cover - runs in a subprocess
    """Run `names` one after the other in this process; each writes NAME.log."""
    import shutil

    from transformers import TrainerCallback, set_seed
    from trl import GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer

    from carl_tui.training.tiny import (
        grpo_dataset,
        reverse_reward,
        sft_dataset,
        tiny_model,
        tiny_tokenizer,
    )

    class TrueSteps(TrainerCallback):
        def __init__(self, path: Path) -> None:
            self.path = path

        def on_log(self, args, state, control, logs=None, **kwargs):
            with self.path.open("a") as f:
                values = {k: float(v) for k, v in (logs or {}).items()
                          if isinstance(v, (int, float)) and not isinstance(v, bool)}
                f.write(json.dumps({"step": state.global_step, "keys": sorted(logs or {}),
                                    "values": values}) + "\n")

    class Interrupt(TrainerCallback):
        """Stops the training at `stop_at`, or kills its process at `kill_at`."""

        def __init__(self, stop_at: int | None = None, kill_at: int | None = None) -> None:
            self.stop_at, self.kill_at = stop_at, kill_at

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == self.kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            if state.global_step == self.stop_at:
                control.should_training_stop = True

    def interrupted(spec: dict, work: Path, steps_file: Path) -> None:
        """The first part of an appended run: stopped, or killed (in a forked process, so
        that only it dies, as a killed job does)."""
        part = spec["appended"]
        if part.get("stop_at"):
            trainer = build(spec, work, steps_file, spec["max_steps"])
            trainer.add_callback(Interrupt(stop_at=part["stop_at"]))
            trainer.train()
            return
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the process that is killed
            try:
                trainer = build(spec, work, steps_file, spec["max_steps"])
                trainer.add_callback(Interrupt(kill_at=part["kill_at"]))
                trainer.train()
            finally:
                os._exit(1)
        os.waitpid(pid, 0)

    out = Path(outdir)

    def build(spec: dict, work: Path, steps_file: Path | None, max_steps: int | None):
        set_seed(0)
        kw = {
            "output_dir": str(work),
            "logging_steps": spec["logging_steps"],
            "report_to": "none",
            "use_cpu": True,
            "disable_tqdm": bool(spec.get("no_bars")),
            "logging_first_step": bool(spec.get("logging_first_step")),
            "gradient_accumulation_steps": spec.get("grad_accum", 1),
            "seed": 0,
            "save_strategy": "steps" if (spec.get("save_steps") or spec.get("resume_from"))
            else "no",
            "save_steps": spec.get("save_steps") or spec.get("resume_from") or 500,
        }
        if max_steps:
            kw["max_steps"] = max_steps
        else:
            kw["num_train_epochs"] = spec["epochs"]
        if spec.get("eval_steps"):
            kw.update(eval_strategy="steps", eval_steps=spec["eval_steps"],
                      per_device_eval_batch_size=4)
        callbacks = [TrueSteps(steps_file)] if steps_file else []
        tok = tiny_tokenizer()
        if spec["kind"] == "sft":
            config = SFTConfig(per_device_train_batch_size=4, learning_rate=3e-3, max_length=32,
                               **kw)
            n = spec.get("n_train", 512)
            return SFTTrainer(model=tiny_model(hidden_size=32, num_layers=1, num_heads=2),
                              args=config, train_dataset=sft_dataset(n),
                              eval_dataset=sft_dataset(24, seed=5) if spec.get("eval_steps")
                              else None,
                              processing_class=tok, callbacks=callbacks)
        config = GRPOConfig(per_device_train_batch_size=4, num_generations=2,
                            max_completion_length=4, learning_rate=3e-4, **kw)
        return GRPOTrainer(model=tiny_model(hidden_size=32, num_layers=1, num_heads=2),
                           args=config, train_dataset=grpo_dataset(256), processing_class=tok,
                           reward_funcs=[reverse_reward], callbacks=callbacks)

    saved = os.dup(1), os.dup(2)
    try:
        for name in names:
            spec = RUNS[name]
            work = Path(tempfile.mkdtemp(prefix=f"{name}-"))
            steps_file = out / f"{name}.steps.jsonl"
            steps_file.unlink(missing_ok=True)
            try:
                if spec.get("resume_from"):
                    with open(os.devnull, "wb") as null:
                        os.dup2(null.fileno(), 1)
                        os.dup2(null.fileno(), 2)
                        build(spec, work, None, spec["resume_from"]).train()
                with open(out / f"{name}.log", "wb") as f:
                    os.dup2(f.fileno(), 1)
                    os.dup2(f.fileno(), 2)
                    if spec.get("buffered"):
                        # What Python sets up for `python train.py > log 2>&1` without -u:
                        # stdout block-buffered (st_blksize), stderr line-buffered.
                        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
                    if spec.get("appended"):
                        interrupted(spec, work, steps_file)
                    trainer = build(spec, work, steps_file, spec.get("max_steps"))
                    resume = spec.get("resume_from") or spec.get("appended", {}).get(
                        "resume_from")
                    if resume:
                        ckpt = work / f"checkpoint-{resume}"
                        trainer.train(resume_from_checkpoint=str(ckpt))
                    else:
                        trainer.train()
                    then = spec.get("then")
                    if then:  # a second training in the same log (SFT, then GRPO)
                        build(then, work / "then", steps_file, then["max_steps"]).train()
                    sys.stdout.flush()
                    sys.stderr.flush()
            finally:
                sys.stdout.flush()
                sys.stdout = sys.__stdout__
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
                shutil.rmtree(work, ignore_errors=True)
    finally:
        os.close(saved[0])
        os.close(saved[1])


def generate(outdir: Path, names: list[str] | None = None, *, workers: int = 2) -> dict[str, Path]:
    """Run `names` (default: all) into `outdir`; returns name -> log path.

    `workers` processes share the runs. Raises CalledProcessError (with the
    child's output) when a run fails."""
    names = list(names or RUNS)
    outdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    # tqdm's rate limit is what makes bars stale: most tiny steps are never drawn, as on a
    # fast GPU. Its default (0.1 s) does that only while steps stay faster than 0.1 s; on a
    # loaded machine they are not, every step is drawn, and the logs would lose the stale
    # bars the tests are about. 0.5 s keeps them stale on a slow machine too.
    env["TQDM_MININTERVAL"] = "0.5"
    env.pop("TQDM_DISABLE", None)
    groups = [names[i::workers] for i in range(max(1, min(workers, len(names))))]
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--child", str(outdir), *group],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
        )
        for group in groups
    ]
    for proc in procs:
        output, _ = proc.communicate()
        if proc.returncode:
            raise subprocess.CalledProcessError(proc.returncode, proc.args, output)
    return {name: outdir / f"{name}.log" for name in names}


# trainer_stdout.txt (used by the job source's tests): a tiny GPT-2 built from a
# config, 12 steps, logging every step, with TQDM_MININTERVAL=0 so that every step
# is drawn (the rate-limited runs above are generated by the tests themselves).
FIXTURE_CHILD = r"""
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments, set_seed

set_seed(0)
config = GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=1, n_head=2)
model = GPT2LMHeadModel(config)


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 64, (n, 16), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


args = TrainingArguments(
    output_dir="{outdir}", max_steps=12, per_device_train_batch_size=4, logging_steps=1,
    learning_rate=1e-3, report_to="none", disable_tqdm=False, save_strategy="no",
    use_cpu=True, seed=0,
)
Trainer(model=model, args=args, train_dataset=Tokens(32)).train()
"""


def write_fixture() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "TQDM_MININTERVAL": "0", "PYTHONUNBUFFERED": "1"}
        env.setdefault("HF_HUB_OFFLINE", "1")
        proc = subprocess.run(
            [sys.executable, "-c", FIXTURE_CHILD.replace("{outdir}", tmp)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, check=True,
        )
    FIXTURE.write_bytes(proc.stdout)
    print(f"wrote {FIXTURE} ({len(proc.stdout)} bytes)")


def true_steps(log: Path) -> list[dict]:
    """The side file of a run's log: one `{"step", "keys", "values"}` per printed dict, in
    order."""
    side = log.with_name(log.name.removesuffix(".log") + ".steps.jsonl")
    return [json.loads(line) for line in side.read_text().splitlines()]


def main(argv: list[str]) -> None:
    if argv[:1] == ["--child"]:
        _child(argv[1], argv[2:])
        return
    if argv[:1] == ["--fixture"]:
        write_fixture()
        return
    if not argv:
        sys.exit(__doc__)
    paths = generate(Path(argv[0]), argv[1:] or None)
    for name, path in paths.items():
        print(f"{name}: {path} ({path.stat().st_size} bytes, {len(true_steps(path))} logs)")


if __name__ == "__main__":
    main(sys.argv[1:])
