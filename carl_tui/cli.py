"""Command line: argument parsing and wiring only.

`carl-tui --help` imports nothing heavy: sources, the UI, the Hub and Claude
clients and the training stack are imported by the command that needs them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from carl_tui import __version__

DESCRIPTION = """\
Watch a language-model training run live: phi (the CARL order parameter),
entropy, the phase of the run and the crystallisation gate.

With no source option, carl-tui opens the most recently active run of the
local Trackio store ($TRACKIO_DIR, else $HF_HOME/trackio, else
~/.cache/huggingface/trackio)."""

EPILOG = """\
commands:
  carl-tui demo                 train a tiny model on the CPU and watch it live
  carl-tui replay FILE          play a recorded stream back
  carl-tui train ...            train a real model with the CARL callback (needs [train])
  carl-tui launch ...           launch a GRPO job on Hugging Face Jobs (needs [hub])

examples:
  carl-tui --watch runs/stream.jsonl --vocab-size 151936
  carl-tui --trackio user/my-trackio-space --project grpo
  carl-tui --job 6910f0a2c3 --namespace my-org"""


def _keymap(text: str) -> dict[str, str]:
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        if "=" not in part:
            raise argparse.ArgumentTypeError(f"keymap entry {part!r} is not binding.id=key")
        bid, key = part.split("=", 1)
        out[bid.strip()] = key.strip()
    return out


def _positive_float(text: str) -> float:
    v = float(text)
    if v < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return v


def _add_view_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("display")
    g.add_argument("--theme", default="carl-dark", help="colour theme (carl-dark, carl-light)")
    g.add_argument("--vocab-size", type=int, default=None,
                   help="vocabulary size, to derive phi = 1 - entropy / ln V for runs without phi")
    g.add_argument("--gate-metric", default="mean_token_accuracy",
                   help="metric the phase-transition gate watches (default: mean_token_accuracy)")
    g.add_argument("--output-dir", metavar="DIR",
                   help="the run's output directory, for pushing checkpoints (p)")
    g.add_argument("--push-repo", metavar="REPO", help="default Hub repo for pushing checkpoints")
    g.add_argument("--keymap", type=_keymap, default={},
                   help="remap keys: 'app.quit=ctrl+q,app.pick_run=R' (ids are listed by ?)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="carl-tui",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"carl-tui {__version__}")
    src = p.add_argument_group("sources (pick one; default: local Trackio)")
    src.add_argument("--watch", metavar="PATH", help="tail a JSONL stream another process writes")
    src.add_argument("--trackio", metavar="URL",
                     help="a Trackio server: https://user-space.hf.space, user/space, or http://host:port")
    src.add_argument("--job", metavar="JOB_ID", help="follow a Hugging Face Job")
    src.add_argument("--namespace", help="namespace of the job (user or org)")
    src.add_argument("--project", help="Trackio project")
    src.add_argument("--run", help="run to open first (run id or name)")
    src.add_argument("--trackio-dir", metavar="DIR", help="local Trackio store folder")
    _add_view_options(p)

    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    r = sub.add_parser("replay", help="play a recorded stream back in real time")
    r.add_argument("file", help="a JSONL stream recorded by the CARL callback")
    r.add_argument("--speed", type=_positive_float, default=1.0,
                   help="playback speed (2 = twice as fast, 0 = as fast as possible)")
    _add_view_options(r)

    d = sub.add_parser("demo", help="train a tiny model on the CPU and watch it live")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--stream", metavar="PATH", help="where the run's stream is written "
                   "(default: a temporary file)")
    _add_view_options(d)

    # train and launch parse their own arguments (their modules import heavy libraries).
    sub.add_parser("train", help="train a model with the CARL callback and reward (needs [train])",
                   add_help=False)
    sub.add_parser("launch", help="launch a GRPO job on Hugging Face Jobs (needs [hub])",
                   add_help=False)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Commands with their own parsers get everything after their name.
    for i, arg in enumerate(argv):
        if arg in ("train", "launch") and all(a.startswith("-") for a in argv[:i]):
            return _delegate(arg, argv[i + 1 :])
        if not arg.startswith("-"):
            break
    args = build_parser().parse_args(argv)
    try:
        if args.command == "replay":
            return run_replay(args)
        if args.command == "demo":
            return run_demo(args)
        return run_dashboard(args)
    except UsageError as exc:
        print(f"carl-tui: {exc}", file=sys.stderr)
        return 2


class UsageError(Exception):
    """A problem with what the user asked for, printed without a traceback."""


def _delegate(command: str, rest: list[str]) -> int:
    try:
        if command == "train":
            from carl_tui.training.train import main as train_main
        else:
            from carl_tui.actions.launch_cli import main as train_main  # type: ignore[no-redef]
    except ImportError as exc:
        extra = "train" if command == "train" else "hub"
        print(f"carl-tui {command} needs the [{extra}] extra: pip install 'carl-tui[{extra}]' "
              f"({exc})", file=sys.stderr)
        return 2
    return int(train_main(rest) or 0)


# -- wiring -------------------------------------------------------------------


def _config(args, sources, **kw):
    from carl_tui.store import RunStore
    from carl_tui.ui.app import DashboardConfig

    store = RunStore(vocab_size=args.vocab_size, gate_metric=args.gate_metric)
    return DashboardConfig(
        sources=sources,
        store=store,
        theme=args.theme,
        run=getattr(args, "run", None),
        vocab_size=args.vocab_size,
        keymap=args.keymap,
        output_dir=getattr(args, "output_dir", None),
        push_repo=getattr(args, "push_repo", None),
        **kw,
    )


def _run_app(config) -> int:
    from carl_tui.ui.app import build_app

    build_app(config).run()
    return 0


def dashboard_sources(args) -> tuple[list, str, dict]:
    """The sources the options ask for, a title, and extra app settings."""
    if args.watch:
        from carl_tui.sources.jsonl import JsonlSource

        return [JsonlSource(Path(args.watch))], f"carl-tui · {args.watch}", {}
    if args.trackio:
        from carl_tui.sources.trackio_remote import TrackioRemoteSource, normalize_url

        url = normalize_url(args.trackio)
        source = TrackioRemoteSource(url, project=args.project)
        projects = {
            "list_projects": source.list_projects,
            "open_project": lambda name: TrackioRemoteSource(url, project=name),
        }
        return [source], f"carl-tui · {url}", projects
    if args.job:
        try:
            from carl_tui.sources.hf_jobs import HfJobSource
        except ImportError as exc:
            raise UsageError(f"--job needs the [hub] extra: pip install 'carl-tui[hub]' ({exc})")
        return [HfJobSource(args.job, namespace=args.namespace)], f"carl-tui · job {args.job}", {}
    from carl_tui.sources import trackio_local as tl

    root = Path(args.trackio_dir) if args.trackio_dir else tl.trackio_dir()
    project = args.project
    if project is None:
        recent = tl.most_recent(root)
        if recent is None:
            raise UsageError(
                f"no Trackio projects in {root}. Point --trackio-dir or $TRACKIO_DIR at a "
                "Trackio store, or use --watch PATH, --trackio URL, --job ID, or try "
                "`carl-tui demo`."
            )
        project, run_id = recent
        if args.run is None:
            args.run = run_id
    elif not tl.db_path(project, root).exists():
        names = ", ".join(p.name for p in tl.list_projects(root)) or "none"
        raise UsageError(f"no Trackio project {project!r} in {root} (projects: {names})")
    projects = {
        "list_projects": lambda: [p.name for p in tl.list_projects(root)],
        "open_project": lambda name: tl.TrackioLocalSource(name, root=root),
    }
    return [tl.TrackioLocalSource(project, root=root)], f"carl-tui · trackio {project}", projects


def run_dashboard(args) -> int:
    sources, title, extra = dashboard_sources(args)
    return _run_app(_config(args, sources, title=title, **extra))


def run_replay(args) -> int:
    from carl_tui.sources.replay import ReplaySource

    path = Path(args.file)
    if not path.exists():
        raise UsageError(f"no such file: {path}")
    speed = float("inf") if args.speed == 0 else args.speed
    return _run_app(_config(args, [ReplaySource(path, speed=speed)], title=f"carl-tui · replay {path.name}"))


def run_demo(args) -> int:
    """Train the tiny model in a child process and watch its stream."""
    import importlib.util
    import tempfile

    missing = [m for m in ("torch", "transformers", "trl", "datasets") if importlib.util.find_spec(m) is None]
    if missing:
        raise UsageError(
            f"the demo trains a model and needs {', '.join(missing)}: "
            "pip install 'carl-tui[train]' (or run `make demo`)"
        )
    from carl_tui.actions.local_job import LocalJob
    from carl_tui.sources.jsonl import JsonlSource

    if args.stream:
        stream = Path(args.stream)
        stream.unlink(missing_ok=True)  # a fresh run, not the tail of an old one
    else:
        stream = Path(tempfile.mkdtemp(prefix="carl-demo-")) / "stream.jsonl"
    argv = [sys.executable, "-m", "carl_tui.training.demo", "--stream", str(stream),
            "--seed", str(args.seed)]
    from carl_tui.events import RunRef

    job = LocalJob.start(argv, stream)
    print(f"carl-tui demo: training a tiny model on the CPU; stream {stream}, "
          f"log {job.log_path}", file=sys.stderr)
    run = RunRef("demo", "carl-demo", f"tiny-reverse-seed{args.seed}", f"tiny-reverse (seed {args.seed})")
    config = _config(args, [JsonlSource(stream, run=run)], title="carl-tui · demo",
                     on_exit=lambda: job.stop(grace=10, term_grace=5), local_jobs=[(run, job)])
    try:
        return _run_app(config)
    finally:
        job.stop(grace=10, term_grace=5)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
