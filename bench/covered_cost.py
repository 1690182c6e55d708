"""What covered turns and neighbour support through parents cost an unfiltered conversation
search (issue 14).

    python -m bench.covered_cost STORE_DIR ../shared/data/locomo/locomo_dev.json [N] [Q]

Opens the first `N` (2) LoCoMo stores a `bench locomo --store-dir STORE_DIR` run kept, and
searches each one's first `Q` (150) questions over every granularity, `limit` 10, with
neither `search.drop_covered` nor `search.neighbour_through_parent`, with covered turns only,
and with both (the defaults). The three alternate per question, their order turning, over
three passes after one warm-up search each (the query vector is cached, so the embedding is
not timed), so a shared machine's load falls on all alike. Prints each setting's median
search time, its median per-query ratio to neither, and how many hits left a search on
average with both (a search that drops some reads as many more candidates to keep `limit`).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import bench_settings, load_model
from recalld.api import AsyncMemory
from recalld.embeddings.base import Embedder

SETTINGS: dict[str, dict[str, Any]] = {
    "neither": {"drop_covered": False, "neighbour_through_parent": False},
    "covered turns": {"neighbour_through_parent": False},
    "both (default)": {},
}
PASSES = 3
LIMIT = 10


async def main(store_dir: Path, dataset: Path, stores: int = 2, questions: int = 150) -> None:
    samples = json.loads(await asyncio.to_thread(dataset.read_text, "utf-8"))[:stores]
    embedder: Embedder | None = None
    times: dict[str, list[float]] = {name: [] for name in SETTINGS}
    dropped: list[int] = []
    for sample in samples:
        settings = bench_settings(store_dir / str(sample["sample_id"]), {})
        embedder = embedder or load_model(settings)
        memory = await AsyncMemory.open(settings, embedder=embedder)
        try:
            searcher = memory.searcher
            asked = [str(qa["question"]) for qa in sample["qa"]][:questions]
            for query in asked:
                await searcher.search(query, limit=LIMIT)
            for turn in range(PASSES):
                for i, query in enumerate(asked):
                    names = list(SETTINGS) if (i + turn) % 2 == 0 else list(SETTINGS)[::-1]
                    for name in names:
                        started = time.perf_counter()
                        found = await searcher.search(query, limit=LIMIT, **SETTINGS[name])
                        times[name].append((time.perf_counter() - started) * 1000)
                        if turn == 0 and not SETTINGS[name]:
                            dropped.append(int(found.explain["covered"]))
        finally:
            await memory.close()
    base = times["neither"]
    for name, values in times.items():
        ratio = statistics.median(a / b for a, b in zip(values, base, strict=True))
        print(f"{name}: median {statistics.median(values):.2f} ms, {ratio:.3f}x per query")
    print(f"hits dropped a search: mean {statistics.mean(dropped):.2f}, max {max(dropped)}")


if __name__ == "__main__":
    args = sys.argv[1:]
    asyncio.run(main(Path(args[0]), Path(args[1]), *(int(a) for a in args[2:4])))
