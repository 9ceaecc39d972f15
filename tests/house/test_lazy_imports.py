"""Imports live at the top of their modules, where a reader sees what a module depends
on. An import inside a function is kept only for a reason written on it (`# lazy: ...`,
on its line or the line above; one reason above a group of imports serves the group): a
heavy optional dependency loaded only by the command that needs it, an import cycle it
breaks, or the first frame it keeps fast."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2] / "carl_tui"
MARK = "# lazy:"

#: Modules whose in-function imports are not yet sorted out (they were being changed
#: elsewhere when the rest were), with how many each has at most: the count only shrinks.
NOT_YET_SORTED: dict[str, int] = {}


def function_imports(source: str) -> list[tuple[int, bool]]:
    """(line, has a reason) of each import inside a function of `source`."""
    lines = source.splitlines()
    found: list[tuple[int, bool]] = []

    def walk(node: ast.AST, in_function: bool) -> None:
        explained = False  # the import just before, in the same body, has a reason
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                around = lines[max(child.lineno - 2, 0):child.end_lineno]
                explained = explained or any(MARK in line for line in around)
                found.append((child.lineno, explained))
            else:
                explained = False
            walk(child, in_function or isinstance(child, (ast.FunctionDef,
                                                          ast.AsyncFunctionDef)))

    walk(ast.parse(source), False)
    return found


def test_the_walk_sees_imports_in_functions_and_their_reasons():
    source = (
        "import os\n"
        "def f():\n"
        "    import json\n"
        "    # lazy: torch only for the commands that train\n"
        "    import torch\n"
        "    class C:\n"
        "        def g(self):\n"
        "            from numpy import array  # lazy: kept off the first frame\n"
        "async def h():\n"
        "    from x import (\n"
        "        y,\n"
        "    )\n"
        "    # lazy: the [serve] extra\n"
        "    import aiohttp\n"
        "    import textual_serve\n"
        "    y()\n"
        "    import z\n"
    )
    assert function_imports(source) == [(3, False), (5, True), (8, True), (10, False),
                                        (14, True), (15, True), (17, False)]


def test_every_import_inside_a_function_says_why():
    unexplained: dict[str, list[int]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        bare = [line for line, why in function_imports(path.read_text()) if not why]
        if len(bare) > NOT_YET_SORTED.get(name, 0):
            unexplained[name] = bare
    assert unexplained == {}, (
        "move these imports to the top of their modules, or say on each why it waits "
        f"({MARK} ...): {unexplained}")
