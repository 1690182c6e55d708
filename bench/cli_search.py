"""How long `recalld search QUERY --json` takes as a whole process, against a running daemon.

    python -m bench.cli_search [--runs 40] [--query TEXT] [--tree OLD/src ...]

The daemon is the one the environment names (`RECALLD_HOME`, `RECALLD_DAEMON__SOCKET`), started
beforehand on the store to search. These commands run `--runs` rounds, each in a shuffled order,
so load on a shared machine hits them alike:

- `python -c pass`: the interpreter starting and exiting, the floor;
- `recalld`: the console script of this environment, as installed;
- one per `--tree`: the same console script with `PYTHONPATH=TREE`, so another checkout's `src`
  (e.g. `main` before a change, from `git worktree add`) runs in the same rounds.

Each process's wall time and CPU time (user + system, from `os.wait4`, which a loaded machine
inflates far less) are reported as medians. Byte-compiled files are used as a user has them:
run each tree once without `PYTHONDONTWRITEBYTECODE` (or `python -m compileall TREE`) first.

The target (issue 20) is a median of at most 60 ms wall on a quiet two-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

QUERY = "vitamin D deficiency and bone fractures"


def _time(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall-clock and CPU (user + system) milliseconds of one process."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = (time.perf_counter() - started) * 1000
    assert proc.stderr is not None
    errors = proc.stderr.read()
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{' '.join(argv)} exited with {proc.returncode}: {errors.decode()}")
    return wall, (usage.ru_utime + usage.ru_stime) * 1000


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print its medians (JSON)."""
    parser = argparse.ArgumentParser(prog="python -m bench.cli_search", description=__doc__)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--query", default=QUERY)
    parser.add_argument("--tree", type=Path, action="append", default=[], help="another src")
    args = parser.parse_args(argv)

    script = Path(sys.executable).parent / "recalld"
    search = [sys.executable, str(script), "search", args.query, "--json"]
    base = dict(os.environ)
    cases: dict[str, tuple[list[str], dict[str, str]]] = {
        "python -c pass": ([sys.executable, "-c", "pass"], base),
        "recalld": (search, base),
    }
    for tree in args.tree:
        cases[f"PYTHONPATH={tree}"] = (search, {**base, "PYTHONPATH": str(tree.resolve())})
    wall: dict[str, list[float]] = {name: [] for name in cases}
    cpu: dict[str, list[float]] = {name: [] for name in cases}
    for argv_, env in cases.values():  # warm the page cache once
        _time(argv_, env)
    names = list(cases)
    for _ in range(args.runs):
        random.shuffle(names)
        for name in names:
            spent, used = _time(*cases[name])
            wall[name].append(spent)
            cpu[name].append(used)
    report: dict[str, Any] = {
        "runs": args.runs,
        "query": args.query,
        "load_average": [round(v, 1) for v in os.getloadavg()],
        "wall_ms_median": {k: round(statistics.median(v), 1) for k, v in wall.items()},
        "cpu_ms_median": {k: round(statistics.median(v), 1) for k, v in cpu.items()},
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
