"""Fusion of the vector and keyword rankings: weighted RRF, per-query IDF weights, score fusion.

Pure functions on plain lists and dicts, so they are tested against hand-computed values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from recalld.config import SearchSettings


def rrf(
    rankings: Mapping[str, Sequence[int]], weights: Mapping[str, float], k: int = 60
) -> dict[int, float]:
    """Weighted reciprocal rank fusion: `sum_r w_r / (k + rank_r)`, ranks from 1.

    Args:
        rankings: Route name to ids, best first.
        weights: Route name to weight (missing routes weigh 1).
        k: The RRF constant (60 in MemX and vstash).
    """
    fused: dict[int, float] = {}
    for route, ids in rankings.items():
        weight = weights.get(route, 1.0)
        for rank, item in enumerate(ids, start=1):
            fused[item] = fused.get(item, 0.0) + weight / (k + rank)
    return fused


def ranked(scores: Mapping[int, float]) -> list[int]:
    """Ids by score, best first (ties by id, so the order is repeatable)."""
    return sorted(scores, key=lambda c: (-scores[c], c))


def bm25_idf(doc_freq: int, total: int) -> float:
    """BM25's (always positive) inverse document frequency."""
    return math.log(1.0 + (total - doc_freq + 0.5) / (doc_freq + 0.5))


def relative_idf(doc_freqs: Sequence[int], total: int) -> float:
    """The mean IDF of the query's terms as a share of the largest possible IDF, in [0, 1].

    Terms that match nothing are left out: they carry no keyword evidence either way. Dividing
    by the IDF of a term found once makes the value comparable across store sizes.
    """
    found = [df for df in doc_freqs if df > 0]
    if not found or total <= 0:
        return 0.0
    ceiling = bm25_idf(1, total)
    return sum(bm25_idf(df, total) for df in found) / len(found) / ceiling


def idf_coverage(doc_freqs: Sequence[int], matched: Sequence[bool], total: int) -> float:
    """The IDF-weighted share of the query's terms that one chunk contains, in [0, 1].

    This is how much of the query's information the best keyword hit explains: a paraphrase
    that shares one common word with a passage scores low, an exact identifier scores 1.
    Terms found nowhere count at the highest IDF, as the most specific words of the query.
    """
    weights = [bm25_idf(max(df, 1), total) for df in doc_freqs]
    whole = sum(weights)
    if whole <= 0:
        return 0.0
    return sum(w for w, hit in zip(weights, matched, strict=True) if hit) / whole


def sigmoid(x: float) -> float:
    """The logistic function, safe for large |x|."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


def adaptive_weights(rel_idf: float, midpoint: float, slope: float) -> tuple[float, float]:
    """Per-query `(vector_weight, keyword_weight)` from the query's relative IDF (vstash §4).

    Rare, technical terms (high IDF) move weight to keywords; common vocabulary moves it to the
    vector route. The weights sum to 1.
    """
    keyword = sigmoid(slope * (rel_idf - midpoint))
    return 1.0 - keyword, keyword


def min_max(scores: Mapping[int, float]) -> dict[int, float]:
    """Scale scores to [0, 1]; a single or constant set maps to 1."""
    if not scores:
        return {}
    low, high = min(scores.values()), max(scores.values())
    if high - low < 1e-12:
        return dict.fromkeys(scores, 1.0)
    return {k: (v - low) / (high - low) for k, v in scores.items()}


def score_fusion(
    vector: Mapping[int, float],
    keyword: Mapping[int, float],
    vector_weight: float,
    keyword_weight: float,
) -> dict[int, float]:
    """Convex combination of min-max normalised scores; a route that missed an item gives 0."""
    v, f = min_max(vector), min_max(keyword)
    return {
        item: vector_weight * v.get(item, 0.0) + keyword_weight * f.get(item, 0.0)
        for item in v.keys() | f.keys()
    }


def hybrid(
    opts: SearchSettings,
    similarity: Mapping[int, float],
    keyword: Mapping[int, float],
    orders: tuple[Sequence[int], Sequence[int]] | None,
    coverage: float,
    doc_freqs: Sequence[int],
    total: int,
) -> tuple[dict[int, float], dict[str, float], float | None]:
    """Fuse the two routes as `opts` says (fusion, weighting and its curve).

    Args:
        opts: The search settings (`fusion`, `weighting`, `vector_weight`, `rrf_k`,
            `adaptive_midpoint`, `adaptive_slope`).
        similarity: Vector candidates' cosine similarities.
        keyword: Keyword candidates' scores.
        orders: Each route's ids best first (vector, keyword) for RRF; None ranks the given
            scores instead (completed scores, where both routes scored every candidate).
        coverage: The best keyword hit's IDF-weighted share of the query (`idf_coverage`).
        doc_freqs: The query terms' document frequencies, for the `idf` weighting.
        total: The number of chunks.

    Returns:
        The fused scores, the route weights and the keyword signal the weights came from
        (None for fixed weights).
    """
    signal = None
    if opts.weighting == "fixed":
        weights = {"vector": opts.vector_weight, "bm25": 1.0 - opts.vector_weight}
    else:
        signal = coverage if opts.weighting == "coverage" else relative_idf(doc_freqs, total)
        w_vec, w_kw = adaptive_weights(signal, opts.adaptive_midpoint, opts.adaptive_slope)
        weights = {"vector": w_vec, "bm25": w_kw}
    if opts.fusion == "score":
        return (
            score_fusion(similarity, keyword, weights["vector"], weights["bm25"]),
            weights,
            signal,
        )
    vector_order, keyword_order = orders or (ranked(similarity), ranked(keyword))
    fused = rrf({"vector": vector_order, "bm25": keyword_order}, weights, opts.rrf_k)
    return fused, weights, signal
