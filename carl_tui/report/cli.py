"""`carl-tui summary` and `carl-tui export`: read a source headless, print, exit.

Exit status: 0 printed; 1 the source holds no run (or not the one asked for)
or could not be read; 2 a bad flag.
"""

from __future__ import annotations

import json
import sys

from carl_tui.cli import EXIT_NO_DATA, UsageError, open_request, source_request
from carl_tui.errors import CarlError
from carl_tui.report.collect import collect
from carl_tui.report.export import (
    BatchCollector,
    merge_steps,
    select,
    with_derived_phi,
    write_csv,
    write_jsonl,
)
from carl_tui.report.summary import summary_dict, summary_text
from carl_tui.store import RunStore


def _fail(message: str) -> int:
    print(f"carl-tui: {message}", file=sys.stderr)
    return EXIT_NO_DATA


def run_report(args) -> int:
    opened = open_request(source_request(args, must_exist=True))
    store = RunStore(vocab_size=args.vocab_size, gate_metric=args.gate_metric)
    batches = BatchCollector() if args.command == "export" else None
    described = ", ".join(s.name for s in opened.sources)
    try:
        collect(opened.sources, store, timeout=args.timeout, on_events=batches)
    except CarlError as exc:
        return _fail(f"could not read it: {exc}")
    run = pick_run(store, opened.run)
    if run is None:
        runs = ", ".join(r.label for r in store.runs())
        if opened.run:
            return _fail(f"no run {opened.run!r} in {described} (runs: {runs or 'none'})")
        return _fail(f"{described} holds no run yet")
    snap = store.snapshot(run.key, max_points=2)
    if snap is None or not snap.series:
        return _fail(f"run {run.label} has no metrics: no Trainer log dict, stream line or "
                     "tracker row with a number in it")
    if getattr(args, "completions", False):
        from carl_tui.report.completions import export_completions

        return export_completions(args, opened, run, snap.meta)
    if args.command == "summary":
        d = summary_dict(snap, described, store.summary())
        print(json.dumps(d) if args.json else summary_text(d))
        return 0
    return _export(args, batches, run.key, snap.vocab_size)


def pick_run(store: RunStore, wanted: str | None):
    """The run asked for (key, id or name), else the most recently active one."""
    runs = store.runs()
    if wanted:
        return next((r for r in runs if wanted in (r.key, r.run_id, r.name)), None)
    if not runs:
        return None

    def newest(r):
        snap = store.snapshot(r.key, max_points=2)
        return (snap.updated_at or 0.0) if snap is not None else 0.0

    return max(runs, key=newest)


def _export(args, batches: BatchCollector, key: str, vocab_size: int | None) -> int:
    steps, columns = merge_steps(batches.batches.get(key, []))
    columns = with_derived_phi(columns, vocab_size)
    try:
        names = select(columns, args.metrics)
    except KeyError as exc:
        raise UsageError(f"--metrics: not logged by this run: {exc.args[0]} "
                         f"(logged: {', '.join(sorted(columns))})") from None
    write = write_csv if args.out_format == "csv" else write_jsonl
    if args.output:
        with open(args.output, "w", encoding="utf-8", newline="") as out:
            n = write(out, steps, columns, names)
        print(f"carl-tui: wrote {n} steps to {args.output}", file=sys.stderr)
    else:
        write(sys.stdout, steps, columns, names)
    return 0
