"""Search time under several settings on the LoCoMo stores a `bench locomo` run kept.

Shared by `bench.round_stages_cost` and `bench.covered_cost`: the first `stores` stores each
search their first `questions` questions once to warm up (the query vector is cached, so the
embedding is not timed), then under every setting in turn, alternating per question with the
order turning, over `PASSES` passes, so a shared machine's load falls on all alike.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

from bench.common import bench_settings, load_model
from recalld.api import AsyncMemory
from recalld.embeddings.base import Embedder
from recalld.types import NO_FILTERS, Filters, SearchResult

PASSES = 3
LIMIT = 10
Settings = dict[str, dict[str, Any]]


async def time_settings(
    store_dir: Path,
    dataset: Path,
    settings: Settings,
    *,
    stores: int = 2,
    questions: int = 150,
    filters: Filters = NO_FILTERS,
) -> tuple[dict[str, list[float]], dict[str, list[SearchResult]]]:
    """Each setting's search times (ms, question by question, pass after pass), and its
    results of the first pass."""
    samples = json.loads(await asyncio.to_thread(dataset.read_text, "utf-8"))[:stores]
    embedder: Embedder | None = None
    times: dict[str, list[float]] = {name: [] for name in settings}
    first: dict[str, list[SearchResult]] = {name: [] for name in settings}
    for sample in samples:
        store = bench_settings(store_dir / str(sample["sample_id"]), {})
        embedder = embedder or load_model(store)
        memory = await AsyncMemory.open(store, embedder=embedder)
        try:
            searcher = memory.searcher
            asked = [str(qa["question"]) for qa in sample["qa"]][:questions]
            for query in asked:
                await searcher.search(query, limit=LIMIT, filters=filters)
            for turn in range(PASSES):
                for i, query in enumerate(asked):
                    names = list(settings) if (i + turn) % 2 == 0 else list(settings)[::-1]
                    for name in names:
                        started = time.perf_counter()
                        found = await searcher.search(
                            query, limit=LIMIT, filters=filters, **settings[name]
                        )
                        times[name].append((time.perf_counter() - started) * 1000)
                        if turn == 0:
                            first[name].append(found)
        finally:
            await memory.close()
    return times, first


def print_ratios(times: dict[str, list[float]], base: str) -> None:
    """Each setting's median search time and its median per-query ratio to `base`'s."""
    for name, values in times.items():
        ratio = statistics.median(a / b for a, b in zip(values, times[base], strict=True))
        print(f"{name}: median {statistics.median(values):.2f} ms, {ratio:.3f}x per query")
