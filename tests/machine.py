"""What the tests need of this machine: a free loopback port, and a program that may be
missing (Chromium, Ray, Slurm): without it a test skips saying why, and under CI (CI set)
it fails instead, since CI installs them."""

from __future__ import annotations

import os
import socket

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def skip_or_fail(what: str, why: str):
    """Skip (fail under CI) for want of `what`, saying `why`."""
    if os.environ.get("CI"):
        pytest.fail(f"under CI the {what} tests must run: {why}")
    pytest.skip(why)
