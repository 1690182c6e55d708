"""Online re-embedding: reindex throughput, and search latency while it runs.

A fresh store is filled with SciFact abstracts under the `from` model (one memory each, one
chunk each), then searched with SciFact's queries for a while: the baseline. The reindex to the
`to` model then runs in the background while the same searches go on in a loop until the new
model is live; each search is timed (query embedding included, the query cache off so every
search embeds). The target model alone embedding the same texts in the same batches gives the
ceiling the reindex is compared with.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

from bench.common import bench_settings
from recalld.api import AsyncMemory
from recalld.embeddings.base import load_embedder


def read_scifact(folder: Path, docs: int, queries: int) -> tuple[list[str], list[str]]:
    """The first `docs` abstracts (title and text) and `queries` queries."""
    texts: list[str] = []
    with (folder / "corpus.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            texts.append(f"{row.get('title', '')}\n\n{row['text']}".strip())
            if len(texts) == docs:
                break
    asked: list[str] = []
    with (folder / "queries.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            asked.append(json.loads(line)["text"])
            if len(asked) == queries:
                break
    return texts, asked


def _ms(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2)


async def _search_loop(
    memory: AsyncMemory, queries: list[str], until: asyncio.Event, out: list[float]
) -> int:
    errors = 0
    i = 0
    while not until.is_set():
        t0 = time.perf_counter()
        try:
            await memory.search(queries[i % len(queries)], limit=10)
            out.append(time.perf_counter() - t0)
        except Exception:  # counted and reported: the benchmark's point is that there are none
            errors += 1
        i += 1
        await asyncio.sleep(0)
    return errors


async def run(
    folder: Path, workdir: Path, source: str, target: str, docs: int, overrides: dict[str, str]
) -> dict[str, Any]:
    """Fill a store with `docs` abstracts under `source`, then reindex it to `target`."""
    settings = bench_settings(
        workdir, {"embed.model": source, "embed.query_cache": "0", **overrides}
    )
    texts, queries = await asyncio.to_thread(read_scifact, folder, docs, 200)
    memory = await AsyncMemory.open(settings)
    try:
        for text in texts:
            await memory.remember(text)
        # Baseline: the same search loop for a fixed time, before any reindex.
        before: list[float] = []
        stop = asyncio.Event()
        loop = asyncio.create_task(_search_loop(memory, queries, stop, before))
        await asyncio.sleep(3.0)
        stop.set()
        errors_before = await loop

        during: list[float] = []
        stop = asyncio.Event()
        started = time.perf_counter()
        await memory.reindexer.start(target)
        loop = asyncio.create_task(_search_loop(memory, queries, stop, during))

        async def ignore(_: dict[str, Any]) -> None:
            pass

        result = await memory.reindexer.wait(ignore)
        elapsed = time.perf_counter() - started
        stop.set()
        errors_during = await loop
        model = memory.embedder.model_id
    finally:
        await memory.close()

    # The ceiling: the target model alone on the same texts, in the reindex's batch size.
    embedder = await asyncio.to_thread(
        load_embedder, target, settings.model_cache_dir, settings.embed
    )
    batch = settings.embed.batch_size
    await asyncio.to_thread(embedder.embed, ["warm up"])  # loading is not embedding
    t0 = time.perf_counter()
    for start in range(0, len(texts), batch):
        await asyncio.to_thread(embedder.embed, texts[start : start + batch])
    model_only = time.perf_counter() - t0
    p50_before = statistics.median(before) if before else float("nan")
    p50_during = statistics.median(during) if during else float("nan")
    return {
        "from": source,
        "to": target,
        "model_after": model,
        "chunks": result["chunks"],
        "reindex_s": round(elapsed, 3),
        "reindex_chunks_per_s": round(result["chunks"] / elapsed, 1),
        "model_only_chunks_per_s": round(len(texts) / model_only, 1),
        "searches_before": len(before),
        "searches_during": len(during),
        "errors_before": errors_before,
        "errors_during": errors_during,
        "p50_before_ms": round(p50_before * 1000, 2),
        "p50_during_ms": round(p50_during * 1000, 2),
        "p95_before_ms": _ms(before, 0.95),
        "p95_during_ms": _ms(during, 0.95),
        "p50_ratio": round(p50_during / p50_before, 2) if before and during else None,
    }
