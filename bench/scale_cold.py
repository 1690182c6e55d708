"""A big store's first search: how long from opening the store to the first vector result, how
long until the vector index is complete, and the vector route's latency meanwhile and after.

    python -m bench.scale_cold STORE [QUERIES]

STORE is a synthetic store from `python -m bench scale --store-dir DIR` (DIR/scale-N-384.db);
the queries are that benchmark's. To compare two versions, run the command from each tree
(PYTHONPATH=<tree>/src:<tree>), alternating, on the same file; each run is a fresh process.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench import scale
from bench.memory_peak import AnonPeak
from recalld.storage.sqlite.store import SqliteStore
from recalld.types import NO_FILTERS


def _p50(samples: list[float]) -> float | None:
    return round(statistics.median(samples), 1) if samples else None


async def measure(path: Path, count: int) -> dict[str, Any]:
    """Open the store, search until the index is complete, then `count` searches more."""
    found = re.search(r"scale-(\d+)-(\d+)\.db$", path.name)
    if found is None:
        raise SystemExit(f"{path} is not a store written by python -m bench scale")
    chunks, dimension = int(found[1]), int(found[2])
    _, vectors = scale.queries(scale.make_corpus(chunks, dimension), 2 * count)
    started = time.perf_counter()
    # Anonymous memory is sampled for its peak from open until the index is complete.
    sampled = AnonPeak().start()
    store = await SqliteStore.open(path, model_id=f"synthetic-{dimension}", dimension=dimension)
    try:

        async def knn(i: int) -> float:
            begun = time.perf_counter()
            await store.read(lambda c: c.knn(vectors[i % len(vectors)], 10, NO_FILTERS))
            return (time.perf_counter() - begun) * 1000

        await knn(0)
        first_s = time.perf_counter() - started
        filling = getattr(store.vectors, "_filling", None)  # None: a version without the fill
        during: list[float] = []
        while filling is not None and not filling.done() and len(during) < count:
            during.append(await knn(1 + len(during)))
            await asyncio.sleep(0.2)
        wait = getattr(store.vectors, "wait_filled", None)
        if wait is not None:
            await wait()
        complete_s = time.perf_counter() - started
        sampled.stop()
        after = [await knn(count + i) for i in range(count)]
        # While the store is open, as a daemon holds it (its readers' page caches and maps).
        memory = scale._rss_mb()
    finally:
        await store.close()
    return {
        "chunks": chunks,
        "first_result_s": round(first_s, 2),
        "index_complete_s": round(complete_s, 2),
        "searches_during_fill": len(during),
        "vector_p50_ms_during_fill": _p50(during),
        "vector_p50_ms_after": _p50(after),
        **memory,
        "peak_rss_anon_mb_until_complete": sampled.mb,
        "load_average": round(os.getloadavg()[0], 1),
    }


if __name__ == "__main__":
    queries = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    print(json.dumps(asyncio.run(measure(Path(sys.argv[1]), queries))))
