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
import shutil
import statistics
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


def compare(
    home: Path, data: Path, trees: list[Path], limit: int, blocks: int, sets: list[str]
) -> dict[str, Any]:
    """Time every tree on the first `limit` train queries, `blocks` turns each (`sets`:
    settings as `KEY=VALUE`)."""
    # Here, not at the top: a tree's own search process (`--serve`) imports this file
    # with that tree's `bench`, which may predate tree_runs.
    from bench import tree_runs

    names = [f"{number}: {tree}" for number, tree in enumerate(trees, start=1)]
    with tempfile.TemporaryDirectory() as tmp:
        procs = {}
        for name, tree in zip(names, trees, strict=True):
            copy = Path(tmp) / name.partition(":")[0]
            shutil.copytree(home / "data", copy / "data")
            if (home / "cache").exists():
                (copy / "cache").symlink_to((home / "cache").resolve())
            argv = [__file__, "--serve", str(copy), str(data), str(limit), *sets]
            procs[name] = tree_runs.start(tree, argv)
        rows = tree_runs.alternate(procs, limit, blocks)
    base = [r["ms"] for r in rows[names[0]]]
    report: dict[str, Any] = {"queries": len(base), "blocks": blocks, "trees": {}}
    for name in names:
        report["trees"][name] = {
            **tree_runs.latency([r["ms"] for r in rows[name]], base),
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
