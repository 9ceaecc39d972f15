"""`carl-tui export SOURCE --completions`: the run's GRPO completions, headless."""

from __future__ import annotations

import sys
from typing import Any

from carl_tui.cli_request import EXIT_NO_DATA, EXIT_USAGE, source_request, write_output
from carl_tui.completions.log import CompletionLog
from carl_tui.completions.readers import reader_factory
from carl_tui.completions.writers import write_csv, write_jsonl
from carl_tui.errors import CarlError


def open_log(args: Any, opened: Any, run: Any, meta: Any, made: list) -> CompletionLog:
    """The completions of `run` from what the command line named, read to the end (a
    server is asked through new connections, kept in `made` for the caller to close: the
    metrics' is closed once read, and older steps are read again when written)."""

    def sources() -> list:
        if not made:
            made.extend(opened.make())
        return made

    readers = reader_factory(source_request(args), sources, live=False)(run, meta)
    log = CompletionLog(readers, keep=8)
    while log.poll():
        pass
    return log


def export_completions(args: Any, opened: Any, run: Any, meta: Any) -> int:
    if args.metrics:
        print("carl-tui: --metrics: not with --completions (a completion's columns are "
              "step, prompt, completion, rewards, advantage)", file=sys.stderr)
        return EXIT_USAGE
    made: list = []
    log = None
    try:
        log = open_log(args, opened, run, meta, made)
        return _write(args, log, run)
    except CarlError as exc:
        print(f"carl-tui: {exc}", file=sys.stderr)
        return EXIT_NO_DATA
    finally:
        if log is not None:
            log.close()
        for s in made:
            s.close()


def _write(args: Any, log: CompletionLog, run: Any) -> int:
    for err in [*log.errors, *filter(None, [log.skipped_text()])]:
        print(f"carl-tui: {err}", file=sys.stderr)
    if not log.steps:
        print(f"carl-tui: run {run.label} has no completions: TRL logs them with "
              "log_completions=True (GRPO)", file=sys.stderr)
        return EXIT_NO_DATA
    write = write_csv if args.out_format == "csv" else write_jsonl
    if args.output:
        n = write_output(args.output, lambda out: write(out, log))
        if n is None:
            return EXIT_NO_DATA
        origins = ", ".join(sorted({log.origin(s) for s in log.steps}))
        print(f"carl-tui: wrote {n} completions of {len(log.steps)} steps (from {origins}) "
              f"to {args.output}", file=sys.stderr)
    else:
        write(sys.stdout, log)
    return 0
