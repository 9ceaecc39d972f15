"""`carl-tui serve`: its options, and the dashboard options it serves.

    carl-tui serve [--host 127.0.0.1] [--port 8000] [--allow-actions] [--max-sessions 8]
                   [dashboard options: a source, `replay FILE ...`, `demo ...`, view options]

The dashboard options are `carl-tui`'s own, checked here as `carl-tui` checks them, before
anything is served. Each browser tab runs `python -m carl_tui <those options>`, read-only
unless `--allow-actions`. The demo trains once, here, and every tab watches that run.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import socket
import sys
from collections.abc import Sequence

from carl_tui.cli_demo import start_demo_training
from carl_tui.cli_parser import Parser, build_parser, check_view_args
from carl_tui.cli_request import EXIT_USAGE, UsageError, dashboard_request, open_request
from carl_tui.redact import redact

DESCRIPTION = """\
Serve the dashboard to web browsers: each tab gets its own dashboard, the one
`carl-tui [dashboard options]` shows. The server prints one URL holding a random
token; a request without it is refused. It listens on 127.0.0.1 unless --host says
otherwise: from another machine, use an SSH tunnel (ssh -N -L 8000:127.0.0.1:8000 host)."""

EPILOG = """\
dashboard options: any of `carl-tui --help`'s (a source, the view options), or
`replay FILE ...`, or `demo ...`. Examples:
  carl-tui serve --watch runs/stream.jsonl
  carl-tui serve --port 8080 --tensorboard runs/
  carl-tui serve --max-sessions 2 demo"""

READ_ONLY_FLAG = "--read-only"


def _port(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = -1
    if not 0 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: give a port number, 1 to 65535 (0: any free)")
    return v


def _sessions(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number >= 1")
    return v


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = 0.0
    if not 0 < v < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of seconds > 0")
    return v


def build_serve_parser() -> argparse.ArgumentParser:
    p = Parser(prog="carl-tui serve", description=DESCRIPTION, epilog=EPILOG,
                allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=_port, default=8000, help="port (default 8000; 0: any free)")
    p.add_argument("--allow-actions", action="store_true",
                   help="let visitors use the keys that act: launch, stop, push, diagnose, "
                        "jobs, save (default: read-only)")
    p.add_argument("--max-sessions", type=_sessions, default=8,
                   help="dashboards (browser tabs) at once (default 8)")
    p.add_argument("--idle-timeout", type=_seconds, default=15.0, metavar="SECONDS",
                   help="close a connection that sends nothing, or no whole request, for "
                        "this long (default 15)")
    return p


def dashboard_argv(options: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """The dashboard options checked as `carl-tui` checks them (UsageError, or exit 2 from
    argparse), and the argument list each session's dashboard gets."""
    args = build_parser().parse_args(list(options))
    if args.command not in (None, "replay", "demo"):
        raise UsageError(f"serve shows the dashboard, not `{args.command}`: give a source, "
                         "`replay FILE` or `demo`")
    check_view_args(args)
    if args.command == "demo":
        return args, []  # the stream is known once the training starts (start_demo)
    open_request(dashboard_request(args))  # as `carl-tui` opens it
    return args, list(options)


def _view_options(args: argparse.Namespace) -> list[str]:
    out = ["--theme", args.theme, "--gate-metric", args.gate_metric]
    if args.vocab_size is not None:
        out += ["--vocab-size", str(args.vocab_size)]
    if args.keymap:
        out += ["--keymap", ",".join(f"{k}={v}" for k, v in args.keymap.items())]
    for flag, value in (("--output-dir", args.output_dir), ("--push-repo", args.push_repo)):
        if value:
            out += [flag, value]
    for flag, action in args.guard or ():
        out += ["--guard", f"{flag}={action}"]
    if args.read_only:
        out.append(READ_ONLY_FLAG)
    return out


def start_demo(args: argparse.Namespace):
    """Train the tiny model once, in a child process that ends with this one; returns the
    job and what each tab runs to watch it."""
    stream, job = start_demo_training(args, "carl-tui serve")
    return job, ["--watch", str(stream), "--file-format", "jsonl", *_view_options(args)]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main(argv: Sequence[str] | None = None) -> int:
    opts, rest = build_serve_parser().parse_known_args(
        list(sys.argv[2:] if argv is None else argv))
    job = None
    try:
        args, options = dashboard_argv(rest)
        try:
            # lazy: the [serve] extra, for `carl-tui serve` only; the [serve] extra, as above
            import aiohttp  # noqa: F401
            import textual_serve  # noqa: F401
        except ImportError as exc:
            raise UsageError("serve needs the [serve] extra: pip install 'carl-tui[serve]' "
                             f"({exc})") from None
        if args.command == "demo":
            job, options = start_demo(args)
        if not opts.allow_actions:
            options.append(READ_ONLY_FLAG)
        return serve([sys.executable, "-m", "carl_tui", *options], opts)
    except UsageError as exc:
        print(f"carl-tui serve: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if job is not None:
            job.stop(grace=10, term_grace=5)


def announce(argv: Sequence[str], opts: argparse.Namespace, token: str, port: int) -> None:
    """What the server says when it listens: the URL first, then how it is set up."""
    host = opts.host
    shown = socket.gethostname() if host in ("0.0.0.0", "::", "") else host
    if ":" in shown:
        shown = f"[{shown}]"
    shown_cmd = redact(" ".join(["carl-tui", *argv[3:]]))
    mode = "visitors may act (--allow-actions)" if opts.allow_actions else \
        "read-only: no launch, stop, push, diagnose, jobs or save keys"
    print(f"carl-tui serve: open http://{shown}:{port}/?token={token}", flush=True)
    print(f"carl-tui serve: each tab runs `{shown_cmd}`; {mode}; at most "
          f"{opts.max_sessions} at once; Ctrl+C stops the server and every tab's dashboard",
          file=sys.stderr, flush=True)
    if not is_loopback(host):
        print(f"carl-tui serve: WARNING: listening on {host}, not only on this machine: anyone "
              f"who can reach port {port} and has the URL can watch this run"
              f"{' and act on it' if opts.allow_actions else ''}. The safer way: the default "
              f"host and an SSH tunnel (ssh -N -L {port}:127.0.0.1:{port} this-host)",
              file=sys.stderr, flush=True)


def serve(argv: list[str], opts: argparse.Namespace) -> int:
    # lazy: the [serve] extra, only for `carl-tui serve`
    from carl_tui.serve.server import CarlServer

    logging.basicConfig(level=logging.INFO, format="carl-tui serve: %(message)s")
    server = CarlServer(argv, host=opts.host, port=opts.port, max_sessions=opts.max_sessions,
                        idle_timeout=opts.idle_timeout)
    try:
        asyncio.run(server.run(lambda port: announce(argv, opts, server.token, port)))
    except OSError as exc:
        print(f"carl-tui serve: cannot listen on {opts.host}:{opts.port}: "
              f"{exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0
