"""In-process search time of two or more checkouts on one store, in one run, blocks alternating.

    python -m bench.search_trees STORE_HOME ../shared/data/scifact --tree OLD --tree NEW
        [--limit 300] [--blocks 6] [--set KEY=VALUE ...]

STORE_HOME is a `bench perf --store-dir` (its `data/` store and `cache/` models). Each `--tree`
(a checkout: its `src` and its `bench`, e.g. `main` before a change from `git worktree add`)
runs in a process of its own with `PYTHONPATH=TREE/src:TREE`, on its own copy of the store
(searches count retrievals), through `AsyncMemory.search` with each block's query vectors
cold, as `bench perf` times recalld in process. The trees take turns block by block, the order
rotating, so load on a shared machine hits them alike. Prints (JSON) per tree (`N: TREE`, in
the order given) the p50 and p95, the ratio of its p50 to the first tree's and the median
per-query ratio, the stage medians (`timings_ms`), and whether every query ranked the same
chunk ids as in the first tree.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

STAGES = ("embed_ms", "vector_ms", "bm25_ms", "rank_ms", "total_ms")
K = 10


async def _serve(home: Path, data: Path, limit: int, overrides: dict[str, str]) -> None:
    """A tree's side: search the query ranges read from stdin, one JSON line per range."""
    from bench.beir import load_beir
    from bench.common import bench_settings, forget_query_vectors
    from recalld.api import AsyncMemory
    from recalld.storage.sqlite.store import SqliteStore

    _, queries, qrels = load_beir(data, "train")
    texts = [queries[q] for q in list(qrels)[:limit]]
    memory = await AsyncMemory.open(bench_settings(home, overrides))
    try:
        await memory.search("warm up", limit=K)
        if isinstance(memory.store, SqliteStore):
            await memory.store.keywords.load()  # as a daemon running a while has it
        print("ready", flush=True)
        for line in sys.stdin:
            first, last = map(int, line.split())
            forget_query_vectors(memory)
            rows = []
            for text in texts[first:last]:
                started = time.perf_counter()
                result = await memory.search(text, limit=K)
                took = (time.perf_counter() - started) * 1000
                ids = [h.chunk.id for h in result.hits]
                rows.append({"ms": took, "timings": result.explain["timings_ms"], "ids": ids})
            print(json.dumps(rows), flush=True)
    finally:
        await memory.close()


def _start(
    tree: Path, home: Path, data: Path, limit: int, sets: list[str]
) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=f"{tree / 'src'}:{tree}")
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # recompiling on every start is not measured
    argv = [sys.executable, __file__, "--serve", str(home), str(data), str(limit), *sets]
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        raise SystemExit(f"{tree}: the search process did not start")
    return proc


def _ask(proc: subprocess.Popen[str], first: int, last: int) -> list[dict[str, Any]]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(f"{first} {last}\n")
    proc.stdin.flush()
    rows: list[dict[str, Any]] = json.loads(proc.stdout.readline())
    return rows


def compare(
    home: Path, data: Path, trees: list[Path], limit: int, blocks: int, sets: list[str]
) -> dict[str, Any]:
    """Time every tree on the first `limit` train queries, `blocks` turns each (`sets`:
    settings as `KEY=VALUE`)."""
    names = [f"{number}: {tree}" for number, tree in enumerate(trees, start=1)]
    rows: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as tmp:
        procs = {}
        for name, tree in zip(names, trees, strict=True):
            copy = Path(tmp) / name.partition(":")[0]
            shutil.copytree(home / "data", copy / "data")
            if (home / "cache").exists():
                (copy / "cache").symlink_to((home / "cache").resolve())
            procs[name] = _start(tree, copy, data, limit, sets)
        try:
            size = -(-limit // blocks)
            for number, first in enumerate(range(0, limit, size)):
                turn = number % len(names)
                for name in names[turn:] + names[:turn]:
                    rows[name] += _ask(procs[name], first, min(first + size, limit))
                print(f"\r{min(first + size, limit)}/{limit}", end="", file=sys.stderr)
            print(file=sys.stderr)
        finally:
            for proc in procs.values():
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.close()
                proc.wait()
                proc.stdout.close()
    base = [r["ms"] for r in rows[names[0]]]
    report: dict[str, Any] = {"queries": len(base), "blocks": blocks, "trees": {}}
    for name in names:
        mine = [r["ms"] for r in rows[name]]
        report["trees"][name] = {
            "p50_ms": round(statistics.median(mine), 2),
            "p95_ms": round(statistics.quantiles(mine, n=20)[-1], 2),
            "p50_ratio": round(statistics.median(mine) / statistics.median(base), 3),
            "per_query_ratio": round(
                statistics.median(m / b for m, b in zip(mine, base, strict=True)), 3
            ),
            "stages_ms_p50": {
                s: round(statistics.median(r["timings"][s] for r in rows[name]), 2)
                for s in STAGES
                if all(s in r["timings"] for r in rows[name])
            },
            "same_ids": [r["ids"] for r in rows[name]] == [r["ids"] for r in rows[names[0]]],
        }
    return report


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "--serve":
        sys.path.pop(0)  # this file's folder: its modules are not top-level ones
        sets = dict(s.split("=", 1) for s in args[4:])
        asyncio.run(_serve(Path(args[1]), Path(args[2]), int(args[3]), sets))
        return
    parser = argparse.ArgumentParser(prog="python -m bench.search_trees", description=__doc__)
    parser.add_argument("home", type=Path)
    parser.add_argument("data", type=Path)
    parser.add_argument("--tree", type=Path, action="append", required=True)
    parser.add_argument("--limit", type=int, default=300)
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--set", dest="sets", action="append", default=[], help="KEY=VALUE")
    parsed = parser.parse_args(args)
    report = compare(
        parsed.home, parsed.data, parsed.tree, parsed.limit, parsed.blocks, parsed.sets
    )
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
