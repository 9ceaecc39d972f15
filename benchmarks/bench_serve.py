"""`carl-tui serve`: how many tabs one server holds, and their memory.

A real server (`carl-tui serve --watch recordings/tiny-demo.jsonl`, read-only, on
127.0.0.1) and N tabs, each a real websocket (aiohttp) whose dashboard process draws the
run at 160x45; memory is read once every tab has drawn its panels. Reported per tab: the
dashboard process's RSS and USS (the memory only it holds: the rest is shared libraries),
the server's own RSS, how long the N tabs took to open one after the other, and the CPU
the open tabs use once the run is read (a finished run: the dashboards idle).

    python -m benchmarks serve                 # 1 and 8 tabs (8: the default limit)
    CARL_SERVE_TABS=16 python -m benchmarks serve
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time

from benchmarks.common import Row
from tests.serving import RECORDING, enter, open_tab, start_serving

MB = 1024 * 1024
IDLE_S = 5.0  # CPU of the open tabs, the run finished, over this long


def tab_counts() -> list[int]:
    extra = int(os.environ.get("CARL_SERVE_TABS", "0") or 0)
    return sorted({1, 8, *([extra] if extra > 0 else [])})


async def _hold(served, n: int) -> tuple[float, list]:
    import aiohttp

    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as client:
        await enter(client, served)
        t0 = time.perf_counter()
        tabs = [await open_tab(client, served, "CRYSTALLISED", timeout=120) for _ in range(n)]
        opened = time.perf_counter() - t0
        await asyncio.sleep(1.0)  # the last tab settles (its history read)
        import psutil

        server = psutil.Process(served.proc.pid)
        procs = served.sessions()
        mem = [(m.rss, m.uss) for m in (p.memory_full_info() for p in procs)]
        mem.append((server.memory_info().rss, None))
        cpu0 = [p.cpu_times() for p in procs]
        await asyncio.sleep(IDLE_S)
        idle = sum(sum(b[:2]) - sum(a[:2]) for a, b in
                   zip(cpu0, (p.cpu_times() for p in procs))) / IDLE_S
        mem.append((idle, None))
        for ws, _ in tabs:
            await ws.close()
    return opened, mem


def run() -> list[Row]:
    rows = []
    for n in tab_counts():
        served = start_serving("--watch", str(RECORDING), "--max-sessions", str(n))
        try:
            opened, mem = asyncio.run(_hold(served, n))
        finally:
            served.stop()
        tabs, (server_rss, _), (idle, _) = mem[:-2], mem[-2], mem[-1]
        assert len(tabs) == n, f"{len(tabs)} dashboards for {n} tabs"
        rss = statistics.median(r for r, _ in tabs) / MB
        uss = statistics.median(u for _, u in tabs) / MB
        total = (sum(r for r, _ in tabs) + server_rss) / MB
        rows += [
            Row(f"serve, {n} tab(s): one tab's dashboard, RSS (median)", rss, unit="MB",
                note=f"USS {uss:.0f} MB (its own; the rest is shared)"),
            Row(f"serve, {n} tab(s): the server's RSS", server_rss / MB, unit="MB"),
            Row(f"serve, {n} tab(s): all processes, RSS summed", total, unit="MB",
                note=f"USS summed {sum(u for _, u in tabs) / MB + server_rss / MB:.0f} MB"),
            Row(f"serve, {n} tab(s): opening them one after the other", opened, unit="s"),
            Row(f"serve, {n} tab(s): CPU of all the tabs, idle (run finished)", 100 * idle,
                unit="% of a core"),
        ]
    return rows


if __name__ == "__main__":
    from benchmarks.common import HEADER

    print(HEADER)
    for row in run():
        print(row.format())
