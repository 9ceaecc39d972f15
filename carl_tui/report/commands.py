"""`carl-tui summary`, `export` and `fleet`: read a source headless, print, exit.

Exit status: 0 printed; 1 the source holds no run (or not the one asked for)
or could not be read; 2 a bad flag.
"""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from carl_tui.cli_request import (
    EXIT_NO_DATA,
    UsageError,
    fleet_requests,
    source_request,
    write_output,
)
from carl_tui.cli_request import fail as _fail
from carl_tui.errors import CarlError, describe
from carl_tui.report.collect import collect
from carl_tui.report.completions_export import export_completions
from carl_tui.report.export import (
    HEALTH,
    PHASE_COLUMNS,
    BatchCollector,
    health_by_step,
    merge_steps,
    phase_columns,
    select,
    with_derived_phi,
    with_run_summary,
    write_csv,
    write_jsonl,
)
from carl_tui.report.fleet_listing import fleet_dict, fleet_text, job_prices
from carl_tui.report.summary import summary_dict, summary_text
from carl_tui.sources.open import RequestError, check_request, open_sources
from carl_tui.store import RunStore
from carl_tui.store.fleet import FLEET_STORE, fleet_rows


def _say(message: str) -> None:
    print(f"carl-tui: {message}", file=sys.stderr, flush=True)


def _check_output(path: str | None) -> None:
    """`-o FILE`: a file that can be made, said before the source is read."""
    if path is None:
        return
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"-o: {path} is a directory; give a file name")
    if not p.parent.is_dir():
        raise UsageError(f"-o: no such directory: {p.parent}")


EXIT_PIPE = 128 + 13  # what a shell reports for a tool ended by SIGPIPE


def run_report(args) -> int:
    """Print, or fail in one line; a reader that stops early (`| head`) ends it quietly,
    as it ends any Unix tool."""
    try:
        rc = _report(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at /dev/null so that flush
        # cannot fail too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_PIPE
    return rc


def _report(args) -> int:
    if args.command == "fleet":
        return _fleet(args)
    batches = BatchCollector() if args.command == "export" else None
    read = read_sources(args, batches)
    if isinstance(read, int):
        return read
    opened, store, described = read
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
        return export_completions(args, opened, run, snap.meta)
    if args.command == "summary":
        d = summary_dict(snap, described, store.summary())
        print(json.dumps(d) if args.json else summary_text(d))
        return 0
    return _export(args, batches, run.key, snap)


def read_sources(args, batches: BatchCollector | None = None, req=None, **sizes: int):
    """Open the sources the command line names (or `req`) and read what they hold now
    into a store: (what was opened, the store, the sources' names), or the exit status
    once it is said in one line why nothing could be read. `sizes`: the store's
    (`RunStore`)."""
    _check_output(getattr(args, "output", None))
    req = source_request(args, must_exist=True) if req is None else req
    try:
        opened = open_sources(req)
    except RequestError as exc:
        if exc.kind != "not_found":
            raise UsageError(str(exc)) from None
        return _fail(str(exc))  # nothing there: like an empty run
    store = RunStore(vocab_size=args.vocab_size, gate_metric=args.gate_metric, **sizes)
    described = ", ".join(s.name for s in opened.sources)
    try:
        collect(opened.sources, store, timeout=args.timeout, on_events=batches,
                patient=req.remote, say=_say)
    except CarlError as exc:
        return _fail(str(exc) if exc.kind == "empty" else f"could not read it: {exc}")
    return opened, store, described


def _fleet(args) -> int:
    """`carl-tui fleet`: every run the sources hold, as a JSON array or a table."""
    named = fleet_requests(args, must_exist=True)
    if len(named) == 1:
        read = read_sources(args, req=named[0][1], **FLEET_STORE)
        if isinstance(read, int):
            return read
        _opened, store, described = read
    else:
        store, described = read_each(args, named)
    rows = fleet_rows(store)
    if not rows:
        return _fail(f"{described} holds no run yet")
    prices = job_prices(rows, _say)  # asked only when a run is a job
    if prices:
        rows = fleet_rows(store, prices=prices)
    print(json.dumps([fleet_dict(r) for r in rows], default=str) if args.json
          else fleet_text(rows))
    return 0


def read_each(args, named) -> tuple[RunStore, str]:
    """Several sources (`fleet`), read at once into one store: (the store, their flags).
    A bad flag is refused before anything is read (exit status 2, as for one source); a
    source that cannot be read (no such file, a server that does not answer, nothing in
    it) is said in one line naming its flag, and the others are read."""

    for _label, req in named:
        try:
            check_request(req)
        except RequestError as exc:
            if exc.kind != "not_found":
                raise UsageError(str(exc)) from None
    store = RunStore(vocab_size=args.vocab_size, gate_metric=args.gate_metric, **FLEET_STORE)

    def read(label: str, req) -> str | None:
        try:
            opened = open_sources(req)
            collect(opened.sources, store, timeout=args.timeout, patient=req.remote,
                    say=lambda m: _say(f"{label}: {m}"))
        except RequestError as exc:
            return str(exc)  # it names the flag
        except CarlError as exc:
            return f"{label}: {exc if exc.kind == 'empty' else f'could not read it: {exc}'}"
        except Exception as exc:  # noqa: BLE001 - one source's failure: said, the others read
            return f"{label}: could not read it: {describe(exc)}"
        return None

    with ThreadPoolExecutor(max_workers=len(named), thread_name_prefix="fleet") as pool:
        problems = list(pool.map(lambda n: read(*n), named))
    for problem in filter(None, problems):
        _say(problem)
    return store, ", ".join(label for label, _ in named)


def pick_run(store: RunStore, wanted: str | None):
    """The run asked for (key, id or name), else the most recently active one."""
    runs = store.runs()
    if wanted:
        return next((r for r in runs if r.answers_to(wanted)), None)
    return store.most_recent()


def _export(args, batches: BatchCollector, key: str, snap) -> int:
    steps, columns = merge_steps(batches.batches.get(key, []))
    steps, columns = with_run_summary(steps, columns, snap.meta.get("train_summary_step"),
                                      snap.meta.get("train_summary"))
    columns = with_derived_phi(columns, snap.vocab_size)
    # The phase of each step, and the health flags standing at it (unless the run logs a
    # metric of that name: it keeps its own); `--metrics` names them to keep them.
    extra = list(PHASE_COLUMNS) if snap.phase.dated else []
    if HEALTH not in columns:
        extra.append(HEALTH)
    try:
        names = select(columns, args.metrics, extra)
    except KeyError as exc:
        raise UsageError(f"--metrics: not logged by this run: {exc.args[0]} "
                         f"(logged: {', '.join(sorted(columns))}, and "
                         f"{', '.join(extra)})") from None
    columns = {**columns, **(phase_columns(steps, snap.phase.dated) if snap.phase.dated
                             else {})}
    if HEALTH in extra:
        columns[HEALTH] = health_by_step(steps, snap.health)
    write = write_csv if args.out_format == "csv" else write_jsonl
    if args.output:
        n = write_output(args.output, lambda out: write(out, steps, columns, names))
        if n is None:
            return EXIT_NO_DATA
        print(f"carl-tui: wrote {n} steps to {args.output}", file=sys.stderr)
    else:
        write(sys.stdout, steps, columns, names)
    return 0
