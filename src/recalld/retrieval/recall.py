"""Recall, fusion and the gate: from a query to its fused candidates.

    query ─▶ embed ─▶ vector KNN ───────────────┐
          └▶ terms ─▶ keyword search (BM25, ────┴▶ (score completion) ─▶ fusion ─▶ gate
                      frequencies, coverage, scores)                        ─▶ Candidates

Both routes run at once, each for the best `pool` chunks; completion gives every candidate
both routes' scores; fusion (the formulas are in `fusion.py`) orders them; the gate (MemX R1,
`gate.py`) rejects a query nothing answers. The ranking stages then work on the candidates.
`Recalled` also keeps each route's ranks for every hit's `explain`.

The keyword route is one read (`Reader.keyword_search`): on SQLite the keyword mirror scores
the matches once, in one worker thread, and the same pass gives the terms' document
frequencies, the terms the best hits contain (the coverage) and the keyword scores of the
vector route's hits (completion), looked up without another query. Each of those was its own
read before, a thread hop competing with the embedding for the two cores (the frequencies
took ~4.8 ms of wall for 0.02 ms of work, issue 20). Score completion's vectors of the keyword
hits are read as soon as the keyword route has them, while the query is embedded. On the full
SciFact store a search took 0.72-0.90x the time at p50 (per-query median 0.81-0.93x; two runs
of `python -m bench.search_trees`, old and new in alternating blocks, 300 queries, the same
ranked ids, load average 8-11; see the README's Speed section). Reading the keyword hits'
chunks there too made searches 1.18-1.21x slower in two such runs: work beside the embedding
slows it more than a read after it costs. Every store gives the ranked match and the
matched terms from one read; where it cannot give the rest from its pass (FTS5 before the
mirror is built, PostgreSQL) the answer says so and recall asks as before: the searcher's
cached frequencies, `keyword_scores`.

On PostgreSQL the query embedding runs beside the routes, not before them, and ONNX Runtime
keeps one intra-op thread a core for it (issue 20, no contention inside a search): on the full
SciFact store (13,948 chunks, 2 cores shared, load average 7-11), embedding first took
0.95-1.14x the per-query time of this structure (six runs), everything in turn 0.97-1.08x, one
ORT thread 1.00-1.05x, all ranking the same ids; nothing was faster beyond the run-to-run
noise, and beside the routes a remote embedder's round trip hides the keyword route
(`python -m bench.search_structure HOME ../shared/data/scifact`).

On SQLite below 200k chunks (`Store.routes_together`) a hybrid search embeds first, then
asks for both routes in one read (`Reader.both_routes`: one trip to a reader's thread;
storage/sqlite/routes.py), and runs apart only what that read could not answer. The hops, not
the work, were what ran side by side: each step of each route came back to the event loop, and
every step but the SIMD kernels and SQLite's own work holds the GIL. Same ranked ids and
scores; the synthetic 100k store's full search 0.84x the p50 (per-query median 0.88x, CPU
0.87x; 1,200 queries, 24 blocks, load average 6-7), SciFact 0.92x (per query 0.95x;
`bench.search_trees`, 300 queries). Above 200k chunks the cascade's Hamming stage runs in two
threads that release the GIL, and the keyword pass beside them is worth more than the hops: at
1M one trip took 1.5x the time (`bench.scale_trees`, 400 queries), so the routes run apart.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from recalld.errors import EmbeddingError, RecalldError
from recalld.retrieval import completion, fusion, gate
from recalld.retrieval.pipeline import Candidates, Query
from recalld.storage.contract import BothRoutes, KeywordAnswer, Store
from recalld.storage.fts import match_expression
from recalld.types import Tier

EmbedQuery = Callable[[str], Awaitable[npt.NDArray[np.float32]]]
"""The query's vector (the searcher's cached `embed_query`)."""

DocFreqs = Callable[[list[str]], Coroutine[Any, Any, tuple[list[int], int]]]
"""Each term's document frequency and the store's chunk total (the searcher's cache)."""


@dataclass(slots=True)
class Recalled:
    """What the two routes returned for a query.

    Attributes:
        vec_hits: Vector route: (chunk id, cosine distance), nearest first.
        kw_hits: Keyword route: (chunk id, BM25 score), best first.
        dfs: Each query term's document frequency (keyword route only).
        total: How many chunks the store holds (for the IDFs).
        coverage: The IDF-weighted share of the query the best keyword hit contains.
        degraded: Why the query could not be embedded, if it could not.
        timings: The routes' `timings_ms` entries.
        vector_keyword: The keyword score of each vector hit that matches the query (score
            completion's lookup, made while the keyword route still runs); None when score
            completion is off.
        keyword_vectors: The stored vectors of the keyword hits, or of those the vector
            route did not return when both routes came from one read (score completion's
            lookup); None when score completion is off.
    """

    vec_hits: list[tuple[int, float]]
    kw_hits: list[tuple[int, float]]
    dfs: list[int]
    total: int
    coverage: float
    degraded: list[str]
    timings: dict[str, float]
    vector_keyword: dict[int, float] | None = None
    keyword_vectors: dict[int, npt.NDArray[np.float32]] | None = None
    similarity: dict[int, float] = field(init=False)
    bm25: dict[int, float] = field(init=False)

    def __post_init__(self) -> None:
        self.similarity = {cid: 1.0 - dist for cid, dist in self.vec_hits}
        self.bm25 = dict(self.kw_hits)

    def route_orders(self) -> tuple[list[int], list[int]]:
        """Each route's chunk ids, best first (for RRF)."""
        return [c for c, _ in self.vec_hits], [c for c, _ in self.kw_hits]


async def recall(asked: Query, store: Store, embed: EmbedQuery, doc_freqs: DocFreqs) -> Recalled:
    """Both routes at once, each the best `pool` chunks, then the keyword route's coverage.

    The keyword route is one `keyword_search` that also brings the matched terms for the
    coverage and, where the store has them from the same pass, the terms' document
    frequencies (else `doc_freqs`) and the scores score completion looks up (else
    `keyword_scores`).

    When the query cannot be embedded, a hybrid search answers by keywords alone and
    `degraded` says why (issue 6); a vector-only search raises the `EmbeddingError`.
    """
    opts, pool, filters, terms = asked.settings, asked.pool, asked.recall_filters, asked.terms
    timings: dict[str, float] = {}
    degraded: list[str] = []
    expr = match_expression(terms)
    use_vector, use_keyword = asked.uses_vector, asked.uses_keyword
    completing = _completes(asked) and use_vector and use_keyword
    vector_keyword: dict[int, float] | None = {} if completing else None
    keyword_vectors: dict[int, npt.NDArray[np.float32]] | None = {} if completing else None
    answered: list[KeywordAnswer] = []  # the keyword route's answer, once it has one
    together = BothRoutes()
    if use_vector and use_keyword and store.routes_together:
        try:
            together = await _both_routes(asked, store, embed, completing, timings)
        except EmbeddingError as exc:
            if opts.mode == "vector":
                raise
            degraded.append(exc.message)
            use_vector = False
    if together.keyword is not None:
        answered.append(together.keyword)

    async def vector_route() -> list[tuple[int, float]]:
        if together.vector is not None:
            hits = together.vector
            timings["vector_ms"] = together.vector_ms
        else:
            t0 = time.perf_counter()
            try:
                vector = await embed(asked.text)
            except EmbeddingError as exc:
                if opts.mode == "vector":
                    raise
                degraded.append(exc.message)
                return []
            timings.setdefault("embed_ms", (time.perf_counter() - t0) * 1000)
            t1 = time.perf_counter()
            hits = await store.read(lambda c: c.knn(vector, pool, filters))
            timings["vector_ms"] = (time.perf_counter() - t1) * 1000
        if vector_keyword is not None and hits and expr:
            # Completion's keyword scores: from the keyword route's own pass when it has ended
            # (usually: it is the faster route once its matches are scored in memory), else
            # looked up while it still runs.
            ids = [cid for cid, _ in hits]
            scores = answered[0].scores if answered else None
            if scores is not None:
                vector_keyword.update(scores(ids))
            else:
                vector_keyword.update(await store.read(lambda c: c.keyword_scores(expr, ids)))
        return hits

    async def keyword_route() -> tuple[KeywordAnswer, list[int], int]:
        if together.keyword is not None:
            answer = together.keyword
            timings["bm25_ms"] = together.keyword_ms
            read_vectors = together.keyword_vectors is None
            if keyword_vectors is not None and together.keyword_vectors is not None:
                keyword_vectors.update(together.keyword_vectors)
        else:
            t0 = time.perf_counter()
            depth = opts.coverage_depth
            answer = await store.read(lambda c: c.keyword_search(terms, pool, filters, depth))
            timings["bm25_ms"] = (time.perf_counter() - t0) * 1000
            answered.append(answer)
            read_vectors = True
        if keyword_vectors is not None and answer.hits and read_vectors:
            # Completion's vectors of the keyword-only hits, read while the query is embedded
            # (the vector route's hits are not known yet: all the keyword hits' are read).
            ids = [cid for cid, _ in answer.hits]
            keyword_vectors.update(
                await store.read(lambda c: c.vectors_by_id(ids, store.dimension))
            )
        if answer.frequencies is not None:
            return answer, answer.frequencies, answer.total
        return answer, *(await doc_freqs(terms))

    try:
        async with asyncio.TaskGroup() as tg:
            vec_task = tg.create_task(vector_route()) if use_vector else None
            kw_task = tg.create_task(keyword_route()) if use_keyword else None
    except* RecalldError as group:
        # Our own errors keep their class (and so their code on the socket).
        raise group.exceptions[0] from None
    vec_hits = vec_task.result() if vec_task else []
    answer, dfs, total = kw_task.result() if kw_task else (KeywordAnswer([], []), [], 0)
    kw_hits = answer.hits
    coverage = 0.0
    if kw_hits:
        # The IDF-weighted share of the query the best hits contain: the most any one holds.
        coverage = max(fusion.idf_coverage(dfs, m, total) for m in answer.matched)
    return Recalled(
        vec_hits, kw_hits, dfs, total, coverage, degraded, timings, vector_keyword, keyword_vectors
    )


async def _both_routes(
    asked: Query, store: Store, embed: EmbedQuery, completing: bool, timings: dict[str, float]
) -> BothRoutes:
    """The query's vector, then both routes in one read (`Store.routes_together`)."""
    t0 = time.perf_counter()
    vector = await embed(asked.text)
    timings["embed_ms"] = (time.perf_counter() - t0) * 1000
    terms, pool, filters = asked.terms, asked.pool, asked.recall_filters
    depth = asked.settings.coverage_depth
    return await store.read(
        lambda c: c.both_routes(vector, terms, pool, filters, depth, completing)
    )


def _completes(asked: Query) -> bool:
    """Whether score completion runs for this query."""
    return asked.settings.complete_scores and asked.settings.mode == "hybrid"


async def complete(
    asked: Query, recalled: Recalled, store: Store, embed: EmbedQuery
) -> completion.Completed | None:
    """Both routes' scores for every candidate (retrieval/completion.py), when on."""
    if not _completes(asked):
        return None
    if not (recalled.vec_hits or recalled.kw_hits):
        return None
    # The vector route cached the query's vector.
    vector = None if recalled.degraded else await embed(asked.text)
    return await completion.complete(
        store,
        vector,
        match_expression(asked.terms),
        recalled.similarity,
        recalled.bm25,
        recalled.vector_keyword,
        recalled.keyword_vectors,
        _matches_facts(asked),
    )


def _matches_facts(asked: Query) -> bool:
    """Whether a candidate's facts match for it: on, and the filter leaves facts out."""
    kept = asked.recall_filters.granularities
    return asked.settings.match_facts and bool(kept) and "fact" not in kept


def fuse_and_gate(
    asked: Query,
    recalled: Recalled,
    completed: completion.Completed | None,
    calibration: gate.Calibration,
    store: Store,
) -> Candidates:
    """The fused candidates, best first (none when the gate rejects the query), with the
    fusion's and the gate's figures in their summary."""
    opts = asked.settings
    similarity, bm25 = recalled.similarity, recalled.bm25
    weights = {"vector": 1.0, "bm25": 1.0}
    signal = None
    if opts.mode == "vector":
        fused = dict(similarity)
    elif opts.mode == "bm25":
        fused = dict(bm25)
    else:
        route_sim, route_kw = (
            (completed.similarity, completed.keyword) if completed else (similarity, bm25)
        )
        fused, weights, signal = fusion.hybrid(
            opts,
            route_sim,
            route_kw,
            None if completed else recalled.route_orders(),
            recalled.coverage,
            recalled.dfs,
            recalled.total,
        )
    order = sorted(fused, key=lambda c: (-fused[c], c))[: asked.pool]

    # Gate: MemX R1 on the raw route signals, before anything reorders them.
    best_sim = gate.best_of(list(similarity.values()))
    keyword_evidence = bool(recalled.kw_hits) and recalled.coverage >= opts.gate_coverage
    tau = opts.tau or calibration.tau
    calib = dataclasses.replace(calibration, tau=tau)
    use_vector = asked.uses_vector
    rejected = opts.gate and use_vector and gate.should_reject(keyword_evidence, best_sim, tau)
    tier: Tier = (
        gate.tier(keyword_evidence, best_sim, calib)
        if use_vector
        else ("medium" if keyword_evidence else "low")
    )
    summary = {
        "mode": opts.mode,
        "fusion": opts.fusion if opts.mode == "hybrid" else None,
        "weighting": opts.weighting if opts.mode == "hybrid" else None,
        "terms": asked.terms,
        "keyword_signal": None if signal is None else round(signal, 4),
        "weights": {k: round(v, 4) for k, v in weights.items()},
        "keyword_hits": len(recalled.kw_hits),
        "keyword_coverage": round(recalled.coverage, 4),
        "best_similarity": None if best_sim is None else round(best_sim, 4),
        "tau": tau,
    }
    return Candidates(
        store,
        [] if rejected else order,
        dict(fused),
        fused,
        rejected,
        tier,
        summary=summary,
        timings=recalled.timings,
    )


def explain_hits(
    recalled: Recalled, completed: completion.Completed | None, found: Candidates
) -> dict[int, dict[str, Any]]:
    """Each hit's `explain`, best first: its routes, fused score and position (from
    recall and fusion), then each stage's entry."""
    vec_rank = {cid: r for r, (cid, _) in enumerate(recalled.vec_hits, start=1)}
    kw_rank = {cid: r for r, (cid, _) in enumerate(recalled.kw_hits, start=1)}
    out = {}
    for position, cid in enumerate(found.order, start=1):
        routes: dict[str, Any] = {}
        if cid in vec_rank:
            similarity = round(recalled.similarity[cid], 4)
            routes["vector"] = {"rank": vec_rank[cid], "similarity": similarity}
        if cid in kw_rank:
            routes["bm25"] = {"rank": kw_rank[cid], "score": round(recalled.bm25[cid], 4)}
        if completed is not None:
            completion.explain(routes, cid, completed)
        out[cid] = {
            "routes": routes,
            "fused": round(found.fused[cid], 6),
            "position": position,
            **found.explain_of(cid),
        }
    return out
