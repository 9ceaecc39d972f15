"""Command line: argument parsing, checking and wiring only.

Every flag is checked before a screen opens: a bad one gets one line naming
the flag and what it accepts, and exit status 2. `carl-tui --help` imports
nothing heavy: sources, the UI, the Hub and Claude clients and the training
stack are imported by the command that needs them.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from carl_tui import __version__
from carl_tui.cli_request import (  # noqa: F401  (the commands' names, importable here too)
    EXIT_NO_DATA,
    EXIT_USAGE,
    UsageError,
    dashboard_request,
    open_request,
    source_request,
)

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

class _Parser(argparse.ArgumentParser):
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


# Longest names and texts taken from the command line (a metric, run or project name, a
# job id; a path; a URL or a keymap): what a person types, with room to spare.
MAX_NAME, MAX_PATH, MAX_TEXT = 256, 4096, 2048


def _bounded(text: str, limit: int = MAX_NAME, what: str = "a name") -> str:
    if len(text) > limit:
        raise argparse.ArgumentTypeError(f"too long for {what} ({len(text):,} characters; "
                                         f"at most {limit:,})")
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise argparse.ArgumentTypeError(f"control characters in {what}: {text[:60]!r}")
    return text


def _path(text: str) -> str:
    return _bounded(text, MAX_PATH, "a path")


def _text(text: str) -> str:
    return _bounded(text, MAX_TEXT, "this option")


def _nonempty(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return _bounded(text.strip())


def _metric(text: str) -> str:
    return _nonempty(_bounded(text, what="a metric name"))


def _metric_list(text: str) -> list[str]:
    names = [_bounded(n.strip(), what="a metric name") for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give metric names separated by commas")
    return names


# -- parser -------------------------------------------------------------------------


def _add_source_options(p: argparse.ArgumentParser) -> None:
    src = p.add_argument_group("sources (pick one; default: the local Trackio store)")
    src.add_argument("--watch", metavar="FILE", type=_path,
                     help="follow a file another process writes: a JSONL stream or a Trainer's "
                          "stdout log (told apart by content)")
    src.add_argument("--file-format", choices=("auto", "jsonl", "trainer-log"), default="auto",
                     help="what the watched file holds (default: decided by its content)")
    src.add_argument("--trackio", metavar="URL", type=_text,
                     help="a Trackio server: user/space, https://user-space.hf.space, or "
                          "http://host:port (the URL `trackio show` prints works too)")
    src.add_argument("--job", metavar="JOB_ID", type=_bounded, help="follow a Hugging Face Job")
    src.add_argument("--namespace", type=_bounded, help="namespace of the job (user or org)")
    src.add_argument("--tensorboard", metavar="LOGDIR", type=_path,
                     help="TensorBoard event files under LOGDIR (each folder of them is a run)")
    src.add_argument("--wandb", metavar="PATH", type=_path,
                     help="a W&B run folder (wandb/run-*, wandb/offline-run-*) or a wandb/ folder")
    src.add_argument("--project", type=_nonempty, help="Trackio project")
    src.add_argument("--run", type=_nonempty, help="the run to open (id or name)")
    src.add_argument("--trackio-dir", metavar="DIR", type=_path, help="local Trackio store folder")


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
                   help="watch only: no launch, stop, push, diagnose, jobs or save keys")


def _add_headless_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?", metavar="FILE", type=_path,
                   help="a JSONL stream or a Trainer log (or name a source with the options)")
    _add_source_options(p)
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
                                   "--json: read what the source holds now, print, exit.")
    _add_headless_options(f)
    _add_display_options(f)
    f.add_argument("--json", action="store_true",
                   help="one JSON array, one object per run (for scripts and CI)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="carl-tui", description=DESCRIPTION, epilog=EPILOG,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"carl-tui {__version__}")
    _add_source_options(p)
    _add_view_options(p)

    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
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
    _add_headless_options(s)
    s.add_argument("--json", action="store_true", help="one JSON object (for scripts and CI)")

    e = sub.add_parser("export", help="print every step of a run as JSONL or CSV (no screen)",
                       description="Every step the dashboard holds, one row per step.")
    _add_headless_options(e)
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


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Commands with their own parsers get everything after their name.
    for i, arg in enumerate(argv):
        if arg in ("train", "launch", "serve") and all(a.startswith("-") for a in argv[:i]):
            return _delegate(arg, argv[i + 1 :])
        if not arg.startswith("-"):
            break
    parser = build_parser()
    unknown = _unknown_option(parser, argv)
    if unknown:  # before argparse, which takes the flag's value for a COMMAND
        print(f"carl-tui: {unknown} (see carl-tui --help)", file=sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(argv)
    try:
        if args.command == "fleet" and not args.json and interactive():
            check_view_args(args)
            return run_fleet_screen(args)
        if args.command in ("summary", "export", "fleet"):
            from carl_tui.report.cli import run_report

            return run_report(args)
        check_view_args(args)
        if args.command == "demo":
            return run_demo(args)
        return run_dashboard(args)
    except UsageError as exc:
        print(f"carl-tui: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


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
        import difflib

        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.7)
        return f"unknown option {name[:60]}" + (f"; did you mean {close[0]}?" if close else "")
    return None


def check_view_args(args) -> None:
    """Flags of the dashboard that argparse's types cannot check alone."""
    from carl_tui.ui.keys import check_keymap

    problem = check_keymap(args.keymap)
    if problem:
        raise UsageError(f"--keymap: {problem}")
    from carl_tui.ui.themes import theme_names

    names = theme_names()
    if args.theme not in names:
        why = (f"{args.theme!r} takes its colours from the terminal's palette: its plots "
               "cannot be kept readable" if args.theme.startswith("ansi-")
               else f"unknown theme {args.theme!r}")
        raise UsageError(f"--theme: {why} (themes: {', '.join(names)})")


def _delegate(command: str, rest: list[str]) -> int:
    try:
        if command == "train":
            from carl_tui.training.train import main as train_main
        elif command == "serve":
            from carl_tui.serve.cli import main as train_main  # type: ignore[no-redef]
        else:
            from carl_tui.actions.launch_cli import main as train_main  # type: ignore[no-redef]
    except ImportError as exc:
        extra = {"train": "train", "serve": "serve"}.get(command, "hub")
        print(f"carl-tui {command} needs the [{extra}] extra: pip install 'carl-tui[{extra}]' "
              f"({exc})", file=sys.stderr)
        return EXIT_USAGE
    return int(train_main(rest) or 0)


# -- the dashboard ----------------------------------------------------------------------


def _config(args, opened, *, completions=None, fleet: bool = False, **kw):
    """What the dashboard is given: the sources opened (built after the first frame), the
    user's settings from the flags, the services (the projects to pick from, the
    completions' readers)."""
    from carl_tui.ui.app import DashboardConfig, Services, Settings

    settings = Settings(
        theme=args.theme,
        run=opened.run,
        vocab_size=args.vocab_size,
        gate_metric=args.gate_metric,
        keymap=args.keymap,
        output_dir=getattr(args, "output_dir", None),
        push_repo=getattr(args, "push_repo", None),
        title=opened.title,
        read_only=getattr(args, "read_only", False),
        fleet=fleet,
    )
    services = Services(list_projects=opened.list_projects, open_project=opened.open_project,
                        completions=completions)
    return DashboardConfig(sources=lambda: opened.sources, settings=settings,
                           services=services, **kw)


def check_terminal() -> None:
    """The dashboard reads keys from stdin and draws on stderr: where either is not a
    terminal (a CI log, `< /dev/null`, `2> log`) it would run unseen and unstoppable."""
    import os

    if os.environ.get("TEXTUAL_DRIVER"):  # a driver with its own I/O (a web browser)
        return
    if not (sys.stdin.isatty() and sys.__stderr__ is not None and sys.__stderr__.isatty()):
        raise UsageError("the dashboard needs a terminal on stdin and stderr; in scripts "
                         "and CI, `carl-tui summary` and `carl-tui export` print the run")


def _run_app(config) -> int:
    from carl_tui.ui.app import build_app

    check_terminal()
    app = build_app(config)
    app.run()
    return int(app.return_code or 0)


def run_dashboard(args, **kw) -> int:
    req = dashboard_request(args)
    opened = open_request(req)
    from carl_tui.completions.open import reader_factory

    completions = reader_factory(req, lambda: opened.sources)
    return _run_app(_config(args, opened, completions=completions, **kw))


def interactive() -> bool:
    """Keys come from a terminal and the screen goes to one (else `fleet` prints)."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def run_fleet_screen(args) -> int:
    """`carl-tui fleet [source options]` in a terminal: the dashboard, opened on the fleet
    table of every run the sources hold (esc shows the run under it, r the table again)."""
    return run_dashboard(args, fleet=True)


def start_demo_training(args, who: str, before_start: Callable[[], None] | None = None):
    """The demo's training, in a child process that ends with this one: its stream checked
    (`_demo_stream`), then `before_start` and the packages it needs; started, and said on
    stderr as `who`."""
    import importlib.util

    stream = _demo_stream(args)
    if before_start is not None:
        before_start()
    missing = [m for m in ("torch", "transformers", "trl", "datasets")
               if importlib.util.find_spec(m) is None]
    if missing:
        raise UsageError(
            f"the demo trains a model and needs {', '.join(missing)}: "
            "pip install 'carl-tui[train]' (or run `make demo`)"
        )
    from carl_tui.actions.local_job import LocalJob

    argv = [sys.executable, "-m", "carl_tui.training.demo", "--stream", str(stream),
            "--seed", str(args.seed)]
    if args.stream:
        stream.unlink(missing_ok=True)  # a fresh run, not the tail of an old one
    job = LocalJob.start(argv, stream, tie_to_parent=True)  # training ends with the dashboard
    print(f"{who}: training a tiny model on the CPU; stream {stream}, log {job.log_path}",
          file=sys.stderr)
    return stream, job


def run_demo(args) -> int:
    """Train the tiny model in a child process and watch its stream."""
    from carl_tui.identity import demo_run
    from carl_tui.sources.open import Opened, open_file

    stream, job = start_demo_training(args, "carl-tui demo",
                                      before_start=check_terminal)  # before the training
    run = demo_run(args.seed)
    opened = Opened(lambda: [open_file(stream, "jsonl", run=run)], "carl-tui · demo")
    from carl_tui.completions.open import reader_factory
    from carl_tui.sources.open import SourceRequest

    config = _config(args, opened, on_exit=stop_soon(job),
                     local_jobs=[(run, job)],
                     completions=reader_factory(SourceRequest(watch=str(stream),
                                                              file_format="jsonl"),
                                                lambda: opened.sources))
    try:
        return _run_app(config)
    finally:
        if job.returncode is None:
            print("carl-tui demo: stopping the training", file=sys.stderr)
        job.stop(grace=10, term_grace=5)  # waits for the stop on_exit started, if any


def _demo_stream(args) -> Path:
    """Where the demo writes: `--stream` (an existing file only with `--overwrite`: it
    would be deleted), else a new temporary folder."""
    import tempfile

    if not args.stream:
        return Path(tempfile.mkdtemp(prefix="carl-demo-")) / "stream.jsonl"
    stream = Path(args.stream)
    if stream.is_dir():
        raise UsageError(f"--stream {stream} is a folder; name a file")
    if stream.exists() and not args.overwrite:
        raise UsageError(f"--stream {stream} exists; the demo would replace it: pass "
                         "--overwrite, or name another file")
    return stream


def stop_soon(job) -> Callable[[], None]:
    """The dashboard's `on_exit` for a run tied to it: ask the run to stop on a thread and
    return at once (a trainer that ignores its signals takes up to 15 s to be killed;
    the screen must not hang meanwhile). `run_demo` waits for the stop afterwards."""
    import threading

    def on_exit() -> None:
        threading.Thread(target=job.stop, kwargs={"grace": 10, "term_grace": 5},
                         name="carl-demo-stop", daemon=True).start()

    return on_exit


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
