"""What `bench.search_trees` and `bench.scale_trees` share: a search process per checkout, the
checkouts taking turns block by block (the order rotating, so load on a shared machine hits
them alike), and each one's latencies beside the first one's."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

Rows = list[dict[str, Any]]


def start(tree: Path, argv: list[str]) -> subprocess.Popen[str]:
    """Run `python ARGV` with `PYTHONPATH=TREE/src:TREE`; returns once it says "ready"."""
    env = dict(os.environ, PYTHONPATH=f"{tree / 'src'}:{tree}")
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # recompiling on every start is not measured
    proc = subprocess.Popen(
        [sys.executable, *argv], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        raise SystemExit(f"{tree}: the search process did not start")
    return proc


def _ask(proc: subprocess.Popen[str], first: int, last: int) -> Rows:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(f"{first} {last}\n")
    proc.stdin.flush()
    rows: Rows = json.loads(proc.stdout.readline())
    return rows


def alternate(procs: dict[str, subprocess.Popen[str]], total: int, blocks: int) -> dict[str, Rows]:
    """Each process's rows for queries [0, total), asked in `blocks` ranges, the processes
    taking turns; the processes are closed after."""
    names = list(procs)
    rows: dict[str, Rows] = {name: [] for name in names}
    try:
        size = -(-total // blocks)
        for number, first in enumerate(range(0, total, size)):
            turn = number % len(names)
            for name in names[turn:] + names[:turn]:
                rows[name] += _ask(procs[name], first, min(first + size, total))
            print(f"\r{min(first + size, total)}/{total}", end="", file=sys.stderr)
        print(file=sys.stderr)
    finally:
        for proc in procs.values():
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.close()
            proc.wait()
            proc.stdout.close()
    return rows


def latency(mine: list[float], base: list[float]) -> dict[str, float]:
    """p50 and p95 of `mine` (ms), the ratio of its p50 to `base`'s and the median per-query
    ratio (the same queries in the same order)."""
    return {
        "p50_ms": round(statistics.median(mine), 2),
        "p95_ms": round(statistics.quantiles(mine, n=20)[-1], 2),
        "p50_ratio": round(statistics.median(mine) / statistics.median(base), 3),
        "per_query_ratio": round(
            statistics.median(m / b for m, b in zip(mine, base, strict=True)), 3
        ),
    }
