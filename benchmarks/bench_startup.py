"""Opening a run, as a user sees it: `carl-tui` in a real terminal (a pty of 160x45),
timed from process start, on Trackio stores written by trackio's own `bulk_log` and
shaped like a real TRL run (see `trl_store.py`), beside a bare Textual app and
trackio-view 0.1.2 (`--once`) measured in the same run.

    python -m benchmarks startup
    CARL_BENCH_SIZES=100000,1000000,10000000 python -m benchmarks startup

The same run as a JSONL stream (`--watch FILE --file-format jsonl`, previewed from
its end) is timed too (CARL_BENCH_JSONL sizes, default 1,000,000 lines; empty: none).

What is read off the screen (no hooks in carl-tui):

- first frame: the dashboard is painted (its title in the header, its panels
  drawn); for the bare app, its one line of text.
- first useful paint: the run's last step is on screen (the metrics table's step
  column and the status bar) with a phase in the phase panel.
- whole history: the last step is on screen and nothing is marked provisional
  ("≈" before the min/max of a metric, in the phase panel) any more: every row
  was read.
- memory: peak resident memory of the process (VmHWM) by then; the note adds the
  most in use together with its helper processes (sampled while reading).
- idle CPU: CPU time over 10 s of a finished run, 2 s after the whole history.

trackio-view is timed from start to exit (`--once` reads the whole store, prints
and ends). It is optional (the `bench` extra); without it that column says so.
Each program runs with HOME pointing at the store's folder, so both find
~/.cache/huggingface/trackio/trl.db on their own, as a user's would.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
from pathlib import Path

from benchmarks.bare_app import READY
from benchmarks.common import Row
from benchmarks.pty_screen import Screen, Session
from benchmarks.trl_store import ensure_jsonl, ensure_store

SIZE = (160, 45)
# Every phase the panel can name (a run read on a plateau had none of the others: the
# benchmark waited for its timeout).
PHASES = ("BASELINE", "MELTING", "TRANSITION", "PLATEAU", "CRYSTALLISATION", "CONVERGED")
PROVISIONAL = "≈"
IDLE_S = 10.0
TRACKIO_VIEW_MAX = 2_000_000  # beyond this it would hold ~1.5 KB x N of dicts: not run


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TRACKIO_", "HF_", "XDG_", "TEXTUAL"))}
    env.update(HOME=str(home), TERM="xterm-256color", COLORTERM="truecolor",
               HF_HUB_OFFLINE="1", LANG="C.UTF-8")
    return env


def _tool(name: str) -> str | None:
    """A console script of this environment (beside the interpreter), else on PATH."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else shutil.which(name)


def carl_argv() -> list[str]:
    script = _tool("carl-tui")
    return [script] if script else [sys.executable, "-m", "carl_tui"]


def first_frame(screen: Screen) -> bool:
    """The dashboard's first full-screen paint: the title, and the panels drawn."""
    return "carl-tui" in screen.line(0) and "─ metrics ─" in screen.text()


def useful(last_step: int):
    text = str(last_step)

    def check(screen: Screen) -> bool:
        s = screen.text()
        return text in s and any(p in s for p in PHASES)
    return check


def whole(last_step: int):
    shown = useful(last_step)
    return lambda screen: shown(screen) and PROVISIONAL not in screen.text()


def measure_bare(home: Path, idle: bool = False) -> dict:
    argv = [sys.executable, "-m", "benchmarks.bare_app"]
    root = str(Path(__file__).resolve().parents[1])
    with Session(argv, _env(home) | {"PYTHONPATH": root}, size=SIZE, cwd=root) as s:
        t = s.wait_until(lambda sc: READY in sc.text(), 30)
        out = {"frame": t}
        if idle and t is not None:
            s.drain(2.0)
            c0 = s.cpu_s()
            s.drain(IDLE_S)
            out["idle_pct"] = 100 * (s.cpu_s() - c0) / IDLE_S
    return out


def measure_carl(home: Path, last_step: int, timeout: float, idle: bool = False,
                 args: tuple[str, ...] = ()) -> dict:
    with Session(carl_argv() + list(args), _env(home), size=SIZE, cwd=str(home)) as s:
        out = {"frame": s.wait_until(first_frame, 30)}
        out["useful"] = s.wait_until(useful(last_step), timeout)
        helpers = [0.0]

        def done(screen: Screen) -> bool:  # and the most memory in use, helpers included
            helpers[0] = max(helpers[0], s.rss_mb())
            return whole(last_step)(screen)
        out["whole"] = s.wait_until(done, timeout)
        out["helpers_mb"] = helpers[0]
        out["peak_mb"] = s.peak_mb()
        out["rss_mb"] = s.rss_mb()
        if out["whole"] is None:
            out["screen"] = s.screen.text()
        if idle and out["whole"] is not None:
            s.drain(2.0)
            c0 = s.cpu_s()
            s.drain(IDLE_S)
            out["idle_pct"] = 100 * (s.cpu_s() - c0) / IDLE_S
    return out


def measure_trackio_view(home: Path, timeout: float) -> float | None:
    tool = _tool("trackio-view")
    if tool is None:
        return None
    with Session([tool, "--project", "trl", "--once"], _env(home), size=SIZE,
                 cwd=str(home)) as s:
        return s.wait_exit(timeout)


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _load() -> str:
    try:
        one, five, _ = os.getloadavg()
    except OSError:
        return ""
    return f"load {one:.1f}/{five:.1f} on {os.cpu_count()} cores"


def run() -> list[Row]:
    sizes = [int(x) for x in os.environ.get("CARL_BENCH_SIZES", "100000,1000000").split(",") if x]
    repeat = int(os.environ.get("CARL_BENCH_REPEAT", "3"))
    rows: list[Row] = []
    tv_missing = _tool("trackio-view") is None
    for n in sizes:
        home = ensure_store(n)
        last = n - 1
        timeout = max(60.0, n / 20_000)
        reps = repeat if n <= 1_000_000 else 1
        bare = [measure_bare(home, idle=(i == 0 and n == sizes[0])) for i in range(reps)]
        carl = [measure_carl(home, last, timeout, idle=(i == 0)) for i in range(reps)]
        tv_skip = n > TRACKIO_VIEW_MAX
        tv = None if tv_missing or tv_skip else measure_trackio_view(home, max(120.0, n / 10_000))
        b_frame = _median(d["frame"] for d in bare)
        label = f"{n:,} steps"
        note = _load()
        for c in carl:
            if c["whole"] is None:
                print(f"carl-tui never showed the whole history of {label}; screen:\n"
                      f"{c.get('screen', '')}", file=sys.stderr)
        rows.append(Row(f"{label}: first frame (ref: bare Textual app)",
                        _median(c["frame"] for c in carl) or float("nan"), b_frame,
                        target="<= 1.5x bare", note=note))
        rows.append(Row(f"{label}: first useful paint (ref: bare app frame)",
                        _median(c["useful"] for c in carl) or float("nan"), b_frame,
                        target="<= 2x bare"))
        rows.append(Row(f"{label}: whole history shown (ref: trackio-view)",
                        _median(c["whole"] for c in carl) or float("nan"), tv,
                        target="<= 3 s, >= 7x" if n == 1_000_000 else "",
                        note="trackio-view not installed (the bench extra)" if tv_missing
                        else "trackio-view not run: it loads every row as a dict (GBs)"
                        if tv_skip else "ref: trackio-view --once, start to exit"))
        rows.append(Row(f"{label}: peak memory", max(c["peak_mb"] for c in carl), None, "MB",
                        target="<= 150 MB" if n >= 1_000_000 else "",
                        note=f"resident at the end {carl[0]['rss_mb']:.0f} MB; with the "
                             f"helper processes while reading "
                             f"{max(c['helpers_mb'] for c in carl):.0f} MB"))
        idle = [c["idle_pct"] for c in carl if "idle_pct" in c]
        if idle:
            ref_idle = next((d["idle_pct"] for d in bare if "idle_pct" in d), None)
            rows.append(Row(f"{label}: idle CPU, finished run", idle[0], ref_idle, "%",
                            target="< 0.5 %", note="ref: the bare Textual app idle"))
    jsonl_sizes = [int(x) for x in
                   os.environ.get("CARL_BENCH_JSONL", "1000000").split(",") if x]
    for n in jsonl_sizes:
        path = ensure_jsonl(n)
        home = path.parent
        b_frame = _median(measure_bare(home)["frame"] for _ in range(repeat))
        carl = [measure_carl(home, n - 1, max(60.0, n / 20_000),
                             args=("--watch", str(path), "--file-format", "jsonl"))
                for _ in range(repeat if n <= 1_000_000 else 1)]
        label = f"JSONL {n:,} lines"
        rows.append(Row(f"{label}: first useful paint (ref: bare app frame)",
                        _median(c["useful"] for c in carl) or float("nan"), b_frame,
                        target="<= 2x bare", note=_load()))
        rows.append(Row(f"{label}: whole history shown", _median(c["whole"] for c in carl)
                        or float("nan"), None,
                        note=f"peak {max(c['peak_mb'] for c in carl):.0f} MB"))
    return rows


if __name__ == "__main__":
    from benchmarks.common import HEADER

    print(HEADER)
    for row in run():
        print(row.format(), flush=True)
