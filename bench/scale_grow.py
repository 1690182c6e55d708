"""Memory while a big store takes new chunks past its vector index's headroom: anonymous RSS
steady (index loaded and filled) against its peak while the writes grow the index.

    python -m bench.scale_grow STORE [CHUNKS]

STORE is a COPY of a synthetic store from `python -m bench scale --store-dir DIR`
(DIR/scale-N-384.db): this writes to it. CHUNKS (default: a quarter of the store and 2,000
more, past the 1.25x headroom the index loads with) go in through the writer, 2,000 to a
transaction, as `bench scale` builds. To compare two versions, run each on its own copy,
with PYTHONPATH=<tree>/src:<this tree> (recalld from the tree, the benchmark from here).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench import scale
from bench.memory_peak import AnonPeak, rss_anon_kb
from recalld.storage.sqlite.store import SqliteStore
from recalld.types import NO_FILTERS


async def _knn(store: SqliteStore, vector: npt.NDArray[np.float32]) -> None:
    await store.read(lambda c: c.knn(vector, 10, NO_FILTERS))


async def measure(path: Path, chunks: int | None) -> dict[str, Any]:
    """Load the index, search a little, then write `chunks` new chunks while sampling."""
    found = re.search(r"scale-(\d+)-(\d+)\.db$", path.name)
    if found is None:
        raise SystemExit(f"{path} is not a store written by python -m bench scale")
    size, dimension = int(found[1]), int(found[2])
    corpus = scale.make_corpus(size, dimension)
    _, vectors = scale.queries(corpus, 20)
    store = await SqliteStore.open(path, model_id=f"synthetic-{dimension}", dimension=dimension)
    try:
        for vector in vectors:  # loads the index; readers warm up as a daemon's do
            await _knn(store, vector)
        await store.vectors.wait_filled()
        live = store.vectors.live
        count = chunks if chunks is not None else live // 4 + 2000
        index_before = store.vectors.memory_bytes()
        steady = rss_anon_kb() / 1024
        # New documents after the store's own (bench scale numbers them from 0).
        source = scale.batches(corpus, count, seed=7)
        started = time.perf_counter()
        with AnonPeak() as peak:
            await scale._write_batches(store, source, count, first_doc=10**7)
        write_s = time.perf_counter() - started
        after = rss_anon_kb() / 1024
        index_after = store.vectors.memory_bytes()
    finally:
        await store.close()
    return {
        "chunks_before": live,
        "chunks_written": count,
        "write_s": round(write_s, 1),
        "index_mb_before": round(index_before / 2**20, 1),
        "index_mb_after": round(index_after / 2**20, 1),
        "rss_anon_mb_steady": round(steady, 1),
        "peak_rss_anon_mb_writing": peak.mb,
        "peak_ratio": round(peak.mb / steady, 2),
        "rss_anon_mb_after": round(after, 1),
        "load_average": round(os.getloadavg()[0], 1),
    }


if __name__ == "__main__":
    chunks = int(sys.argv[2]) if len(sys.argv) > 2 else None
    print(json.dumps(asyncio.run(measure(Path(sys.argv[1]), chunks))))
