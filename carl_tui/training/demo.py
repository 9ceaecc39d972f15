"""The live demo run: a tiny model learns to reverse digit strings on the CPU.

    python -m carl_tui.training.demo --stream PATH [--seed N] [--pace S]

1. Warm start: a few steps of a neighbouring task (copy the digits), so the
   model starts confident and wrong.
2. SFT on reversal, one log per step, until the phase-transition gate fires
   (token accuracy >= 0.99 on 3 of the last 5 steps): the entropy first rises
   (melting), then collapses (transition, crystallisation).
3. GRPO with the task reward, sampling hot (temperature 1.5); once the cascade
   gate fires on the task reward, the CARL reward is added.

Everything goes to the JSONL stream through `CarlCallback`. `--pace` sets a
minimum wall time per optimizer step so that a person can watch the phases
(0 runs as fast as the CPU allows). SIGINT or SIGTERM stops training at the end
of the current step; the stream gets a final log line and the exit status is 0.
Nothing is downloaded: the tokenizer, model and data are built in-process.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from collections.abc import Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

#: Steps of the copy task before SFT on reversal.
WARM_START_STEPS = 150
#: Cascade gate tuned for a short run: smaller windows than the default.
DEMO_CASCADE = {"window": 10, "warmup": 10, "level": 0.8, "rise_z": 4.0, "flat": 0.5, "patience": 3}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m carl_tui.training.demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stream", required=True, help="JSONL stream to write")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pace", type=float, default=0.2,
                   help="minimum seconds per SFT step (GRPO steps get 1.5x); 0 = no pacing")
    p.add_argument("--sft-steps", type=int, default=400, help="SFT step limit if the gate never fires")
    p.add_argument("--grpo-steps", type=int, default=160)
    p.add_argument("--no-carl", action="store_true", help="GRPO with the task reward only")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    return p


def _make_pace_callback(seconds: float):
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


def _quiet(trainer) -> None:
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)


def run_demo(
    stream: str,
    *,
    seed: int = 0,
    pace: float = 0.2,
    sft_steps: int = 400,
    grpo_steps: int = 160,
    carl: bool = True,
    install_signals: bool = True,
) -> int:
    """Run the demo, streaming to `stream`. Returns the exit status (0 also when stopped)."""
    import datasets
    from transformers import logging as hf_logging
    from trl import GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer

    from carl_tui.coherence.gates import CascadeGate, PhaseTransitionGate
    from carl_tui.training.callback import CarlCallback
    from carl_tui.training.cascade import CascadeReward
    from carl_tui.training.reward import carl_reward
    from carl_tui.training.tiny import (
        TINY_MODEL_NAME,
        grpo_dataset,
        reverse_reward,
        sft_dataset,
        tiny_model,
        tiny_tokenizer,
        warm_start_copy,
    )

    datasets.disable_progress_bars()
    hf_logging.set_verbosity_error()
    t_start = time.time()
    tok = tiny_tokenizer()
    model = tiny_model(seed=seed)
    vocab = model.config.vocab_size
    cb = CarlCallback(
        stream, vocab, gate=PhaseTransitionGate(), stop_on_gate=True,
        run_name=f"tiny-reverse-seed{seed}", project="carl-tui-demo",
    )
    stop_signal: list[str] = []

    def on_signal(signum, frame):
        stop_signal.append(signal.Signals(signum).name)
        cb.request_stop()

    if install_signals:
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)

    cb.write_meta(
        model=TINY_MODEL_NAME, method="sft", task="reverse a digit string",
        config={"seed": seed, "pace": pace, "sft_max_steps": sft_steps, "grpo_steps": grpo_steps,
                "carl": carl, "hidden_size": model.config.hidden_size,
                "layers": model.config.num_hidden_layers,
                "parameters": sum(p.numel() for p in model.parameters())},
    )
    pace_cb = _make_pace_callback(pace)

    def finish(reason: str) -> int:
        cb.log_text(f"demo {reason} after {time.time() - t_start:.1f} s (step {cb.last_step})")
        cb.close()
        return 0

    try:
        cb.log_text(f"warm start: {WARM_START_STEPS} steps copying digits "
                    "(the model becomes confident and wrong)")
        warm_start_copy(model, tok, steps=WARM_START_STEPS, seed=seed)
        if stop_signal:
            return finish(f"stopped by {stop_signal[0]}")

        with tempfile.TemporaryDirectory(prefix="carl-demo-") as out:
            cb.log_text("SFT: reverse the digits; the gate stops it when token accuracy crystallises")
            sft_args = SFTConfig(
                output_dir=os.path.join(out, "sft"), per_device_train_batch_size=64,
                learning_rate=3e-3, lr_scheduler_type="cosine", warmup_steps=10,
                max_steps=sft_steps,
                logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, seed=seed,
                disable_tqdm=True, log_level="error", dataloader_num_workers=0,
            )
            sft = SFTTrainer(model=model, args=sft_args, processing_class=tok,
                             train_dataset=sft_dataset(min(sft_steps, 256) * 64, seed=seed),
                             callbacks=[cb, pace_cb])
            _quiet(sft)
            sft.train()
            if stop_signal:
                return finish(f"stopped by {stop_signal[0]}")
            if cb.gate_step is None:
                cb.log_text(f"SFT reached {sft_steps} steps without the gate firing; going on")
            model.eval()

            cb.begin_stage("grpo", method="grpo", phase_metric="rewards/reverse_reward/mean")
            cb.log_text("GRPO: task reward first; CARL joins once the cascade gate fires")
            pace_cb.seconds = pace * 1.5
            if carl:
                cascade = CascadeReward([reverse_reward], carl_reward(model, tok),
                                        gate=CascadeGate(**DEMO_CASCADE), callback=cb)
                funcs = cascade.reward_funcs
            else:
                funcs = [reverse_reward]
            grpo_args = GRPOConfig(
                output_dir=os.path.join(out, "grpo"), per_device_train_batch_size=64,
                num_generations=8, max_completion_length=8, temperature=1.5,
                learning_rate=3e-4, lr_scheduler_type="constant", max_steps=grpo_steps,
                logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, seed=seed,
                disable_tqdm=True, log_level="error", dataloader_num_workers=0,
            )
            grpo = GRPOTrainer(model=model, args=grpo_args, processing_class=tok,
                               train_dataset=grpo_dataset(min(grpo_steps, 256) * 8, seed=seed + 1),
                               reward_funcs=funcs, callbacks=[cb, pace_cb])
            _quiet(grpo)
            grpo.train()
        if stop_signal:
            return finish(f"stopped by {stop_signal[0]}")
        return finish("finished")
    except BaseException as exc:  # record why the stream ends, then re-raise
        if not isinstance(exc, (KeyboardInterrupt, SystemExit)):
            cb.log_text(f"demo failed: {type(exc).__name__}: {exc}")
        cb.close()
        raise


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.threads > 0:
        import torch

        torch.set_num_threads(args.threads)
    return run_demo(
        args.stream, seed=args.seed, pace=args.pace, sft_steps=args.sft_steps,
        grpo_steps=args.grpo_steps, carl=not args.no_carl,
    )


if __name__ == "__main__":
    sys.exit(main())
