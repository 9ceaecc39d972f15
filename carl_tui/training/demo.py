"""The live demo run: a tiny model learns to reverse digit strings on the CPU.

    python -m carl_tui.training.demo --stream PATH [--seed N] [--pace S]

One stream, one run, three stages (a `stage` marker starts each):

1. Warm start (`warm_start`): the random model learns a neighbouring task
   (copy the digits), so that it starts SFT confident and wrong. It is plain
   PyTorch training, streamed step by step like the rest: `warm_start/loss`,
   `warm_start/entropy`, `warm_start/mean_token_accuracy` and `phi` (from that
   entropy). Its accuracy and entropy have their own names so that the
   dashboard's gate and phases read SFT's alone (its phases calibrate on the
   first steps they see; copy accuracy reaches 0.99 too).
2. SFT on reversal (`sft`), one log per step, until the phase-transition gate
   fires (token accuracy >= 0.99 on 3 of the last 5 steps): the entropy first
   rises (melting), then collapses (transition, crystallisation).
3. GRPO (`grpo`) with the task reward, sampling hot (temperature 1.5); once the
   cascade gate fires on the task reward the CARL reward is added, and the demo
   ends `--carl-steps` steps later.

The first lines (meta, stage, log) are written before torch is imported, and
the first metrics line as soon as the model has taken its first step; trl and
datasets are imported in the background meanwhile. Torch uses one thread by
default: on a small shared machine a second thread mostly waits for the first.

`--pace` sets a minimum wall time per SFT step (the warm start gets a third of
it, GRPO 1.5x) so that a person can watch the phases (0 runs as fast as the CPU
allows). SIGINT or SIGTERM stops training at the end of the current step; the
stream gets a final log line and the exit status is 0. Started by
`carl-tui demo`, the process is tied to the dashboard (see
`actions/local_job.py`): when the dashboard's process ends, however it ends,
training stops the same way. Nothing is downloaded: the tokenizer, model and
data are built in-process.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from carl_tui.actions.local_job import watch_parent
from carl_tui.training.stream import StreamWriter
from carl_tui.training.tiny import (
    TINY_MODEL_NAME,
    grpo_dataset,
    reverse_reward,
    sft_dataset_tokenized,
    tiny_model,
    tiny_tokenizer,
    tiny_vocab_size,
    warm_start_copy,
)

#: Steps of the copy task before SFT on reversal, its batch size and learning rate.
WARM_START_STEPS = 150
WARM_START_BATCH = 64
WARM_START_LR = 3e-3
#: The model: hidden size and layers (3 layers crystallise in about half the steps of 2).
MODEL_HIDDEN = 64
MODEL_LAYERS = 3
#: SFT: batch size, peak learning rate, warm-up steps, schedule (over `--sft-steps`).
SFT_BATCH = 128
SFT_LR = 5e-3
SFT_WARMUP = 10
SFT_SCHEDULE = "cosine"
#: GRPO: batch size (completions: prompts x GRPO_GENERATIONS), learning rate.
GRPO_BATCH = 64
GRPO_GENERATIONS = 8
GRPO_LR = 3e-4
#: Completions of each GRPO step written to the stream (the completions view, `a`).
DEMO_COMPLETIONS = 8
#: Cascade gate tuned for a short run: smaller windows than the default.
DEMO_CASCADE = {"window": 10, "warmup": 10, "rise_z": 4.0, "patience": 3, "plateau": 60}
#: The demo's stages, in order (the `stage` marker's values).
STAGES = ("warm_start", "sft", "grpo")
#: Pace of a warm-start step and of a GRPO step, relative to `--pace` (an SFT step).
WARM_PACE = 1 / 3
GRPO_PACE = 1.5

OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
               "TOKENIZERS_PARALLELISM": "false"}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m carl_tui.training.demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stream", required=True, help="JSONL stream to write")
    d = DemoPlan()
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--pace", type=float, default=d.pace,
                   help="minimum seconds per SFT step (warm start 1/3 of it, GRPO 1.5x); "
                        "0 = no pacing")
    p.add_argument("--warm-start-steps", type=int, default=d.warm_start_steps)
    p.add_argument("--sft-steps", type=int, default=d.sft_steps,
                   help="SFT step limit if the gate never fires (the length of its cosine "
                        "schedule too)")
    p.add_argument("--grpo-steps", type=int, default=d.grpo_steps,
                   help="GRPO step limit if the cascade never fires")
    p.add_argument("--carl-steps", type=int, default=d.carl_steps,
                   help="GRPO steps after the cascade switched the CARL reward on")
    p.add_argument("--no-carl", action="store_true", help="GRPO with the task reward only")
    p.add_argument("--threads", type=int, default=d.threads,
                   help="torch threads (0: torch's default)")
    return p


class _Stop:
    """Why training should stop (first reason wins), passed on to the trainer."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.callback = None  # the CarlCallback, once it exists

    def request(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        if self.callback is not None:
            self.callback.request_stop()

    def __bool__(self) -> bool:
        return self.reason is not None


def _make_pace_callback(seconds: float):
    # lazy: transformers loads after the stream's first lines
    from transformers import TrainerCallback

    class Pace(TrainerCallback):
        """Hold each optimizer step to at least `seconds` of wall time."""

        def __init__(self) -> None:
            self.seconds = seconds
            self._last = time.monotonic()

        def on_train_begin(self, args, state, control, **kwargs):
            self._last = time.monotonic()

        def on_step_end(self, args, state, control, **kwargs):
            wait = self.seconds - (time.monotonic() - self._last)
            if wait > 0 and not control.should_training_stop:
                time.sleep(wait)
            self._last = time.monotonic()

    return Pace()


def _make_carl_steps_callback(cascade, steps: int):
    # lazy: transformers loads after the stream's first lines
    from transformers import TrainerCallback

    class EndAfterCarl(TrainerCallback):
        """Stop GRPO `steps` steps after the cascade switched the CARL reward on."""

        def on_step_end(self, args, state, control, **kwargs):
            fired = cascade.fired_step
            if fired is not None and state.global_step >= fired + steps - 1:
                control.should_training_stop = True
            return control

    return EndAfterCarl()


def _quiet(trainer) -> None:
    # lazy: transformers loads after the stream's first lines
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)


def _preload() -> None:
    """Import what the SFT and GRPO stages need (run in a thread during the warm start)."""
    # lazy: loaded in a thread during the warm start
    import datasets  # noqa: F401
    import trl  # noqa: F401
    from trl import GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer  # noqa: F401

    import carl_tui.training.cascade_reward
    import carl_tui.training.reward  # noqa: F401


@dataclass(frozen=True)
class DemoPlan:
    """What the demo was asked to do (the options of `build_parser`)."""

    seed: int = 0
    pace: float = 0.25
    warm_start_steps: int = WARM_START_STEPS
    sft_steps: int = 250
    grpo_steps: int = 150
    carl_steps: int = 30
    carl: bool = True
    threads: int = 1


class _DemoRun:
    """The demo in progress: its plan, stream, stop flag, callback and stage timings."""

    def __init__(self, plan: DemoPlan, writer, stop: _Stop, t_start: float) -> None:
        self.plan = plan
        self.writer = writer
        self.stop = stop
        self.t_start = t_start
        self.timings: list[tuple[str, float]] = []
        self.cb = None  # the CarlCallback, once the model is built

    def timed(self, name: str, since: float) -> None:
        self.timings.append((name, time.time() - since))

    def finish(self, reason: str) -> int:
        """The stream's last line (why it ends, and how long each stage took)."""
        cb = self.cb
        parts = ", ".join(f"{name} {secs:.1f} s" for name, secs in self.timings)
        cb.log_text(f"demo {reason} after {time.time() - self.t_start:.1f} s "
                    f"(step {cb.last_step})" + (f"; {parts}" if parts else ""))
        cb.close()
        return 0


def run_demo(
    stream: str,
    plan: DemoPlan = DemoPlan(),
    *,
    install_signals: bool = True,
    tie_to_parent: bool = True,
) -> int:
    """Run the demo, streaming to `stream`. Returns the exit status (0 also when stopped).

    `tie_to_parent`: stop when the process that started this one ends (only
    when it was started with `LocalJob.start(..., tie_to_parent=True)`)."""
    t_start = time.time()
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)
    stop = _Stop()
    writer, names = _first_lines(stream, plan)  # first: the tie to the parent imports numpy
    _listen_for_stops(stop, install_signals, tie_to_parent)
    run = _DemoRun(plan, writer, stop, t_start)
    try:
        model, tok = _model_and_callback(run, names)
        if stop:
            return run.finish(stop.reason)
        _describe(run, model)
        preload = _warm_start(run, model, tok)
        if stop:
            return run.finish(stop.reason)
        return _sft_then_grpo(run, model, tok, preload)
    except BaseException as exc:  # record why the stream ends, then re-raise
        if not isinstance(exc, (KeyboardInterrupt, SystemExit)):
            writer.write({"event": "log", "text": f"demo failed: {type(exc).__name__}: {exc}"})
        writer.close()
        raise


def _listen_for_stops(stop: _Stop, install_signals: bool, tie_to_parent: bool) -> None:
    """SIGINT and SIGTERM, and the end of the parent process, ask for a stop."""
    if install_signals:
        def on_signal(signum, frame):
            stop.request(f"stopped by {signal.Signals(signum).name}")

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
    if tie_to_parent:
        watch_parent(lambda: stop.request("stopped (its dashboard ended)"))


def _first_lines(stream: str, plan: DemoPlan):
    """The stream's first lines, before torch: the dashboard knows the run at once.
    Returns the writer and (run id, run name, project, vocabulary size)."""
    writer = StreamWriter(stream)
    run_id, run_name, project = (uuid.uuid4().hex[:12], f"tiny-reverse-seed{plan.seed}",
                                 "carl-tui-demo")
    vocab = tiny_vocab_size()
    writer.write({"event": "meta", "run_id": run_id, "name": run_name, "project": project,
                  "vocab_size": vocab, "model": TINY_MODEL_NAME, "method": "sft",
                  "task": "reverse a digit string"})
    writer.write({"event": "marker", "kind": "stage", "step": 0, "stage": "warm_start"})
    writer.write({"event": "log", "text": f"warm start: {plan.warm_start_steps} steps copying "
                  "digits (the model becomes confident and wrong); loading torch"})
    return writer, (run_id, run_name, project, vocab)


def _model_and_callback(run: _DemoRun, names: tuple[str, str, str, int]):
    """Torch, the tiny model and tokenizer, and the callback that streams the run."""
    import torch  # lazy: torch loads after the stream's first lines

    if run.plan.threads > 0:
        torch.set_num_threads(run.plan.threads)
    # lazy: numpy loads after the stream's first lines
    from carl_tui.coherence.gates import PhaseTransitionGate
    from carl_tui.training.callback import CarlCallback

    run_id, run_name, project, vocab = names
    tok = tiny_tokenizer()
    model = tiny_model(seed=run.plan.seed, hidden_size=MODEL_HIDDEN, num_layers=MODEL_LAYERS)
    cb = CarlCallback(run.writer, vocab, gate=PhaseTransitionGate(), stop_on_gate=True,
                      run_name=run_name, project=project, run_id=run_id)
    cb.stage = "warm_start"
    run.cb = run.stop.callback = cb
    return model, tok


def _describe(run: _DemoRun, model) -> None:
    """The run's config (the plan, the threads and the model's size) in its meta."""
    import torch  # lazy: torch loads after the stream's first lines

    plan = run.plan
    run.cb.write_meta(config={
        "seed": plan.seed, "pace": plan.pace, "warm_start_steps": plan.warm_start_steps,
        "sft_max_steps": plan.sft_steps, "grpo_max_steps": plan.grpo_steps,
        "carl_steps": plan.carl_steps, "carl": plan.carl, "threads": torch.get_num_threads(),
        "hidden_size": model.config.hidden_size, "layers": model.config.num_hidden_layers,
        "parameters": sum(p.numel() for p in model.parameters())})
    run.timed("model ready", run.t_start)


def _warm_start(run: _DemoRun, model, tok) -> threading.Thread:
    """1. The copy task, streamed step by step; trl and datasets load in the background
    meanwhile (the thread that loads them is returned)."""
    cb, stop = run.cb, run.stop
    preload = threading.Thread(target=_preload, name="carl-demo-preload", daemon=True)
    warm_pace = run.plan.pace * WARM_PACE
    last = [time.monotonic()]

    def on_warm_step(step: int, metrics: dict[str, float]) -> bool:
        cb.write_metrics(step, {
            "warm_start/loss": metrics["loss"], "warm_start/entropy": metrics["entropy"],
            "warm_start/mean_token_accuracy": metrics["mean_token_accuracy"],
            "warm_start/num_tokens": metrics["num_tokens"],
            "phi": cb.phi_of(metrics["entropy"])})
        if step == 1:
            preload.start()
        wait = warm_pace - (time.monotonic() - last[0])
        if wait > 0 and not stop:
            time.sleep(wait)
        last[0] = time.monotonic()
        return bool(stop)

    t0 = time.time()
    warm_start_copy(model, tok, steps=run.plan.warm_start_steps, batch_size=WARM_START_BATCH,
                    lr=WARM_START_LR, seed=run.plan.seed, on_step=on_warm_step)
    run.timed("warm start", t0)
    return preload


def _sft_then_grpo(run: _DemoRun, model, tok, preload: threading.Thread) -> int:
    """2. SFT, then 3. GRPO, in a scratch folder; returns the exit status."""
    t0 = time.time()
    if preload.ident is None:  # stopped before the first step
        preload.start()
    preload.join()
    # lazy: datasets loads after the stream's first lines
    import datasets
    from transformers import logging as hf_logging

    datasets.disable_progress_bars()
    hf_logging.set_verbosity_error()
    pace_cb = _make_pace_callback(run.plan.pace)
    with tempfile.TemporaryDirectory(prefix="carl-demo-") as out:
        _sft(run, model, tok, os.path.join(out, "sft"), pace_cb)
        run.timed("SFT", t0)
        if run.stop:
            return run.finish(run.stop.reason)
        if run.cb.gate_step is None:
            run.cb.log_text(f"SFT reached {run.plan.sft_steps} steps without the gate firing; "
                            "going on")
        model.eval()
        t0 = time.time()
        _grpo(run, model, tok, os.path.join(out, "grpo"), pace_cb)
        run.timed("GRPO", t0)
    return run.finish(run.stop.reason or "finished")


def _sft(run: _DemoRun, model, tok, output_dir: str, pace_cb) -> None:
    """2. SFT on reversal until the phase-transition gate fires."""
    from trl import SFTConfig, SFTTrainer  # lazy: trl loads after the stream's first lines


    plan, cb = run.plan, run.cb
    # The data set as SFTTrainer would prepare it (a test checks they agree), so that
    # the trainer starts at once instead of tokenizing for seconds.
    sft_data = sft_dataset_tokenized(min(plan.sft_steps, 256) * SFT_BATCH, seed=plan.seed)
    cb.begin_stage("sft")
    cb.log_text("SFT: reverse the digits; the gate stops it when token accuracy crystallises")
    sft_args = SFTConfig(
        output_dir=output_dir, per_device_train_batch_size=SFT_BATCH,
        learning_rate=SFT_LR, lr_scheduler_type=SFT_SCHEDULE, warmup_steps=SFT_WARMUP,
        max_steps=plan.sft_steps, dataset_kwargs={"skip_prepare_dataset": True},
        logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, seed=plan.seed,
        disable_tqdm=True, log_level="error", dataloader_num_workers=0,
    )
    sft = SFTTrainer(model=model, args=sft_args, processing_class=tok,
                     train_dataset=sft_data, callbacks=[cb, pace_cb])
    _quiet(sft)
    sft.train()


def _grpo(run: _DemoRun, model, tok, output_dir: str, pace_cb) -> None:
    """3. GRPO: the task reward, then CARL once the cascade gate fires (and the run ends
    `carl_steps` later)."""
    # lazy: trl loads after the stream's first lines
    from trl import GRPOConfig, GRPOTrainer

    from carl_tui.coherence.gates import CascadeGate
    from carl_tui.training.cascade_reward import CascadeReward
    from carl_tui.training.reward import carl_reward

    plan, cb = run.plan, run.cb
    cb.begin_stage("grpo", method="grpo", phase_metric="rewards/reverse_reward/mean")
    cb.log_text("GRPO: task reward first; CARL joins once the cascade gate fires")
    pace_cb.seconds = plan.pace * GRPO_PACE
    callbacks = [cb, pace_cb]
    if plan.carl:
        cascade = CascadeReward([reverse_reward], carl_reward(model, tok),
                                gate=CascadeGate(**DEMO_CASCADE), callback=cb)
        funcs = cascade.reward_funcs
        callbacks.append(_make_carl_steps_callback(cascade, plan.carl_steps))
    else:
        funcs = [reverse_reward]
    grpo_args = GRPOConfig(
        output_dir=output_dir, per_device_train_batch_size=GRPO_BATCH,
        num_generations=GRPO_GENERATIONS, max_completion_length=8, temperature=1.5,
        learning_rate=GRPO_LR, lr_scheduler_type="constant", max_steps=plan.grpo_steps,
        logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, seed=plan.seed,
        disable_tqdm=True, log_level="error", dataloader_num_workers=0,
    )
    data = grpo_dataset(min(plan.grpo_steps, 256) * GRPO_BATCH // GRPO_GENERATIONS,
                        seed=plan.seed + 1)
    grpo = GRPOTrainer(model=model, args=grpo_args, processing_class=tok, train_dataset=data,
                       reward_funcs=funcs, callbacks=callbacks)
    _quiet(grpo)
    cb.completions = DEMO_COMPLETIONS  # a sample of what the model says, each with its CARL score
    cb.attach(grpo)
    grpo.train()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    plan = DemoPlan(seed=args.seed, pace=args.pace, warm_start_steps=args.warm_start_steps,
                    sft_steps=args.sft_steps, grpo_steps=args.grpo_steps,
                    carl_steps=args.carl_steps, carl=not args.no_carl, threads=args.threads)
    return run_demo(args.stream, plan)


if __name__ == "__main__":
    sys.exit(main())
