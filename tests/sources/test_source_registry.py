"""Adding a kind of source is one module and one registration line: a toy kind
(`--toy FILE`, a file of `step loss` lines) declared here, registered, and then read by
the real command line (`summary`, `fleet --json`), listed by `--help`, its bad values
refused with its own message. Nothing in the parser, the request or the opener is
edited for it: they read the registry."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from carl_tui.cli import main
from carl_tui.events import RunRef, ScalarBatch
from carl_tui.sources.base import Source
from carl_tui.sources.kinds import (
    Flag,
    Opened,
    RequestError,
    SourceKind,
    SourceRequest,
    check_file,
    register,
    registered,
    unregister,
)

# -- the toy kind's module, as a contributor writes it ------------------------------

OPENED: list[str] = []  # the files the toy opener was asked for


class ToySource(Source):
    """A finished file of `step loss` lines, read in one poll."""

    def __init__(self, path: Path, scale: float):
        self.path, self.scale, self.name = path, scale, f"toy: {path.name}"

    def poll(self):
        rows = [(int(s), {"loss": float(v) * self.scale})
                for s, v in (line.split() for line in self.path.read_text().splitlines())]
        self.finished = True
        run = RunRef("toy", "toys", self.path.stem, self.path.stem)
        return [ScalarBatch.from_rows(run, rows)]


def _check(req: SourceRequest, hint) -> None:
    path = req.get("toy")
    if not path.endswith(".toy"):
        raise RequestError(f"--toy: {path} is not a .toy file")
    check_file("--toy", path, req.must_exist, hint)


def _open(req: SourceRequest) -> Opened:
    path, scale = Path(req.get("toy")), float(req.get("toy_scale", 1.0))
    OPENED.append(str(path))
    return Opened(lambda: [ToySource(path, scale)], f"carl-tui · toy {path}", req.run)


TOY = SourceKind(
    name="toy",
    flags=(
        Flag("--toy", metavar="FILE", repeatable=True, help="a toy file of `step loss` lines"),
        Flag("--toy-scale", metavar="X", env="CARL_TOY_SCALE",
             needs=("toy",), needs_message="--toy-scale scales a --toy file: give --toy FILE",
             help="multiply the toy's losses (default: $CARL_TOY_SCALE, else 1)"),
    ),
    open=_open,
    check=_check,
    hint=lambda p, names: (f" (it holds toys: use --toy {p}/FILE.toy)"
                           if any(n.endswith(".toy") for n in names) else ""),
)

TOYS = SourceKind(  # a flag `fleet` alone takes: every toy of a folder
    name="toys",
    flags=(Flag("--toys", metavar="DIR", commands=frozenset({"fleet"}),
                help="every toy file in DIR, one row each"),),
    open=lambda req: Opened(
        lambda: [ToySource(p, 1.0) for p in sorted(Path(req.get("toys")).glob("*.toy"))],
        "carl-tui · toys"),
)

# -- the test ------------------------------------------------------------------------


@pytest.fixture
def toy(tmp_path, monkeypatch):
    monkeypatch.delenv("CARL_TOY_SCALE", raising=False)
    import carl_tui.sources.registry  # noqa: F401  (the built-in kinds first, as in use)

    register(TOY)  # the one registration line (and one for the fleet-only kind)
    register(TOYS)
    OPENED.clear()
    yield tmp_path
    unregister("toy")
    unregister("toys")


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's own errors and --help
        rc = exc.code
    got = capsys.readouterr()
    return rc, got.out, got.err


def toy_file(folder: Path, name: str = "a.toy", losses=(3.0, 2.0, 0.5)) -> Path:
    path = folder / name
    path.write_text("".join(f"{i} {v}\n" for i, v in enumerate(losses)))
    return path


def summary_json(argv: list[str], capsys) -> dict[str, Any]:
    rc, out, err = run(["summary", *argv, "--json"], capsys)
    assert rc == 0, err
    return json.loads(out)


def test_summary_reads_a_toy_file_through_the_registry(toy, capsys):
    path = toy_file(toy)
    got = summary_json(["--toy", str(path)], capsys)
    assert OPENED == [str(path)]  # the registered opener read it, nothing else
    assert got["run"] == "a" and got["source"] == "toy: a.toy"
    assert got["steps_logged"] == 3 and got["last_step"] == 2
    assert got["metrics"]["loss"]["last"] == 0.5 and got["metrics"]["loss"]["max"] == 3.0


def test_help_lists_the_toy_flags_where_declared(toy, capsys):
    _rc, out, _ = run(["summary", "--help"], capsys)
    assert "--toy FILE" in out and "a toy file of `step loss` lines" in out
    assert "--toy-scale X" in out and "--toys" not in out  # `--toys` is fleet's alone
    _rc, out, _ = run(["fleet", "--help"], capsys)
    assert "--toys DIR" in out and "every toy file in DIR" in out
    assert "--watch, --tensorboard, --wandb and --toy repeatable" in " ".join(out.split())


def test_bad_values_get_the_toys_own_messages(toy, capsys):
    rc, _, err = run(["summary", "--toy", str(toy / "a.csv")], capsys)
    assert rc == 2 and f"--toy: {toy / 'a.csv'} is not a .toy file" in err
    rc, _, err = run(["summary", "--toy", str(toy / "gone.toy")], capsys)
    assert rc == 1 and "--toy: no such file" in err
    rc, _, err = run(["summary", "--toy-scale", "2", "--watch", "x.jsonl"], capsys)
    assert rc == 2 and "--toy-scale scales a --toy file: give --toy FILE" in err
    rc, _, err = run(["summary", "--toy", str(toy_file(toy)), "--watch", "x.jsonl"], capsys)
    assert rc == 2 and "--watch and --toy: choose one source" in err
    assert OPENED == []  # refused before anything was opened
    (toy / "d").mkdir()
    toy_file(toy / "d")
    rc, _, err = run(["summary", "--watch", str(toy / "d")], capsys)
    assert rc == 2 and f"use --toy {toy / 'd'}/FILE.toy" in err  # its directory hint


def test_a_companion_flag_and_its_default_from_the_environment(toy, capsys, monkeypatch):
    path = toy_file(toy)
    got = summary_json(["--toy", str(path), "--toy-scale", "10"], capsys)
    assert got["metrics"]["loss"]["last"] == 5.0
    monkeypatch.setenv("CARL_TOY_SCALE", "4")
    got = summary_json(["--toy", str(path)], capsys)
    assert got["metrics"]["loss"]["last"] == 2.0


def test_fleet_reads_each_toy_and_the_fleet_only_flag(toy, capsys):
    a, b = toy_file(toy, "a.toy"), toy_file(toy, "b.toy", (1.0, 0.25))
    rc, out, err = run(["fleet", "--toy", str(a), "--toy", str(b), "--json"], capsys)
    assert rc == 0, err
    rows = json.loads(out)
    assert sorted(r["id"] for r in rows) == ["a", "b"]
    assert OPENED == [str(a), str(b)]
    rc, out, err = run(["fleet", "--toys", str(toy), "--json"], capsys)
    assert rc == 0, err
    assert sorted(r["id"] for r in json.loads(out)) == ["a", "b"]
    rc, _, err = run(["summary", "--toys", str(toy)], capsys)
    assert rc == 2 and "--toys" in err  # not a flag of summary


def test_without_the_registration_there_is_no_toy(capsys):
    """The parser, the request and the opener know the toy only through the registry."""
    assert "toy" not in {k.name for k in registered()}
    rc, _, err = run(["summary", "--toy", "a.toy"], capsys)
    assert rc == 2 and "--toy" in err
