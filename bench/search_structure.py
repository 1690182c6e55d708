"""What runs concurrently inside one search, measured: the query embedding beside the two
routes (recalld's structure) or before them, the routes beside each other or one after the
other, and ONNX Runtime's intra-op threads 2 (one a core) or 1 for the query's run.

    python -m bench.search_structure STORE_HOME ../shared/data/scifact [QUERIES] [BLOCK]

STORE_HOME is a `bench perf --store-dir` (its `data/` store and `cache/` models; searches
count retrievals in it, so use a copy). The settings take turns block by block (the order
rotating), each with its own cold query-vector cache and its own term-frequency cache, in one
process. Prints per setting the p50 and p95, the median per-query ratio to recalld's own
structure, the per-stage medians (`timings_ms`), and how many queries ranked the same ids.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

from bench.beir import load_beir
from bench.common import bench_settings, load_model
from bench.perf import _keyword_mirror
from recalld.api import AsyncMemory
from recalld.embeddings.local import LocalEmbedder
from recalld.errors import EmbeddingError
from recalld.retrieval import recall
from recalld.retrieval.pipeline import Query
from recalld.storage.contract import Store

STAGES = ("embed_ms", "vector_ms", "bm25_ms", "rank_ms", "total_ms")
Recall = Callable[
    [Query, Store, recall.EmbedQuery, recall.DocFreqs], Coroutine[Any, Any, recall.Recalled]
]
RECALLD = recall.recall


class _OneReadAtATime:
    """The store, its reads (and the term-frequency lookups) one at a time: routes in turn."""

    def __init__(self, store: Any, lock: asyncio.Lock) -> None:
        self._store, self._lock = store, lock

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def read(self, fn: Callable[[Any], Awaitable[Any]]) -> Any:
        async with self._lock:
            return await self._store.read(fn)


def structure(embed_first: bool, routes_in_turn: bool) -> Recall:
    """recalld's recall, with the query embedded before the routes and/or the routes (and
    the term frequencies) run one after the other."""

    async def variant(
        asked: Query, store: Store, embed: recall.EmbedQuery, doc_freqs: recall.DocFreqs
    ) -> recall.Recalled:
        embedded = None
        if embed_first and asked.uses_vector:
            started = time.perf_counter()
            try:
                await embed(asked.text)  # cached: the vector route finds it at once
            except EmbeddingError:
                pass  # the vector route meets it again and degrades as usual
            embedded = (time.perf_counter() - started) * 1000
        reads: Any = store
        frequencies = doc_freqs
        if routes_in_turn:
            lock = asyncio.Lock()
            reads = _OneReadAtATime(store, lock)

            async def frequencies(terms: list[str]) -> tuple[list[int], int]:
                async with lock:
                    return await doc_freqs(terms)

        found = await RECALLD(asked, reads, embed, frequencies)
        if embedded is not None and "embed_ms" in found.timings:
            found.timings["embed_ms"] = embedded
        return found

    return variant


async def run(home: Path, data: Path, limit: int, block: int) -> dict[str, Any]:
    settings = bench_settings(home, {})
    two = load_model(settings)
    if not isinstance(two, LocalEmbedder):
        raise SystemExit("the packaged local model is needed (ONNX Runtime threads)")
    one = LocalEmbedder(
        quantize=two.quantize, cache_dir=two.cache_dir, model_dir=two.model_dir,
        intra_op_num_threads=1,
    )  # fmt: skip
    one.load()
    two.load()
    ways = {
        "recalld (embedding beside the routes), 2 threads": (False, False, two),
        "embedding beside the routes, 1 thread": (False, False, one),
        "embedding first, routes beside each other, 2 threads": (True, False, two),
        "embedding first, routes beside each other, 1 thread": (True, False, one),
        "everything in turn, 2 threads": (True, True, two),
        "everything in turn, 1 thread": (True, True, one),
    }
    _, queries, _ = load_beir(data, "train")
    ids = list(queries)[:limit]
    memory = await AsyncMemory.open(settings, embedder=two)
    searcher = memory.searcher
    names = list(ways)
    lat: dict[str, dict[str, float]] = {n: {} for n in names}
    stages: dict[str, dict[str, list[float]]] = {n: {s: [] for s in STAGES} for n in names}
    ranked: dict[str, dict[str, list[int]]] = {n: {} for n in names}
    frequencies: dict[str, tuple[dict[str, int], int, int]] = {n: ({}, -1, 0) for n in names}
    try:
        await memory.search("warm up", limit=10)
        await _keyword_mirror(memory)
        for number, start in enumerate(range(0, len(ids), block)):
            turn = number % len(names)
            for name in names[turn:] + names[:turn]:
                embed_first, in_turn, embedder = ways[name]
                vars(recall)["recall"] = structure(embed_first, in_turn)  # what search calls
                searcher.use_model(embedder, searcher.calibration)  # drops cached vectors
                cache = frequencies[name]
                searcher._df_cache, searcher._df_generation, searcher._total = cache
                for qid in ids[start : start + block]:
                    started = time.perf_counter()
                    result = await memory.search(queries[qid], limit=10)
                    lat[name][qid] = (time.perf_counter() - started) * 1000
                    ranked[name][qid] = [h.chunk.id for h in result.hits]
                    timings = result.explain["timings_ms"]
                    for stage in STAGES:
                        if stage in timings:
                            stages[name][stage].append(timings[stage])
                frequencies[name] = (searcher._df_cache, searcher._df_generation, searcher._total)
            print(f"\r{min(start + block, len(ids))}/{len(ids)}", end="", file=sys.stderr)
        print(file=sys.stderr)
    finally:
        vars(recall)["recall"] = RECALLD
        await memory.close()
    base = names[0]
    return {
        name: {
            "p50_ms": round(statistics.median(lat[name].values()), 2),
            "p95_ms": round(statistics.quantiles(lat[name].values(), n=20)[-1], 2),
            "per_query_ratio_p50": round(
                statistics.median(lat[name][q] / lat[base][q] for q in ids), 3
            ),
            "stages_ms_p50": {s: round(statistics.median(v), 2) for s, v in stages[name].items()},
            "same_ids": sum(ranked[name][q] == ranked[base][q] for q in ids),
        }
        for name in names
    }


if __name__ == "__main__":
    home, data = Path(sys.argv[1]), Path(sys.argv[2])
    limit = int(sys.argv[3]) if len(sys.argv) > 3 else 300
    block = int(sys.argv[4]) if len(sys.argv) > 4 else 20
    print(json.dumps(asyncio.run(run(home, data, limit, block)), indent=1))
