"""Full search on a synthetic store, two or more checkouts in one run, blocks alternating.

    python -m bench.scale_trees DIR/scale-100000-384.db --tree OLD --tree NEW
        [--queries 600] [--blocks 12]

The store is one `bench scale` built (`--store-dir`); its size and dimension are read from its
name. Each `--tree` (a checkout: its `src` and its `bench`) runs in a process of its own with
`PYTHONPATH=TREE/src:TREE` on the same file (the searches only read it), opens the store as
`bench scale` does (vector index filled, keyword mirror built), answers 100 warm-up queries,
then times `Searcher.search` with every default stage and precomputed query vectors, each
query new to it (`search_full` of `bench scale`). The trees take turns block by block, the
order rotating, so load on a shared machine hits them alike. Prints (JSON) per tree its p50 and
p95, the ratio of its p50 to the first tree's and the median per-query ratio, the process CPU
time and the event loop thread's CPU time per search (p50), the stage medians (`timings_ms`),
and whether every query returned the same chunk ids with the same scores as in the first tree.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

WARM_UP = 100


async def _serve(path: Path, queries: int) -> None:
    """A tree's side: search the query ranges read from stdin, one JSON line per range."""
    from bench import scale
    from recalld.api import calibrate
    from recalld.config import SearchSettings
    from recalld.retrieval.search import Searcher
    from recalld.storage.sqlite.store import SqliteStore

    chunks, dimension = _size_of(path)
    corpus = scale.make_corpus(chunks, dimension)
    texts, vectors = scale.queries(corpus, WARM_UP + queries)
    store = await SqliteStore.open(path, model_id=f"synthetic-{dimension}", dimension=dimension)
    try:
        async with store.reading_conn() as conn:
            await store.vectors.ensure_loaded(conn)
        await store.vectors.wait_filled()
        await store.keywords.load()
        embedder = scale.PrecomputedEmbedder(dimension, dict(zip(texts, vectors, strict=True)))
        searcher = Searcher(store, embedder, SearchSettings(), await calibrate(embedder))
        for text in texts[:WARM_UP]:
            await searcher.search(text)
        texts = texts[WARM_UP:]
        print("ready", flush=True)
        for line in sys.stdin:
            first, last = map(int, line.split())
            rows = []
            for text in texts[first:last]:
                cpu, loop = time.process_time(), time.thread_time()
                started = time.perf_counter()
                result = await searcher.search(text)
                rows.append(
                    {
                        "ms": (time.perf_counter() - started) * 1000,
                        "cpu_ms": (time.process_time() - cpu) * 1000,
                        "loop_cpu_ms": (time.thread_time() - loop) * 1000,
                        "timings": result.explain["timings_ms"],
                        "hits": [[h.chunk.id, repr(h.score)] for h in result.hits],
                    }
                )
            print(json.dumps(rows), flush=True)
    finally:
        await store.close()


def _size_of(path: Path) -> tuple[int, int]:
    """Chunks and dimension from a `bench scale` store's name (scale-CHUNKS-DIMENSION.db)."""
    found = re.fullmatch(r"scale-(\d+)-(\d+)\.db", path.name)
    if found is None:
        raise SystemExit(f"{path}: not a bench scale store (scale-CHUNKS-DIMENSION.db)")
    return int(found[1]), int(found[2])


def _median(rows: list[dict[str, Any]], key: str) -> float:
    return round(statistics.median(float(r[key]) for r in rows), 2)


def compare(path: Path, trees: list[Path], queries: int, blocks: int) -> dict[str, Any]:
    """Time every tree on `queries` new queries, `blocks` turns each."""
    # Here, not at the top: a tree's own search process (`--serve`) imports this file
    # with that tree's `bench`, which may predate tree_runs.
    from bench import tree_runs

    _size_of(path)
    names = [f"{number}: {tree}" for number, tree in enumerate(trees, start=1)]
    argv = [__file__, "--serve", str(path), str(queries)]
    procs = {name: tree_runs.start(tree, argv) for name, tree in zip(names, trees, strict=True)}
    rows = tree_runs.alternate(procs, queries, blocks)
    base = [r["ms"] for r in rows[names[0]]]
    report: dict[str, Any] = {"store": str(path), "queries": len(base), "blocks": blocks}
    report["trees"] = {}
    for name in names:
        stages = sorted({s for r in rows[name] for s in r["timings"]})
        report["trees"][name] = {
            **tree_runs.latency([r["ms"] for r in rows[name]], base),
            "cpu_ms_p50": _median(rows[name], "cpu_ms"),
            "loop_cpu_ms_p50": _median(rows[name], "loop_cpu_ms"),
            "stages_ms_p50": {
                s: round(statistics.median(r["timings"].get(s, 0.0) for r in rows[name]), 2)
                for s in stages
            },
            "same_hits": [r["hits"] for r in rows[name]] == [r["hits"] for r in rows[names[0]]],
        }
    return report


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "--serve":
        sys.path.pop(0)  # this file's folder: its modules are not top-level ones
        asyncio.run(_serve(Path(args[1]), int(args[2])))
        return
    parser = argparse.ArgumentParser(prog="python -m bench.scale_trees", description=__doc__)
    parser.add_argument("store", type=Path)
    parser.add_argument("--tree", type=Path, action="append", required=True)
    parser.add_argument("--queries", type=int, default=600)
    parser.add_argument("--blocks", type=int, default=12)
    parsed = parser.parse_args(args)
    report = compare(parsed.store, parsed.tree, parsed.queries, parsed.blocks)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
