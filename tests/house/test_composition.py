"""Classes are built by composition, not from mixins: where a class has several bases,
none is the project's own (a part of the app or of a screen is an object it holds, as
`ActionController` is, never a base class that borrows its attributes). Textual's and
the standard library's bases are fine (`Message, bubble=False`, `str, Enum`)."""

from __future__ import annotations

import ast
import pathlib

import carl_tui

ROOT = pathlib.Path(carl_tui.__file__).parent


def base_name(base: ast.expr) -> str:
    """`Screen[None]` -> Screen, `textual.app.App` -> App."""
    if isinstance(base, ast.Subscript):
        base = base.value
    return base.attr if isinstance(base, ast.Attribute) else ast.unparse(base)


def classes(root: pathlib.Path) -> list[tuple[str, ast.ClassDef]]:
    return [(str(p.relative_to(root.parent)), n) for p in sorted(root.rglob("*.py"))
            for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
            if isinstance(n, ast.ClassDef)]


def built_from_mixins(root: pathlib.Path) -> list[str]:
    """'path Class(Bases...)' of each class with several bases of which one is the
    project's own."""
    found = classes(root)
    own = {n.name for _, n in found}
    out = []
    for path, n in found:
        names = [base_name(b) for b in n.bases]
        if len(names) > 1 and own.intersection(names):
            out.append(f"{path} {n.name}({', '.join(names)})")
    return out


def test_no_class_is_built_from_mixins():
    assert built_from_mixins(ROOT) == []


def test_the_check_sees_a_class_built_from_a_mixin(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "part.py").write_text("class KeyPart:\n    def action_help(self): ...\n")
    (pkg / "app.py").write_text(
        "from textual.app import App\nfrom enum import Enum\nfrom pkg.part import KeyPart\n\n"
        "class Kind(str, Enum):\n    A = 'a'\n\n"
        "class MyApp(KeyPart, App[None]):\n    pass\n\n"
        "class Plain(App[None]):\n    pass\n")
    assert built_from_mixins(pkg) == ["pkg/app.py MyApp(KeyPart, App)"]


def stubs(node: ast.ClassDef) -> list[str]:
    """The methods of `node` that only raise NotImplementedError."""
    out = []
    for f in node.body:
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = [s for s in f.body if not (isinstance(s, ast.Expr)
                                              and isinstance(s.value, ast.Constant))]
            if (len(body) == 1 and isinstance(body[0], ast.Raise)
                    and "NotImplementedError" in ast.unparse(body[0])):
                out.append(f.name)
    return out


def cut_in_two(root: pathlib.Path) -> list[str]:
    """'path Class' of each project class with stubs that only one class derives from:
    a class cut in two to meet the size cap (its stubs are the other half's), not an
    abstraction with several implementations (`Source`, `InfoScreen`)."""
    found = classes(root)
    subclasses: dict[str, int] = {}
    for _, n in found:
        for b in n.bases:
            subclasses[base_name(b)] = subclasses.get(base_name(b), 0) + 1
    return [f"{path} {n.name}" for path, n in found
            if stubs(n) and subclasses.get(n.name, 0) == 1]


def test_no_class_is_cut_in_two_behind_stubs():
    assert cut_in_two(ROOT) == []


def test_the_check_sees_a_class_cut_in_two(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "screen.py").write_text(
        "class Reading:\n    def show_rows(self):\n        '''Drawn by the screen.'''\n"
        "        raise NotImplementedError\n\n"
        "class Fleet(Reading):\n    def show_rows(self): ...\n\n"
        "class Info:\n    def body(self):\n        raise NotImplementedError\n\n"
        "class Events(Info): ...\n\nclass Card(Info): ...\n")
    assert cut_in_two(pkg) == ["pkg/screen.py Reading"]
