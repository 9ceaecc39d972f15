"""`carl-tui train`: SFT or GRPO on a real model, with the CARL callback and reward.

    carl-tui train --model Qwen/Qwen2.5-0.5B-Instruct --dataset trl-lib/DeepMath-103K \\
        --method grpo --stream runs/stream.jsonl --report-to trackio

Options mirror TRL's configs. `--config carl.yaml` reads the same options from
a YAML mapping (keys as the long options, with `-` or `_`); the command line
overrides the file. A `trainer:` mapping in the file is passed to `SFTConfig` /
`GRPOConfig` as is. `--model tiny --dataset tiny` trains the offline tiny model
on the digit-reversal task (no download).

SIGINT or SIGTERM stops at the end of the current step; the model is saved to
`--output` and the exit status is 0.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from carl_tui.training.model_config import vocab_size
from carl_tui.training.tiny import (
    grpo_dataset,
    reverse_reward,
    sft_dataset,
    tiny_model,
    tiny_tokenizer,
)

TINY = "tiny"
TASK_REWARDS = ("accuracy", "think_format", "reverse")


class ConfigError(ValueError):
    """A problem with the options or the config file."""


#: Completions of each GRPO step the stream carries (with their CARL scores).
STREAM_COMPLETIONS = 8


def add_train_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the `carl-tui train` options to `parser`."""
    p = parser
    p.add_argument("--config", metavar="YAML", help="read options from a YAML file (CLI wins)")
    p.add_argument("--model", help="model name or path ('tiny': the offline tiny model)")
    p.add_argument("--dataset", help="dataset name or path ('tiny': the digit-reversal task)")
    p.add_argument("--dataset-config", default=None, help="dataset configuration name")
    p.add_argument("--split", default="train")
    p.add_argument("--method", choices=("sft", "grpo"), default="grpo")
    p.add_argument("--output", default="runs/carl", help="output folder (the trained model)")
    p.add_argument("--max-steps", type=int, default=500)
    p.add_argument("--learning-rate", type=float, default=None,
                   help="default: TRL's (SFT 2e-5, GRPO 1e-6); tiny model 3e-3 / 3e-4")
    p.add_argument("--batch-size", type=int, default=None, help="per-device train batch size")
    p.add_argument("--num-generations", type=int, default=8, help="GRPO completions per prompt")
    p.add_argument("--max-completion-length", type=int, default=None)
    p.add_argument("--temperature", type=float, default=None, help="GRPO sampling temperature")
    p.add_argument("--reward", action="append", choices=TASK_REWARDS, default=None,
                   help="GRPO task reward (repeatable); default: reverse for the tiny "
                        "task, else accuracy")
    p.add_argument("--carl", action=argparse.BooleanOptionalAction, default=True,
                   help="add the CARL reward (GRPO)")
    p.add_argument("--cascade", action=argparse.BooleanOptionalAction, default=True,
                   help="switch CARL on only after the cascade gate fires on the task reward")
    p.add_argument("--stream", metavar="PATH", help="write the JSONL stream the dashboard reads")
    p.add_argument("--report-to", action="append", default=None,
                   help="TRL/transformers reporting integration, e.g. trackio (repeatable)")
    p.add_argument("--run-name", default=None)
    p.add_argument("--gate-metric", default="mean_token_accuracy")
    p.add_argument("--gate-threshold", type=float, default=0.99)
    p.add_argument("--stop-on-gate", action=argparse.BooleanOptionalAction, default=False,
                   help="stop SFT when the phase-transition gate fires")
    p.add_argument("--logging-steps", type=int, default=1)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--no-save", action="store_true", help="do not save the model at the end")
    p.set_defaults(trainer={})
    return p


def build_parser() -> argparse.ArgumentParser:
    return add_train_arguments(argparse.ArgumentParser(
        prog="carl-tui train", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter))


def load_config(path: str | Path, parser: argparse.ArgumentParser) -> dict[str, Any]:
    """Options from a YAML file as parser defaults; unknown keys are an error."""
    import yaml  # lazy: yaml only for a --config file

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of options")
    known = {a.dest for a in parser._actions} | {"trainer"}
    out: dict[str, Any] = {}
    for key, value in data.items():
        dest = str(key).replace("-", "_")
        if dest not in known or dest in ("config", "help"):
            raise ConfigError(f"{path}: unknown option {key!r}")
        if dest == "trainer" and not isinstance(value, dict):
            raise ConfigError(f"{path}: 'trainer' must be a mapping of TRL config fields")
        if dest in ("reward", "report_to") and isinstance(value, str):
            value = [value]
        out[dest] = value
    return out


def parse_train_args(argv: Sequence[str] | None = None,
                     parser: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    """Parse options; a `--config` file supplies defaults that the command line overrides."""
    parser = parser or build_parser()
    first, _ = parser.parse_known_args(argv)
    if first.config:
        parser.set_defaults(**load_config(first.config, parser))
    args = parser.parse_args(argv)
    if not args.model or not args.dataset:
        parser.error("--model and --dataset are required (on the command line or in --config)")
    return args


# -- building blocks -----------------------------------------------------------


def _load_model(args):
    if args.model == TINY:
        return tiny_model(seed=args.seed), tiny_tokenizer()
    # lazy: the training stack loads after the options are read (--help stays quick)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype="auto")
    return model, tok


def _load_dataset(args):
    if args.dataset == TINY:
        n = min(max(64, args.max_steps * (args.batch_size or 64)), 16384)
        make = sft_dataset if args.method == "sft" else grpo_dataset
        return make(n, seed=args.seed)
    # lazy: the training stack loads after the options are read (--help stays quick)
    from datasets import load_dataset

    return load_dataset(args.dataset, name=args.dataset_config, split=args.split)


def task_rewards(args) -> list:
    """The GRPO task reward functions named by `--reward`."""
    names = args.reward or (["reverse"] if args.dataset == TINY else ["accuracy"])
    out = []
    for name in names:
        if name == "reverse":
            out.append(reverse_reward)
        elif name == "accuracy":
            # lazy: the training stack loads after the options are read (--help stays quick)
            from trl.rewards import accuracy_reward

            out.append(accuracy_reward)
        elif name == "think_format":
            # lazy: the training stack loads after the options are read (--help stays quick)
            from trl.rewards import think_format_reward

            out.append(think_format_reward)
        else:  # pragma: no cover - argparse restricts the choices
            raise ConfigError(f"unknown reward {name!r}")
    return out


def trainer_config(args):
    """The `SFTConfig` / `GRPOConfig` for these options."""
    # lazy: the training stack loads after the options are read (--help stays quick)
    from trl import GRPOConfig, SFTConfig

    tiny = args.model == TINY
    kw: dict[str, Any] = {
        "output_dir": args.output,
        "max_steps": args.max_steps,
        "logging_steps": args.logging_steps,
        "report_to": args.report_to or [],
        "seed": args.seed,
    }
    if args.run_name:
        kw["run_name"] = args.run_name
    lr = args.learning_rate
    if lr is None and tiny:
        lr = 3e-3 if args.method == "sft" else 3e-4
    if lr is not None:
        kw["learning_rate"] = lr
    if args.batch_size or tiny:
        kw["per_device_train_batch_size"] = args.batch_size or (64 if args.method == "sft" else 16)
    if tiny:
        kw.update(save_strategy="no", use_cpu=True, disable_tqdm=True)
    if args.method == "grpo":
        kw["num_generations"] = args.num_generations
        if args.max_completion_length or tiny:
            kw["max_completion_length"] = args.max_completion_length or 8
        if args.temperature is not None:
            kw["temperature"] = args.temperature
    kw.update(args.trainer or {})
    cls = SFTConfig if args.method == "sft" else GRPOConfig
    try:
        return cls(**kw)
    except TypeError as exc:
        raise ConfigError(f"invalid trainer option: {exc}") from None


def _signal_stop_callback():
    # lazy: the training stack loads after the options are read (--help stays quick)
    from transformers import TrainerCallback

    class SignalStop(TrainerCallback):
        """Stop at the end of the current step after SIGINT/SIGTERM."""

        def __init__(self) -> None:
            self.signal_name: str | None = None

        def on_step_end(self, args, state, control, **kwargs):
            if self.signal_name:
                control.should_training_stop = True
            return control

    return SignalStop()


def _stream_callback(args, model):
    """The `CarlCallback` writing the JSONL stream (`--stream`), its meta line written."""
    # lazy: the training stack loads after the options are read (--help stays quick)
    from carl_tui.coherence.gates import PhaseTransitionGate
    from carl_tui.training.callback import CarlCallback

    gate = PhaseTransitionGate(metric=args.gate_metric, threshold=args.gate_threshold)
    phase_metric = "mean_token_accuracy"
    if args.method == "grpo":
        # lazy: the training stack loads after the options are read (--help stays quick)
        from trl.trainer.utils import get_callable_name

        phase_metric = f"rewards/{get_callable_name(task_rewards(args)[0])}/mean"
    cb = CarlCallback(
        args.stream, vocab_size(model), gate=gate,
        stop_on_gate=args.stop_on_gate and args.method == "sft",
        run_name=args.run_name, meta={"dataset": args.dataset}, phase_metric=phase_metric,
    )
    cb.write_meta(model=args.model, method=args.method,
                  config={k: v for k, v in vars(args).items()
                          if isinstance(v, (str, int, float, bool)) and k != "config"})
    return cb


def _grpo_reward_funcs(args, model, tok, cb=None) -> list:
    """The task rewards, plus the CARL reward with `--carl` (behind the cascade gate with
    `--cascade`, which reports its stage to the stream callback `cb`)."""
    funcs = task_rewards(args)
    if not args.carl:
        return funcs
    # lazy: the training stack loads after the options are read (--help stays quick)
    from carl_tui.training.reward import carl_reward

    carl = carl_reward(model, tok)
    if not args.cascade:
        return [*funcs, carl]
    # lazy: the training stack loads after the options are read (--help stays quick)
    from carl_tui.training.cascade_reward import CascadeReward

    return CascadeReward(funcs, carl, callback=cb).reward_funcs


def _make_trainer(args, config, model, tok, dataset, callbacks: list, cb):
    """The SFT or GRPO trainer; `cb` is the stream callback (or None)."""
    if args.method == "sft":
        # lazy: the training stack loads after the options are read (--help stays quick)
        from trl import SFTTrainer

        return SFTTrainer(model=model, args=config, train_dataset=dataset,
                          processing_class=tok, callbacks=callbacks)
    # lazy: the training stack loads after the options are read (--help stays quick)
    from trl import GRPOTrainer

    return GRPOTrainer(model=model, args=config, train_dataset=dataset, processing_class=tok,
                       reward_funcs=_grpo_reward_funcs(args, model, tok, cb),
                       callbacks=callbacks)


def run_train(args: argparse.Namespace) -> int:
    """Train as `args` say. Returns the exit status."""
    model, tok = _load_model(args)
    dataset = _load_dataset(args)
    config = trainer_config(args)
    stop = _signal_stop_callback()
    cb = _stream_callback(args, model) if args.stream else None
    callbacks: list = [stop] if cb is None else [stop, cb]

    def on_signal(signum, frame):
        stop.signal_name = signal.Signals(signum).name
        if cb is not None:
            cb.request_stop()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        trainer = _make_trainer(args, config, model, tok, dataset, callbacks, cb)
        if cb is not None and args.method == "grpo":
            cb.completions = STREAM_COMPLETIONS
            cb.attach(trainer)
        trainer.train()
        if not args.no_save:
            trainer.save_model(args.output)
        if cb is not None:
            why = f"stopped by {stop.signal_name}" if stop.signal_name else "finished"
            cb.log_text(f"training {why} at step {cb.last_step}")
        return 0
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if cb is not None:
            cb.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parse_train_args(argv, parser)
        return run_train(args)
    except ConfigError as exc:
        print(f"carl-tui train: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
