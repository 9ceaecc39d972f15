"""The wheel holds every package and the themes; the declared Python and dependencies agree
with the code."""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_package_is_listed_for_the_wheel():
    listed = set(pyproject()["tool"]["setuptools"]["packages"])
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "carl_tui").rglob("__init__.py")
    }
    assert found <= listed, f"add to [tool.setuptools] packages: {sorted(found - listed)}"
    assert "carl_tui.themes" in listed
    themes = {p.stem for p in (ROOT / "themes").glob("*.toml")}
    assert {"carl-dark", "carl-light"} <= themes


def test_tomllib_has_a_fallback_for_the_oldest_python():
    declared = pyproject()["project"]["requires-python"]
    assert declared == ">=3.10"
    deps = pyproject()["project"]["dependencies"]
    assert any(d.startswith("tomli") and "python_version < '3.11'" in d for d in deps)
