"""The wheel holds every package and the themes; the declared Python and dependencies agree
with the code."""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

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


#: A Python for `make -n` to name (it runs nothing), apart from the one running this test
#: (which may itself live in build/ci/base-oldest when the base suite runs these tests).
STAND_IN = "/opt/python3.x/bin/python3"
#: What the base suite runs (snapshots of screens that need an extra go unused there).
BASE_PYTEST = "-m pytest -q -p no:cacheprovider --snapshot-warn-unused"


def _make_base_suites(tmp_path, ci: bool, **pythons: str):
    """`make -n base-suites` (print, run nothing: the nested makes inherit -n, so no suite
    runs and nothing is installed) with the given Pythons, CI set or not."""
    import os
    import shutil
    import subprocess

    import pytest

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "MAKEFLAGS", "MAKELEVEL")}
    if ci:
        env["CI"] = "true"
    argv = ["make", "-n", "-C", str(ROOT), "base-suites", f"VENV={tmp_path / 'venv'}",
            *(f"{k}={v}" for k, v in pythons.items())]
    res = subprocess.run(argv, check=False, capture_output=True, text=True, env=env,
                         timeout=60)
    return res.returncode, res.stdout + res.stderr


def test_make_test_skips_a_missing_python_with_one_line_but_not_under_ci(tmp_path):
    """A laptop with one Python 3.10+: the base suite runs on what is there and says
    which it skips (it used to stop: "make test needs Python 3.10"); CI needs both."""
    rc, out = _make_base_suites(tmp_path, False, PY_OLDEST="", PY_NEWEST=STAND_IN)
    lines = out.splitlines()
    skip = ("make test: skipping the base suite on Python 3.10: not installed "
            "(set PY_OLDEST=/path/to/python3.10)")
    assert rc == 0, out
    assert lines.count(skip) == 1
    assert f"build/ci/base-newest/bin/python {BASE_PYTEST}" in lines
    assert not any("base-oldest" in line for line in lines)

    rc, out = _make_base_suites(tmp_path, True, PY_OLDEST="", PY_NEWEST=STAND_IN)
    assert rc != 0
    assert ("make test (CI): no Python 3.10 for the base suite "
            "(set PY_OLDEST=/path/to/python3.10)") in out.splitlines()

    rc, out = _make_base_suites(tmp_path, True, PY_OLDEST=STAND_IN,
                                PY_NEWEST=STAND_IN)
    assert rc == 0 and not any(line.startswith("make test: skipping") for line in out.splitlines())
    assert f"build/ci/base-oldest/bin/python {BASE_PYTEST}" in out.splitlines()


SUDO_STUB = """#!/bin/sh
# sudo as Debian configures it: -n (never ask), the environment reset (env_reset), the
# system's folders on PATH (secure_path), after the stubs
[ "$1" = -n ] && shift
exec /usr/bin/env -i PATH="$PATH:/usr/sbin:/usr/bin:/sbin:/bin" "$@"
"""
APT_STUB = """#!/bin/sh
echo "$* DEBIAN_FRONTEND=$DEBIAN_FRONTEND" >> "{log}"
"""


def test_make_installs_the_test_tools_without_questions_through_sudo(tmp_path):
    """`make browser` (part of `make test`) through sudo: apt-get must get
    DEBIAN_FRONTEND=noninteractive, which sudo drops from the environment it was given (a
    package asking a question would stop `make test`). A stub sudo and apt-get on a PATH
    where Chromium is not found."""
    import os
    import shutil
    import subprocess

    import pytest

    make = shutil.which("make")
    if make is None or not os.path.exists("/usr/bin/env"):
        pytest.skip("make or /usr/bin/env is not here")
    apt_stub = APT_STUB.replace("{log}", str(tmp_path / "apt.log"))
    for name, text in (("sudo", SUDO_STUB), ("apt-get", apt_stub)):
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o755)
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path)}
    res = subprocess.run([make, "-C", str(ROOT), "browser", "SUDO=sudo -n"], env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    calls = (tmp_path / "apt.log").read_text().splitlines()
    installs = [c for c in calls if c.startswith("install")]
    assert installs == ["install -y -qq chromium DEBIAN_FRONTEND=noninteractive"], calls
