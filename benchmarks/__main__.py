"""Run every benchmark module (`benchmarks/bench_*.py`) and print one table.

Each module exposes `run() -> list[Row]`. Usage: python -m benchmarks [substring ...]
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import traceback

import benchmarks
from benchmarks.common import HEADER


def main(argv: list[str]) -> int:
    names = sorted(
        m.name for m in pkgutil.iter_modules(benchmarks.__path__) if m.name.startswith("bench_")
    )
    if argv:
        names = [n for n in names if any(a in n for a in argv)]
    print(HEADER)
    print("-" * len(HEADER))
    failed = 0
    for name in names:
        try:
            module = importlib.import_module(f"benchmarks.{name}")
            for row in module.run():
                print(row.format(), flush=True)
        except Exception:  # noqa: BLE001  (one broken benchmark must not hide the others)
            failed += 1
            print(f"{name}: FAILED", flush=True)
            traceback.print_exc()
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
