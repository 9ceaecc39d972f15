"""The command line's options: every flag, its type and its check, and the one-line error
that names a bad flag (exit status 2). Shared by `carl-tui` (cli.py) and `carl-tui serve`
(serve/command.py, which serves the dashboard with the same options). Imports nothing heavy:
`carl-tui --help` loads this and little else."""

from __future__ import annotations

import argparse
import difflib
import math
from collections.abc import Sequence

from carl_tui import __version__
from carl_tui.cli_request import EXIT_USAGE, UsageError
from carl_tui.sources.kinds import MAX_NAME, MAX_PATH, MAX_TEXT  # noqa: F401
from carl_tui.sources.kinds import bounded as _bounded
from carl_tui.sources.kinds import flags as source_flags
from carl_tui.sources.kinds import nonempty as _nonempty
from carl_tui.sources.kinds import path_arg as _path
from carl_tui.sources.registry import BUILT_IN  # noqa: F401  (registers the built-in kinds)

DESCRIPTION = """\
Watch a language-model training run live: phi (the CARL order parameter),
entropy, the phase of the run and the crystallisation gate.

With no source option, carl-tui opens the most recently active run of the
local Trackio store ($TRACKIO_DIR, else $HF_HOME/trackio, else
~/.cache/huggingface/trackio)."""

EPILOG = """\
commands:
  carl-tui demo                 train a tiny model on the CPU and watch it live
  carl-tui summary SOURCE       print a run's story (phases, gate, metrics) and exit
  carl-tui export SOURCE        print every step of a run as JSONL or CSV
  carl-tui fleet SOURCE         print every run of a source: state, step, phase, gate, config
  carl-tui replay FILE          play a recorded stream back
  carl-tui train ...            train a real model with the CARL callback (needs [train])
  carl-tui launch ...           launch a GRPO job on Hugging Face Jobs (needs [hub])
  carl-tui serve [OPTIONS]      serve the dashboard to web browsers (needs [serve])

examples:
  carl-tui --watch runs/stream.jsonl --vocab-size 151936
  carl-tui --watch train.log                      (a Trainer's stdout: nohup.out, SLURM .out)
  carl-tui --trackio user/my-trackio-space --project grpo
  carl-tui --job 6910f0a2c3 --namespace my-org
  carl-tui --tensorboard runs/ --run grpo-1
  carl-tui --wandb wandb/
  carl-tui summary train.log --json"""

class Parser(argparse.ArgumentParser):
    """argparse, with its errors as one line naming the flag."""

    def error(self, message: str):  # type: ignore[override]
        if len(message) > 300:  # it may quote a value of any length
            message = message[:300] + "..."
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


# -- option types -------------------------------------------------------------------


def _keymap(text: str) -> dict[str, str]:
    _bounded(text, MAX_TEXT, "a keymap")
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        if "=" not in part:
            raise argparse.ArgumentTypeError(f"entry {part!r} is not binding.id=key")
        bid, key = part.split("=", 1)
        out[bid.strip()] = key.strip()
    return out


def _guard(text: str) -> tuple[str, str]:
    """`--guard FLAG=ACTION` (actions/guard.py; read only when given: numpy loads there)."""
    from carl_tui.actions.guard import parse_guard  # lazy: loads the store (numpy)

    try:
        return parse_guard(_bounded(text, MAX_TEXT, "a guard"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _vocab_size(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a whole number (the tokenizer's vocabulary size, >= 2)"
        ) from None
    if v < 2:
        raise argparse.ArgumentTypeError(f"{v} is too small: a vocabulary has at least 2 tokens")
    return v


def _finite(text: str, *, positive: bool, says: str) -> float:
    """A finite number, >= 0 (or > 0 when `positive`); else `says` what to give."""
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise argparse.ArgumentTypeError(f"{text!r}: give {says}")
    return v


def _speed(text: str) -> float:
    return _finite(text, positive=False,
                   says="a number >= 0 (2 = twice as fast, 0 = as fast as possible)")


def _timeout(text: str) -> float:
    return _finite(text, positive=True, says="a number of seconds > 0")


def _metric(text: str) -> str:
    return _nonempty(_bounded(text, what="a metric name"))


def _metric_list(text: str) -> list[str]:
    names = [_bounded(n.strip(), what="a metric name") for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give metric names separated by commas")
    return names


# -- parser -------------------------------------------------------------------------


def _add_source_options(p: argparse.ArgumentParser, command: str = "dashboard") -> None:
    """Every registered kind's source flags that `command` gets (sources/kinds.py); in
    `fleet`, several sources at once, and the repeatable flags more than once."""
    many = command == "fleet"
    given = source_flags(command)
    again = [f.name for _kind, f in given if f.repeatable]
    src = p.add_argument_group(
        f"sources (any number of them, {_and(again)} repeatable; default: the local Trackio "
        "store)" if many and again else "sources (pick one; default: the local Trackio store)")
    for _kind, f in given:
        opts: dict = {"help": f.fleet_help if many and f.fleet_help else f.help}
        if f.switch:
            opts["action"] = "store_true"
        else:
            opts.update(type=f.type, default=f.default_value())
            if f.metavar:
                opts["metavar"] = f.metavar
            if f.choices:
                opts["choices"] = f.choices
            if many and f.repeatable:
                opts["action"] = "append"
        src.add_argument(f.name, dest=f.key, **opts)
    src.add_argument("--run", type=_nonempty, help="the run to open (id or name)")


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _add_reading_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("reading")
    g.add_argument("--vocab-size", type=_vocab_size, default=None,
                   help="vocabulary size, to derive phi = 1 - entropy / ln V for runs without phi")
    g.add_argument("--gate-metric", type=_metric, default="mean_token_accuracy",
                   help="metric the phase-transition gate watches (default: mean_token_accuracy)")


def _add_view_options(p: argparse.ArgumentParser) -> None:
    _add_reading_options(p)
    _add_display_options(p)


def _add_display_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("display")
    g.add_argument("--theme", default="carl-dark", type=_bounded,
                   help="colour theme (carl-dark, carl-light)")
    g.add_argument("--output-dir", metavar="DIR", type=_path,
                   help="the run's output directory, for pushing checkpoints (p)")
    g.add_argument("--push-repo", metavar="REPO", type=_bounded,
                   help="default Hub repo for pushing checkpoints")
    g.add_argument("--keymap", type=_keymap, default={},
                   help="remap keys: 'app.quit=ctrl+q,app.pick_run=R' (ids are listed by ?)")
    g.add_argument("--read-only", action="store_true",
                   help="watch only: no launch, stop, push, diagnose, jobs or save keys "
                        "(and no guard acts)")
    g.add_argument("--guard", action="append", type=_guard, default=[],
                   metavar="FLAG=ACTION",
                   help="what to do when a health flag is said: notify, ask, stop or "
                        "stop+push (e.g. nan_loss=stop; repeatable; over the config "
                        "file's [guard])")


def _add_headless_options(p: argparse.ArgumentParser, command: str) -> None:
    p.add_argument("file", nargs="?", metavar="FILE", type=_path,
                   help="a JSONL stream or a Trainer log (or name a source with the options)")
    _add_source_options(p, command)
    _add_reading_options(p)
    p.add_argument("--timeout", type=_timeout, default=30.0,
                   help="seconds to wait for a remote or live source (default 30)")


def _add_fleet_parser(sub) -> None:
    f = sub.add_parser("fleet", help="every run of a source, one row each: the fleet table "
                                     "in a terminal; printed when piped or with --json",
                       description="One row per run: state, steps, phase, gate, task metric, "
                                   "loss, GPU, job cost, and the config keys that differ "
                                   "between the runs. In a terminal: the fleet table, live "
                                   "(sort, filter, group, compare, open a run); piped, or with "
                                   "--json: read what the source holds now, print, exit. "
                                   "Several sources at once: every run of each is a row, "
                                   "its source named.")
    _add_headless_options(f, "fleet")
    _add_display_options(f)
    f.add_argument("--json", action="store_true",
                   help="one JSON array, one object per run (for scripts and CI)")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="carl-tui", description=DESCRIPTION, epilog=EPILOG,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"carl-tui {__version__}")
    _add_source_options(p)
    _add_view_options(p)

    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    r = sub.add_parser("replay", help="play a recorded stream back in real time")
    r.add_argument("file", type=_path, help="a JSONL stream recorded by the CARL callback")
    r.add_argument("--speed", type=_speed, default=1.0,
                   help="playback speed (2 = twice as fast, 0 = as fast as possible)")
    _add_view_options(r)

    d = sub.add_parser("demo", help="train a tiny model on the CPU and watch it live")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--stream", metavar="PATH", type=_path, help="where the run's stream is written "
                   "(default: a temporary file); an existing file is refused unless --overwrite")
    d.add_argument("--overwrite", action="store_true",
                   help="replace the file at --stream if there is one")
    _add_view_options(d)

    s = sub.add_parser("summary", help="print a run's story and exit (no screen)",
                       description="Read what a source holds now and print the run's story: "
                                   "steps, phases, gate, cascade, every metric's last/min/max.")
    _add_headless_options(s, "summary")
    s.add_argument("--json", action="store_true", help="one JSON object (for scripts and CI)")

    e = sub.add_parser("export", help="print every step of a run as JSONL or CSV (no screen)",
                       description="Every step the dashboard holds, one row per step.")
    _add_headless_options(e, "export")
    e.add_argument("--format", dest="out_format", choices=("jsonl", "csv"), default="jsonl",
                   help="output format (default jsonl)")
    e.add_argument("--metrics", type=_metric_list, default=None,
                   help="only these metrics, in this order: loss,reward,phi")
    e.add_argument("-o", "--output", metavar="FILE", type=_path,
                   help="write here instead of stdout")
    e.add_argument("--completions", action="store_true",
                   help="the GRPO completions instead: one row per completion (step, prompt, "
                        "completion, rewards, advantage)")

    _add_fleet_parser(sub)

    # train and launch parse their own arguments (their modules import heavy libraries).
    sub.add_parser("train", help="train a model with the CARL callback and reward (needs [train])",
                   add_help=False)
    sub.add_parser("launch", help="launch a GRPO job on Hugging Face Jobs (needs [hub])",
                   add_help=False)
    sub.add_parser("serve", help="serve the dashboard to web browsers (needs [serve])",
                   add_help=False)
    return p



def _option_strings(parser: argparse.ArgumentParser) -> set[str]:
    """Every long option of the parser and of its commands."""
    out: set[str] = set()
    for action in parser._actions:
        out.update(o for o in action.option_strings if o.startswith("--"))
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out |= _option_strings(sub)
    return out


def _unknown_option(parser: argparse.ArgumentParser, argv: Sequence[str]) -> str | None:
    """`--watchh`: "unknown option --watchh; did you mean --watch?" (argparse would call
    the next word an unknown COMMAND). Unique prefixes are argparse's to accept."""
    known = _option_strings(parser)
    for arg in argv:
        if arg == "--":
            break
        name = arg.split("=", 1)[0]
        if not name.startswith("--") or len(name) < 3 or any(k.startswith(name) for k in known):
            continue
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.7)
        return f"unknown option {name[:60]}" + (f"; did you mean {close[0]}?" if close else "")
    return None


def check_view_args(args) -> None:
    """Flags of the dashboard that argparse's types cannot check alone."""
    from carl_tui.ui.keys import check_keymap  # lazy: textual, kept out of `--help`

    problem = check_keymap(args.keymap)
    if problem:
        raise UsageError(f"--keymap: {problem}")
    from carl_tui.ui.themes import theme_names  # lazy: textual, kept out of `--help`

    names = theme_names()
    if args.theme not in names:
        why = (f"{args.theme!r} takes its colours from the terminal's palette: its plots "
               "cannot be kept readable" if args.theme.startswith("ansi-")
               else f"unknown theme {args.theme!r}")
        raise UsageError(f"--theme: {why} (themes: {', '.join(names)})")
