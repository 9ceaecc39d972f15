"""Layering: the non-UI packages never import Textual, the light ones never
import the heavy training stack at import time, and no class or function grows past
what a reader takes in at once."""

import ast
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2] / "carl_tui"
NO_TEXTUAL = ["coherence", "sources", "store", "actions", "report", "events.py", "metric_names.py",
              "hub.py", "redact.py", "errors.py", "identity.py"]
HEAVY = {"torch", "transformers", "trl", "datasets"}


def module_level_imports(path: pathlib.Path) -> set[str]:
    """Top-level package names imported at module level (not inside functions)."""
    tree = ast.parse(path.read_text())
    names = set()
    for node in tree.body:
        stmts = [node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue  # type-checking only, never executed
        if isinstance(node, (ast.If, ast.Try)):
            stmts = list(ast.walk(node))
        for n in stmts:
            if isinstance(n, ast.Import):
                names.update(a.name.split(".")[0] for a in n.names)
            elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
                names.add(n.module.split(".")[0])
    return names


def all_imports(path: pathlib.Path) -> set[str]:
    names = set()
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.Import):
            names.update(a.name.split(".")[0] for a in n.names)
        elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
            names.add(n.module.split(".")[0])
    return names


def files(part: str):
    p = ROOT / part
    return [p] if p.is_file() else sorted(p.rglob("*.py"))


@pytest.mark.parametrize("part", NO_TEXTUAL)
def test_no_textual_outside_ui(part):
    offenders = [str(f) for f in files(part) if {"textual", "textual_plotext"} & all_imports(f)]
    assert offenders == []


def carl_imports(path: pathlib.Path) -> set[str]:
    """carl_tui subpackages a file imports anywhere (`carl_tui.sources.x` -> `sources`)."""
    names = set()
    for n in ast.walk(ast.parse(path.read_text())):
        mods = [a.name for a in n.names] if isinstance(n, ast.Import) else (
            [n.module] if isinstance(n, ast.ImportFrom) and n.module and n.level == 0 else [])
        for m in mods:
            parts = m.split(".")
            if parts[0] == "carl_tui" and len(parts) > 1:
                names.add(parts[1])
    return names


@pytest.mark.parametrize("part,forbidden", [
    ("actions", {"sources", "ui"}),
    ("sources", {"actions", "ui"}),
    ("coherence", {"sources", "actions", "store", "ui"}),
    ("store", {"sources", "actions", "ui"}),
    ("hub.py", {"sources", "actions", "ui"}),
    ("report", {"ui", "actions"}),
])
def test_layers_do_not_reach_sideways(part, forbidden):
    """actions and sources stand apart (the Hub module serves both); nothing below the UI
    imports it."""
    offenders = {str(f): sorted(carl_imports(f) & forbidden) for f in files(part)}
    assert {f: v for f, v in offenders.items() if v} == {}


def test_the_import_contracts_hold():
    """The layers written in pyproject.toml ([tool.importlinter]: commands on top, the
    maths at the bottom, no Textual below the screens), checked by import-linter over
    every import of the package, those inside functions too."""
    importlinter = pytest.importorskip("importlinter.cli")  # in the [test] extra

    sys.path.insert(0, str(ROOT.parent))  # the package of this checkout, not an installed one
    try:
        code = importlinter.lint_imports(config_filename=str(ROOT.parent / "pyproject.toml"),
                                         no_cache=True)
    finally:
        sys.path.remove(str(ROOT.parent))
    assert code == 0  # its report (above, on failure) names each import that breaks a layer


@pytest.mark.parametrize("part", ["coherence", "sources", "store", "actions", "ui", "cli.py"])
def test_no_heavy_imports_at_module_level(part):
    offenders = [str(f) for f in files(part) if HEAVY & module_level_imports(f)]
    assert offenders == []


def test_dashboard_runs_without_the_extras(tmp_path):
    """The base install (no trackio, hub, claude, train) opens a stream and explains the
    actions it cannot do instead of crashing."""
    import subprocess
    import sys

    stream = tmp_path / "s.jsonl"
    stream.write_text('{"step": 1, "loss": 0.5, "entropy": 1.0}\n')
    code = f"""
import asyncio, builtins, sys
blocked = {{"anthropic", "huggingface_hub", "trackio", "torch", "transformers", "trl", "datasets"}}
real = builtins.__import__
def guard(name, *a, **k):
    if name.split(".")[0] in blocked:
        raise ImportError("No module named " + name)
    return real(name, *a, **k)
builtins.__import__ = guard
from carl_tui.actions.action_error import ActionError
from carl_tui.actions.jobs import JobsClient
from carl_tui.sources.jsonl import JsonlSource
from carl_tui.ui.app import DashboardConfig, Settings, build_app
try:
    JobsClient()
except ActionError as exc:
    print("JOBS:", exc)
async def main():
    app = build_app(DashboardConfig(sources=[JsonlSource({str(stream)!r})],
                                    settings=Settings(refresh_interval=0.05)))
    async with app.run_test() as pilot:
        for _ in range(100):
            await pilot.pause(0.05)
            if app.snapshot is not None:
                break
        print("LOSS:", app.snapshot.series["loss"].last)
asyncio.run(main())
"""
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "LOSS: 0.5" in out.stdout
    need = "JOBS: Hugging Face Jobs: this needs huggingface_hub: pip install 'carl-tui[hub]'"
    assert need in out.stdout


#: The house limits: a class a newcomer can read in one sitting, a function on one screen.
MAX_CLASS_LINES = 300
MAX_FUNCTION_LINES = 60


def oversized(path: pathlib.Path, root: pathlib.Path = ROOT.parent) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            limit = MAX_CLASS_LINES
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            limit = MAX_FUNCTION_LINES
        else:
            continue
        lines = node.end_lineno - node.lineno + 1
        if lines > limit:
            found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} "
                         f"is {lines} lines (at most {limit})")
    return found


def test_classes_and_functions_stay_readable():
    offenders = [o for f in sorted(ROOT.rglob("*.py")) for o in oversized(f)]
    assert offenders == []


def test_the_size_check_sees_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    long = tmp_path / "probe.py"
    long.write_text(f"def long():\n{body}\n\n\ndef short():\n    return 1\n")
    assert oversized(long, tmp_path) == [
        f"probe.py:1 long is {MAX_FUNCTION_LINES + 1} lines (at most {MAX_FUNCTION_LINES})"
    ]


FIRST_FRAME_PROBE = """
import asyncio, sys
from carl_tui import cli
from carl_tui.ui.app import CarlApp
HEAVY = ("numpy", "plotext", "textual_plotext", "orjson", "httpx", "huggingface_hub",
         "carl_tui.store", "carl_tui.sources.base", "carl_tui.sources.trackio.local",
         "carl_tui.sources.trackio.remote", "carl_tui.sources.hf_jobs")
args = cli.build_parser().parse_args(sys.argv[1:])
cli.check_view_args(args)
app = CarlApp(cli._config(args, cli.open_request(cli.source_request(args))))
ready = CarlApp.screen_ready
def screen_ready(self):
    print("AT FIRST FRAME:", sorted(m for m in HEAVY if m in sys.modules))
    print("TITLE:", self.dashboard.query_one("Header").screen_title)
    ready(self)
CarlApp.screen_ready = screen_ready
async def main():
    async with app.run_test() as pilot:
        for _ in range(100):
            await pilot.pause(0.05)
            if app.snapshot is not None and app.snapshot.last_step == 39:
                break
        if app.snapshot is not None:
            print("LAST:", app.snapshot.last_step, round(app.snapshot.series["loss"].last, 3))
        print("AFTER:", sorted(m for m in HEAVY if m in sys.modules))
asyncio.run(main())
"""


def first_frame_probe(*argv: str, env: dict[str, str] | None = None) -> str:
    """Run the CLI's dashboard path headless in a fresh interpreter: what is loaded when
    the first frame is on screen, the title, and what is loaded once the run is read."""
    import os
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", FIRST_FRAME_PROBE, *argv], check=False,
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, **(env or {})})
    assert out.returncode == 0, out.stderr
    return out.stdout


def trackio_store(tmp_path, metrics_of):
    """A Trackio folder holding project `proj`: one run of 40 rows, row i's metrics JSON
    `metrics_of(i)` (Trackio's table, as trackio writes it)."""
    import sqlite3

    store = tmp_path / "trackio"
    store.mkdir()
    db = sqlite3.connect(store / "proj.db")
    db.execute("CREATE TABLE metrics (id INTEGER PRIMARY KEY AUTOINCREMENT, timestamp TEXT, "
               "run_id TEXT, run_name TEXT, step INTEGER, metrics TEXT)")
    db.executemany("INSERT INTO metrics (timestamp, run_id, run_name, step, metrics) "
                   "VALUES (?, 'r-1', 'run', ?, ?)",
                   [(f"2026-11-23T10:00:{i:02d}", i, metrics_of(i)) for i in range(40)])
    db.commit()
    db.close()
    return store


def test_the_first_frame_loads_no_reader(tmp_path):
    """The dashboard draws its first frame before numpy, plotext, the store or a
    reader load (they load once it is on screen), then shows the run: here for the
    default source, a local Trackio project, found and checked by the CLI first."""
    store = trackio_store(tmp_path, lambda i: f'{{"loss": {2.5 - i * 0.013}}}')
    out = first_frame_probe("--trackio-dir", str(store))
    assert "AT FIRST FRAME: []" in out
    assert "TITLE: carl-tui · trackio proj" in out
    assert f"LAST: 39 {round(2.5 - 39 * 0.013, 3)}" in out
    assert "AFTER: ['carl_tui.sources.base', 'carl_tui.sources.trackio.local', " \
           "'carl_tui.store', 'numpy'" in out


FIRST_DATA_PROBE = """
import asyncio, sys
from carl_tui import cli
from carl_tui.ui.app import CarlApp
from carl_tui.ui.widgets.metrics_table import MetricsTable
args = cli.build_parser().parse_args(sys.argv[1:])
app = CarlApp(cli._config(args, cli.open_request(cli.source_request(args))))
render_lines_before = MetricsTable.render_lines
def render_lines(self, crop):
    if app.snapshot is not None and not getattr(app, "_probed", False):
        app._probed = True
        print("NUMBERS PAINTED:", app.snapshot.last_step, "plotext" in sys.modules,
              app.dashboard.entropy._plot is not None)
    return render_lines_before(self, crop)
MetricsTable.render_lines = render_lines
async def main():
    async with app.run_test(size=(160, 45)) as pilot:
        plot = app.dashboard.entropy
        for _ in range(100):
            await pilot.pause(0.05)
            if plot._plot is not None and plot.render_cost > 0:
                break
        print("PLOTS:", "plotext" in sys.modules, plot.lines, plot.render_cost > 0)
asyncio.run(main())
"""


def test_a_runs_numbers_are_painted_before_its_plots(tmp_path):
    """The frame that first shows a run's numbers (the metrics table) waits neither for
    plotext to load nor for a plot to be drawn: each plot draws its first figure in the
    next frame."""
    import subprocess
    import sys

    store = trackio_store(
        tmp_path, lambda i: f'{{"loss": {2.5 - i * 0.013}, "entropy": {1.9 - i * 0.02}}}')
    out = subprocess.run([sys.executable, "-c", FIRST_DATA_PROBE, "--trackio-dir", str(store)],
                         check=False, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "NUMBERS PAINTED: 39 False False" in out.stdout
    assert "PLOTS: True ['run'] True" in out.stdout


def test_the_first_frame_of_a_remote_run_loads_no_http_client():
    """`--trackio URL` is checked before the first frame without httpx; the remote
    source is built once the frame is on screen (here it finds no server: no data)."""
    out = first_frame_probe("--trackio", "http://127.0.0.1:9/?project=p")
    assert "AT FIRST FRAME: []" in out
    assert "TITLE: carl-tui · http://127.0.0.1:9" in out
    assert "LAST:" not in out
    assert "'carl_tui.sources.trackio.remote'" in out.split("AFTER:")[1]
    assert "'httpx'" in out.split("AFTER:")[1]


def test_the_first_frame_of_a_job_loads_no_hub_client():
    """`--job` is checked without importing huggingface_hub; the job's source (and the
    Hub client) are built once the first frame is on screen (here the Hub is a closed
    loopback port: the job is retried, never shown)."""
    pytest.importorskip("huggingface_hub")
    out = first_frame_probe("--job", "6910f0a2c3", "--namespace", "alice",
                            env={"HF_ENDPOINT": "http://127.0.0.1:9", "HF_TOKEN": ""})
    assert "AT FIRST FRAME: []" in out
    assert "TITLE: carl-tui · job 6910f0a2c3" in out
    after = out.split("AFTER:")[1]
    assert "'carl_tui.sources.hf_jobs'" in after and "'huggingface_hub'" in after
