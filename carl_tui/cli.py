"""Command line: argument parsing, checking and wiring only.

Every flag is checked before a screen opens: a bad one gets one line naming
the flag and what it accepts, and exit status 2 (the options: cli_parser.py). `carl-tui
--help` imports nothing heavy: sources, the UI, the Hub and Claude clients and the
training stack are imported by the command that needs them.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
from collections.abc import Callable, Sequence

from carl_tui.cli_demo import start_demo_training
from carl_tui.cli_parser import (  # noqa: F401  (importable from here too)
    _add_view_options,
    _unknown_option,
    build_parser,
    check_view_args,
)
from carl_tui.cli_request import (  # noqa: F401  (the commands' names, importable here too)
    EXIT_NO_DATA,
    EXIT_USAGE,
    UsageError,
    dashboard_request,
    fleet_requests,
    open_request,
    source_request,
)
from carl_tui.identity import demo_run
from carl_tui.sources.open import Opened, open_file, request


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
            # lazy: the readers and the store load only for summary and export
            from carl_tui.report.commands import run_report

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


def _delegate(command: str, rest: list[str]) -> int:
    try:
        if command == "train":
            # lazy: a command's modules load only for it; a missing extra is answered below
            from carl_tui.training.train import main as train_main
        elif command == "serve":
            # lazy: a command's modules load only for it; a missing extra is answered below
            from carl_tui.serve.command import main as train_main  # type: ignore[no-redef]
        else:
            # lazy: a command's modules load only for it; a missing extra is answered below
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
    # lazy: textual only once a screen opens (not for --help)
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
        guard=dict(getattr(args, "guard", None) or []) or None,
        recording=getattr(args, "command", None) == "replay",
        demo=getattr(args, "command", None) == "demo",
        fleet=fleet,
    )
    ray = getattr(args, "ray_address", None) or os.environ.get("RAY_ADDRESS") or ""
    services = Services(list_projects=opened.list_projects, open_project=opened.open_project,
                        completions=completions,
                        ray_address=ray, list_ray=bool(ray),  # `j` lists a named cluster
                        list_slurm=slurm_here())  # and your Slurm jobs on a login node
    return DashboardConfig(sources=lambda: opened.sources, settings=settings,
                           services=services, **kw)


def slurm_here() -> bool:
    """This machine reaches a Slurm cluster: `squeue` is on PATH and a slurm.conf is named
    (`SLURM_CONF`) or in its usual place."""
    conf = os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
    return shutil.which("squeue") is not None and os.path.exists(conf)


def check_terminal() -> None:
    """The dashboard reads keys from stdin and draws on stderr: where either is not a
    terminal (a CI log, `< /dev/null`, `2> log`) it would run unseen and unstoppable."""
    if os.environ.get("TEXTUAL_DRIVER"):  # a driver with its own I/O (a web browser)
        return
    if not _on_terminal():
        raise UsageError("the dashboard needs a terminal on stdin and stderr; in scripts "
                         "and CI, `carl-tui summary` and `carl-tui export` print the run")


def _on_terminal() -> bool:
    """Keys come from a terminal on stdin and the screen goes to one on stderr."""
    return sys.stdin.isatty() and sys.__stderr__ is not None and sys.__stderr__.isatty()


def _run_app(config) -> int:
    from carl_tui.ui.app import build_app  # lazy: textual only once a screen opens (not for --help)

    check_terminal()
    app = build_app(config)
    app.run()
    return int(app.return_code or 0)


def run_dashboard(args, **kw) -> int:
    req = dashboard_request(args)
    return _run_opened(args, req, open_request(req), **kw)


def _run_opened(args, req, opened, *, completions_of=None, **kw) -> int:
    # lazy: numpy and the readers load after the first frame
    from carl_tui.completions.readers import reader_factory

    completions = reader_factory(req, completions_of or (lambda: opened.sources))
    return _run_app(_config(args, opened, completions=completions, **kw))


def interactive() -> bool:
    """Keys come from a terminal and the screen goes to one (else `fleet` prints)."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def run_fleet_screen(args) -> int:
    """`carl-tui fleet [source options]` in a terminal: the dashboard, opened on the fleet
    table of every run the sources hold (esc shows the run under it, r the table again).
    Several sources: each is checked first (a bad flag: one line, exit status 2), then
    all are read together; the completions' readers are the first source's."""
    named = fleet_requests(args)
    opened = [open_request(req) for _label, req in named]
    if len(opened) == 1:
        return _run_opened(args, named[0][1], opened[0], fleet=True)
    both = Opened(lambda: [s for o in opened for s in o.sources],
                  f"carl-tui · fleet of {len(opened)} sources")
    first = opened[0]
    return _run_opened(args, named[0][1], both, fleet=True,
                       completions_of=lambda: first.sources)


def run_demo(args) -> int:
    """Train the tiny model in a child process and watch its stream."""
    stream, job = start_demo_training(args, "carl-tui demo",
                                      before_start=check_terminal)  # before the training
    run = demo_run(args.seed)
    opened = Opened(lambda: [open_file(stream, "jsonl", run=run)], "carl-tui · demo")
    # lazy: numpy and the readers load after the first frame
    from carl_tui.completions.readers import reader_factory

    config = _config(args, opened, on_exit=stop_soon(job),
                     local_jobs=[(run, job)],
                     completions=reader_factory(request(watch=str(stream),
                                                        file_format="jsonl"),
                                                lambda: opened.sources))
    try:
        return _run_app(config)
    finally:
        if job.returncode is None:
            print("carl-tui demo: stopping the training", file=sys.stderr)
        job.stop(grace=10, term_grace=5)  # waits for the stop on_exit started, if any


def stop_soon(job) -> Callable[[], None]:
    """The dashboard's `on_exit` for a run tied to it: ask the run to stop on a thread and
    return at once (a trainer that ignores its signals takes up to 15 s to be killed;
    the screen must not hang meanwhile). `run_demo` waits for the stop afterwards."""
    def on_exit() -> None:
        threading.Thread(target=job.stop, kwargs={"grace": 10, "term_grace": 5},
                         name="carl-demo-stop", daemon=True).start()

    return on_exit


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
