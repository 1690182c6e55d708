"""Search at scale: synthetic stores of 10k to 1M chunks, latency, Recall@10, size, RSS, build.

No model is needed: chunk texts are drawn from a Zipf vocabulary with per-topic words (so
FTS5 has real posting lists to merge), and vectors from a topic / subtopic mixture calibrated
on all-MiniLM-L6-v2's SciFact vectors (mean cosine of random pairs ~0.12, query to 10th
neighbour ~0.5, and the same Hamming / asymmetric recall at 80 candidates out of 9k). Chunks
go in through `Writer.replace_document`, 25 per document and 2,000 per transaction, while a
worker thread draws the next batch, all inside one `Store.bulk_load` (an initial build).

Each size runs in its own process, so its RSS is its own. Latency is measured on the vector
route (`Reader.knn`, query embedding excluded), on sqlite-vec's exact KNN (the baseline; on a
few queries only above 200k chunks), on a granularity-filtered vector query, and on the full
search pipeline (`Searcher.search`, hybrid with every default stage) with precomputed query
vectors. The ground truth for Recall@10 is exact cosine over every stored vector, all queries
in one pass (`bench.scale_truth`). The real model's query-embedding time is measured once,
apart. Anonymous RSS is sampled for its peak while the index loads and fills.
"""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench import metrics, scale_truth
from bench.memory_peak import AnonPeak
from recalld.storage import records
from recalld.storage.contract import Store, Writer
from recalld.storage.registry import open_store
from recalld.storage.sqlite import readers
from recalld.storage.sqlite.store import SqliteStore
from recalld.types import NO_FILTERS, ChunkDraft, Filters

CHUNKS_PER_DOCUMENT = 25
DOCUMENTS_PER_TRANSACTION = 80
# The mixture's shares of squared norm: a direction every vector shares, its topic, its
# subtopic and noise (queries are noisier); see the module docstring for the calibration.
COMMON, TOPIC, SUBTOPIC, NOISE, QUERY_NOISE = 0.115, 0.1, 0.2, 0.585, 0.4
PER_TOPIC, PER_SUBTOPIC = 1000, 100
VOCABULARY = 30_000
TOPIC_WORDS = 24
# sqlite-vec's exact KNN reads every vector for each query (~1 s at a million chunks, past the
# store's 5 s query limit on a loaded machine): bigger stores time it on a few queries only.
EXACT_TIMED_BELOW, EXACT_TIMED_BIG = 200_000, 5


@dataclasses.dataclass(frozen=True)
class Corpus:
    """The random structure shared by a store's chunks and its queries."""

    dimension: int
    common: npt.NDArray[np.float32]
    topics: npt.NDArray[np.float32]
    subtopics: npt.NDArray[np.float32]
    words: list[str]
    weights: npt.NDArray[np.float64]
    topic_words: npt.NDArray[np.int64]

    @property
    def subtopic_count(self) -> int:
        return int(self.subtopics.shape[0])


def _unit(m: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    out: npt.NDArray[np.float32] = m / np.linalg.norm(m, axis=-1, keepdims=True)
    return out


def _words(rng: np.random.Generator, count: int) -> list[str]:
    syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"]
    seen: dict[str, None] = {}
    while len(seen) < count:
        parts = rng.integers(0, len(syllables), (count, 3))
        lengths = rng.integers(1, 4, count)
        for row, length in zip(parts, lengths, strict=True):
            seen["".join(syllables[i] for i in row[:length])] = None
    return list(seen)[:count]


def make_corpus(chunks: int, dimension: int, seed: int = 0) -> Corpus:
    """Topic directions and vocabulary for a store of `chunks` chunks."""
    rng = np.random.default_rng(seed)
    topics = max(4, chunks // PER_TOPIC)
    subtopics = topics * (PER_TOPIC // PER_SUBTOPIC)
    ranks = np.arange(1, VOCABULARY + 1, dtype=np.float64)
    weights = 1.0 / ranks**1.07
    return Corpus(
        dimension=dimension,
        common=_unit(rng.standard_normal(dimension, dtype=np.float32)),
        topics=_unit(rng.standard_normal((topics, dimension), dtype=np.float32)),
        subtopics=_unit(rng.standard_normal((subtopics, dimension), dtype=np.float32)),
        words=_words(rng, VOCABULARY),
        weights=weights / weights.sum(),
        # Topic words come from the rarer half of the vocabulary, as names and jargon do.
        topic_words=rng.integers(VOCABULARY // 2, VOCABULARY, (subtopics, TOPIC_WORDS)),
    )


def draw_vectors(
    corpus: Corpus, subtopic: npt.NDArray[np.int64], rng: np.random.Generator, noise: float
) -> npt.NDArray[np.float32]:
    """Unit vectors around the given subtopics."""
    per = PER_TOPIC // PER_SUBTOPIC
    noise_part = _unit(rng.standard_normal((len(subtopic), corpus.dimension), dtype=np.float32))
    mixed = (
        np.sqrt(COMMON) * corpus.common
        + np.sqrt(TOPIC) * corpus.topics[subtopic // per]
        + np.sqrt(SUBTOPIC) * corpus.subtopics[subtopic]
        + np.sqrt(noise) * noise_part
    )
    return _unit(mixed.astype(np.float32))


def draw_texts(
    corpus: Corpus, subtopic: npt.NDArray[np.int64], rng: np.random.Generator
) -> list[str]:
    """Chunk texts of 40-120 words: Zipf-distributed common words and a few topic words."""
    lengths = rng.integers(40, 121, len(subtopic))
    general = rng.choice(VOCABULARY, size=int(lengths.sum()), p=corpus.weights)
    topical = rng.integers(0, TOPIC_WORDS, int(lengths.sum()))
    use_topic = rng.random(int(lengths.sum())) < 0.15
    words = corpus.words
    texts = []
    start = 0
    for row, length in zip(subtopic, lengths, strict=True):
        end = start + int(length)
        ids = np.where(
            use_topic[start:end], corpus.topic_words[row][topical[start:end]], general[start:end]
        )
        texts.append(" ".join(words[i] for i in ids))
        start = end
    return texts


def batches(
    corpus: Corpus, chunks: int, seed: int = 1
) -> Iterator[tuple[list[str], npt.NDArray[np.float32], npt.NDArray[np.int64]]]:
    """Texts, vectors and subtopics, one transaction's worth at a time."""
    rng = np.random.default_rng(seed)
    step = CHUNKS_PER_DOCUMENT * DOCUMENTS_PER_TRANSACTION
    for start in range(0, chunks, step):
        count = min(step, chunks - start)
        subtopic = rng.integers(0, corpus.subtopic_count, count)
        yield (
            draw_texts(corpus, subtopic, rng),
            draw_vectors(corpus, subtopic, rng, NOISE),
            (subtopic),
        )


def queries(corpus: Corpus, count: int, seed: int = 2) -> tuple[list[str], npt.NDArray[np.float32]]:
    """Query texts (a few topic and common words) and their precomputed vectors."""
    rng = np.random.default_rng(seed)
    subtopic = rng.integers(0, corpus.subtopic_count, count)
    vectors = draw_vectors(corpus, subtopic, rng, QUERY_NOISE)
    texts = []
    for row in subtopic:
        picked = rng.choice(corpus.topic_words[row], size=2, replace=False)
        # Two everyday words from below the Zipf head: the head plays stopwords' part.
        common = rng.integers(200, 5000, size=2)
        texts.append(" ".join(corpus.words[int(i)] for i in (*picked, *common)))
    return texts, vectors


class PrecomputedEmbedder:
    """An embedder that answers known texts with their precomputed vectors (for the pipeline
    timing); anything else gets a deterministic random unit vector."""

    max_tokens = 512

    def __init__(self, dimension: int, known: dict[str, npt.NDArray[np.float32]]) -> None:
        self.dimension = dimension
        self.model_id = f"synthetic-{dimension}"
        self._known = known

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Look each text up; unknown texts get a vector seeded by their hash."""
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            if text in self._known:
                out[i] = self._known[text]
            else:
                rng = np.random.default_rng(abs(hash(text)) % 2**32)
                out[i] = _unit(rng.standard_normal(self.dimension, dtype=np.float32))
        return out

    def count_tokens(self, text: str) -> int:
        """Whitespace words."""
        return len(text.split())


def _documents(
    first_doc: int,
    batch: tuple[list[str], npt.NDArray[np.float32], npt.NDArray[np.int64]],
) -> list[tuple[records.NewDocument, list[records.NewChunk]]]:
    texts, vectors, _ = batch
    docs = []
    for doc, start in enumerate(range(0, len(texts), CHUNKS_PER_DOCUMENT), start=first_doc):
        # Every fifth document is a conversation, so granularity filters have work to do.
        kind, granularity = ("conversation", "round") if doc % 5 == 4 else ("text", "chunk")
        new = [
            records.NewChunk(
                ChunkDraft(text=texts[i], kind=kind, granularity=granularity, key=f"c{i}"),  # type: ignore[arg-type]
                len(texts[i].split()),
                vectors[i],
            )
            for i in range(start, min(start + CHUNKS_PER_DOCUMENT, len(texts)))
        ]
        docs.append(
            (records.NewDocument(f"synthetic/{doc:07d}.md", kind, "markdown", f"h{doc}"), new)
        )
    return docs


async def build(path: Path | str, corpus: Corpus, chunks: int, vector_index: str = "hnsw") -> float:
    """Write a synthetic store of `chunks` chunks at `path` (a SQLite file or a PostgreSQL
    URL) as one bulk load (`Store.bulk_load`: PostgreSQL builds its HNSW index at the end);
    returns seconds taken, the index build included."""
    started = time.perf_counter()
    store = await open_store(
        path,
        model_id=f"synthetic-{corpus.dimension}",
        dimension=corpus.dimension,
        vector_index=vector_index,
    )
    source = batches(corpus, chunks)
    try:
        async with store.bulk_load():
            await _write_batches(store, source, chunks)
    finally:
        await store.close()
    return time.perf_counter() - started


async def _write_batches(
    store: Store, source: Iterator[Any], chunks: int, first_doc: int = 0
) -> None:
    """The corpus's documents, 80 to a transaction, while a worker thread draws the next batch
    (documents numbered from `first_doc`)."""
    doc = first_doc
    written = 0
    upcoming = asyncio.create_task(asyncio.to_thread(next, source, None))
    while (batch := await upcoming) is not None:
        # Draw the next batch in a thread while the store writes this one.
        upcoming = asyncio.create_task(asyncio.to_thread(next, source, None))
        docs = _documents(doc, batch)
        doc += len(docs)

        async def write(conn: Writer, docs: list[Any] = docs) -> None:
            for row, new in docs:
                await conn.replace_document(row, new)

        await store.write(write)
        written += len(batch[0])
        print(f"\rbuilt {written}/{chunks}", end="", file=sys.stderr)
    print(file=sys.stderr)


def _rss_mb() -> dict[str, float]:
    """Current and peak resident memory of this process (Linux /proc; empty elsewhere)."""
    out: dict[str, float] = {}
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                # RssFile is mostly SQLite's memory-mapped file pages (clean, reclaimable);
                # RssAnon is the process's own heap, the index included.
                names = {
                    "VmRSS": "rss_mb",
                    "VmHWM": "peak_rss_mb",
                    "RssAnon": "rss_anon_mb",
                    "RssFile": "rss_file_mb",
                }
                if key in names:
                    out[names[key]] = round(int(value.split()[0]) / 1024, 1)
    except OSError:
        pass
    return out


def _latency(samples: Sequence[float]) -> dict[str, float]:
    return {f"p{p}_ms": round(metrics.percentile(list(samples), p), 2) for p in (50, 95, 99)}


def _disk_mb(path: Path) -> float:
    files = [path, path.with_name(path.name + "-wal")]
    return round(sum(f.stat().st_size for f in files if f.exists()) / 2**20, 1)


async def _knn_timed(
    store: SqliteStore, vector: npt.NDArray[np.float32], k: int, filters: Filters
) -> tuple[list[int], float]:
    started = time.perf_counter()
    hits = await store.read(lambda c: c.knn(vector, k, filters))
    return [cid for cid, _ in hits], (time.perf_counter() - started) * 1000


async def _exact_timed(
    store: SqliteStore, vector: npt.NDArray[np.float32], k: int
) -> tuple[list[int], float]:
    """sqlite-vec's exact KNN (no in-memory index), without the query time limit."""
    async with store.reading_conn() as conn, store.vectors.untimed(conn):
        started = time.perf_counter()
        hits = await readers.knn(conn, None, vector, k, NO_FILTERS)
        return [cid for cid, _ in hits], (time.perf_counter() - started) * 1000


async def measure(
    path: Path, corpus: Corpus, count: int, exact_below: int | None = None
) -> dict[str, Any]:
    """Open the store at `path` and time every route on `count` queries."""
    from recalld.api import calibrate
    from recalld.config import SearchSettings
    from recalld.retrieval.search import Searcher

    # Two sets: the first warms the caches (its times are reported as `vector_cold`), the
    # second is measured; a daemon that has answered some queries meets new ones.
    texts, vectors = queries(corpus, 2 * count)
    cold_vectors = vectors[:count]
    texts, vectors = texts[count:], vectors[count:]
    store = await SqliteStore.open(
        path, model_id=f"synthetic-{corpus.dimension}", dimension=corpus.dimension
    )
    if exact_below is not None:
        store.vectors.tuning = dataclasses.replace(store.vectors.tuning, exact_below=exact_below)
    try:
        peaks: dict[str, float] = {}
        started = time.perf_counter()
        with AnonPeak() as peak:
            async with store.reading_conn() as conn:
                await store.vectors.ensure_loaded(conn)
        load_s = time.perf_counter() - started
        peaks["index_load"] = peak.mb
        # A big store's int8 copies fill in the background (searches meanwhile rescore more
        # rows exactly); the figures below are for the filled index.
        started = time.perf_counter()
        with AnonPeak() as peak:
            await store.vectors.wait_filled()
        fill_s = time.perf_counter() - started
        peaks["index_fill"] = peak.mb
        # The keyword mirror too, so RSS below holds it (searches would start its build).
        started = time.perf_counter()
        with AnonPeak() as peak:
            keywords = await store.keywords.load()
        keyword_load_s = time.perf_counter() - started
        peaks["keyword_load"] = peak.mb
        approximate = store.vectors.use_for((), ())
        routes: dict[str, list[float]] = {"vector": [], "exact": [], "vector_filtered": []}
        found: list[list[int]] = []
        found_f: list[list[int]] = []
        only_rounds = Filters(granularities=("round",))
        cold = [(await _knn_timed(store, v, 10, NO_FILTERS))[1] for v in cold_vectors]
        for vector in vectors:
            ids, ms = await _knn_timed(store, vector, 10, NO_FILTERS)
            found.append(ids)
            routes["vector"].append(ms)
            ids, ms = await _knn_timed(store, vector, 10, only_rounds)
            found_f.append(ids)
            routes["vector_filtered"].append(ms)
        # Before the exact baseline fills SQLite's page caches with every vector.
        memory = _rss_mb()
        # The ground truth: every query against every vector in one pass (scale_truth).
        async with store.reading_conn() as conn, store.vectors.untimed(conn):
            exact, exact_f = await scale_truth.exact_top(
                conn, vectors, 10, corpus.dimension, only_rounds.granularities
            )
        # The exact baseline's latency: sqlite-vec's KNN (every vector read for each query),
        # on a few queries only in big stores; `exact_agreement`: its ids are the truth's.
        timed = vectors if store.vectors.live < EXACT_TIMED_BELOW else vectors[:EXACT_TIMED_BIG]
        agreement = []
        for vector, truth in zip(timed, exact, strict=False):
            ids, ms = await _exact_timed(store, vector, 10)
            routes["exact"].append(ms)
            agreement.append(set(ids) == set(truth))
        recall = [len(set(a) & set(b)) / max(1, len(b)) for a, b in zip(found, exact, strict=True)]
        recall_f = [
            len(set(a) & set(b)) / max(1, len(b)) for a, b in zip(found_f, exact_f, strict=True)
        ]

        embedder = PrecomputedEmbedder(corpus.dimension, dict(zip(texts, vectors, strict=True)))
        searcher = Searcher(store, embedder, SearchSettings(), await calibrate(embedder))
        full: list[float] = []
        keyword: list[float] = []
        for text in texts:
            runs: list[tuple[list[float], dict[str, Any]]] = [
                (full, {}),
                (keyword, {"mode": "bm25", "gate": False}),
            ]
            for samples, overrides in runs:
                started = time.perf_counter()
                await searcher.search(text, **overrides)
                samples.append((time.perf_counter() - started) * 1000)
        index_mb = round(store.vectors.memory_bytes() / 2**20, 1)
    finally:
        await store.close()
    return {
        "route": "cascade" if approximate else "exact in memory",
        "queries": count,
        "recall@10": round(metrics.mean(recall), 4),
        "recall@10_min": round(min(recall), 2),
        "recall@10_filtered": round(metrics.mean(recall_f), 4),
        "vector": _latency(routes["vector"]),
        "vector_cold": _latency(cold),
        "vector_filtered": _latency(routes["vector_filtered"]),
        "exact": _latency(routes["exact"]),
        "exact_timed_queries": len(routes["exact"]),
        "exact_agreement": round(metrics.mean([float(a) for a in agreement]), 4),
        "search_full": _latency(full),
        "search_bm25": _latency(keyword),
        "index_load_s": round(load_s, 2),
        "index_fill_s": round(fill_s, 2),
        "index_mb": index_mb,
        "keyword_load_s": round(keyword_load_s, 2),
        "keyword_mb": round(keywords.nbytes() / 2**20, 1) if keywords else None,
        "rss_mb": memory.get("rss_mb"),
        "rss_anon_mb": memory.get("rss_anon_mb"),
        "rss_file_mb": memory.get("rss_file_mb"),
        "peak_rss_mb": _rss_mb().get("peak_rss_mb"),
        "peak_rss_anon_mb": peaks,
    }


def store_path(workdir: Path, chunks: int, dimension: int) -> Path:
    """Where the synthetic store of a size lives (reused with `--store-dir`)."""
    return workdir / f"scale-{chunks}-{dimension}.db"


def build_size(workdir: Path, chunks: int, dimension: int, keep: bool) -> float | None:
    """Build the store of `chunks` chunks unless `keep` and it exists; seconds, or None."""
    path = store_path(workdir, chunks, dimension)
    if keep and path.exists():
        return None
    for stale in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        stale.unlink(missing_ok=True)
    return asyncio.run(build(path, make_corpus(chunks, dimension), chunks))


def measure_size(
    workdir: Path, chunks: int, dimension: int, count: int, exact_below: int | None = None
) -> dict[str, Any]:
    """Measure the store of `chunks` chunks (in a process that did not build it)."""
    path = store_path(workdir, chunks, dimension)
    result = asyncio.run(measure(path, make_corpus(chunks, dimension), count, exact_below))
    return {"disk_mb": _disk_mb(path), **result}


def embed_timing(count: int, settings: Any) -> dict[str, Any] | None:
    """The real model's time to embed one query, on `count` short queries (None: skipped)."""
    if count <= 0:
        return None
    from bench.common import load_model

    model = load_model(settings)
    texts, _ = queries(make_corpus(1000, 8), count, seed=3)
    model.embed(["warm up the graph"])
    times = []
    for text in texts:
        started = time.perf_counter()
        model.embed([text])
        times.append((time.perf_counter() - started) * 1000)
    return {"model": model.model_id, "queries": count, **_latency(times)}


def _postgres_size(
    url: str, index: str, chunks: int, dimension: int, count: int, keep: bool
) -> dict[str, Any]:
    from bench import scale_pg

    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        build_s = pool.apply(scale_pg.build_size, (url, chunks, dimension, keep, index))
    with context.Pool(1) as pool:
        measured = pool.apply(scale_pg.measure_size, (url, chunks, dimension, count))
    return {
        "backend": "postgresql",
        "chunks": chunks,
        "dimension": dimension,
        "build_s": None if build_s is None else round(build_s, 1),
        "build_chunks_per_s": None if build_s is None else round(chunks / build_s),
        **measured,
    }


def run(
    sizes: Sequence[int],
    dimension: int,
    count: int,
    workdir: Path,
    keep: bool,
    embed_queries: int,
    settings: Any,
    exact_below: int | None = None,
    pg_url: str | None = None,
    pg_index: str = "auto",
) -> dict[str, Any]:
    """Every size, each in a fresh process, then the model's query-embedding time.

    With `pg_url`, every size is also built and measured on PostgreSQL (`bench.scale_pg`),
    each result row naming its backend; `pg_index` "auto" picks the index this machine's
    CPU runs (`scale_pg.local_vector_index`).
    """
    from bench import scale_pg
    from recalld.storage.sqlite.vectors import Tuning

    index = scale_pg.local_vector_index() if pg_index == "auto" else pg_index

    results = []
    context = multiprocessing.get_context("spawn")
    for chunks in sizes:
        # Build and measure in separate fresh processes, so RSS is the searching process's.
        with context.Pool(1) as pool:
            build_s = pool.apply(build_size, (workdir, chunks, dimension, keep))
        with context.Pool(1) as pool:
            measured = pool.apply(measure_size, (workdir, chunks, dimension, count, exact_below))
        results.append(
            {
                "backend": "sqlite",
                "chunks": chunks,
                "dimension": dimension,
                "build_s": None if build_s is None else round(build_s, 1),
                "build_chunks_per_s": None if build_s is None else round(chunks / build_s),
                **measured,
            }
        )
        print(f"{chunks}: {results[-1]}", file=sys.stderr)
        if pg_url:
            results.append(_postgres_size(pg_url, index, chunks, dimension, count, keep))
            print(f"{chunks}: {results[-1]}", file=sys.stderr)
    return {
        "dimension": dimension,
        "queries": count,
        "tuning": dataclasses.asdict(
            Tuning() if exact_below is None else Tuning(exact_below=exact_below)
        ),
        "sizes": results,
        "query_embedding": embed_timing(embed_queries, settings),
    }
