"""Import circles: a module that imports (anywhere in it, type-checking blocks and
function bodies included) a module that imports it back, directly or through others,
cannot be read or changed alone. These modules once stood in such circles and do no
more; the check reads the import statements, so it sees a circle before it bites."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def module_files(root: pathlib.Path, package: str) -> dict[str, pathlib.Path]:
    """Every module of the package by its dotted name (a package by its own)."""
    out = {}
    for path in (root / package).rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports_of(name: str, path: pathlib.Path, modules: dict[str, pathlib.Path]) -> set[str]:
    """The package's modules that `name` imports, anywhere in its file."""
    found = set()
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            wanted = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            subs = [f"{mod}.{a.name}" for a in node.names]
            wanted = [s for s in subs if s in modules] or [mod]
        else:
            continue
        for target in wanted:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def circle_through(start: str, root: pathlib.Path = ROOT) -> list[str]:
    """A chain of imports from `start` back to itself ([] when there is none)."""
    modules = module_files(root, start.split(".")[0])
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    paths, seen = [[start]], {start}
    while paths:
        path = paths.pop()
        for nxt in sorted(graph[path[-1]]):
            if nxt == start:
                return path + [start]
            if nxt not in seen:
                seen.add(nxt)
                paths.append(path + [nxt])
    return []


@pytest.mark.parametrize("module", [
    "carl_tui.store.run", "carl_tui.store.run_snapshot",
    "carl_tui.report.commands", "carl_tui.report.completions_export",
])
def test_module_stands_in_no_import_circle(module):
    assert circle_through(module) == []


def test_the_check_sees_a_circle(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .. import a\n")
    (pkg / "c.py").write_text("import pkg.a\n")
    assert circle_through("pkg.a", tmp_path) == ["pkg.a", "pkg.sub.b", "pkg.a"]
    assert circle_through("pkg.c", tmp_path) == []
