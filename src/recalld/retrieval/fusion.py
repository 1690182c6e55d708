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


def route_agreement(
    similarity: Mapping[int, float], keyword: Mapping[int, float], depth: int
) -> float:
    """The keyword route's share of the two routes' endorsement of each other, in [0, 1].

    Each route's best `depth` candidates are looked up in the other route's ranking: a
    candidate the other route ranks r-th endorses its route by `depth / (depth + r - 1)`
    (1 at the top, a half at rank depth + 1), nothing when the other route did not score it.
    The route whose best candidates the other one also ranks high is the one to trust: a
    keyword route whose first hits are topic neighbours of the query, or a vector route whose
    first hits share none of its words, is endorsed little. Even endorsement (or none) is 0.5.
    """
    vector_rank = {c: r for r, c in enumerate(ranked(similarity), start=1)}
    keyword_rank = {
        c: r for r, c in enumerate((c for c in ranked(keyword) if keyword[c] > 0), start=1)
    }

    def endorsement(best: list[int], other: Mapping[int, int]) -> float:
        if not best:
            return 0.0
        return sum(depth / (depth + other[c] - 1) for c in best if c in other) / len(best)

    of_keyword = endorsement(list(keyword_rank)[:depth], vector_rank)
    of_vector = endorsement(list(vector_rank)[:depth], keyword_rank)
    if of_keyword + of_vector <= 0:
        return 0.5
    return of_keyword / (of_keyword + of_vector)


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


AGREEMENT_WEIGHTINGS = ("agreement", "coverage-agreement")
"""Weightings whose signal is the keyword weight itself (no sigmoid curve after it)."""


def _curve(opts: SearchSettings, signal: float) -> float:
    """The keyword weight the sigmoid curve gives a signal."""
    return adaptive_weights(signal, opts.adaptive_midpoint, opts.adaptive_slope)[1]


def keyword_signal(
    opts: SearchSettings,
    similarity: Mapping[int, float],
    keyword: Mapping[int, float],
    coverage: float,
    doc_freqs: Sequence[int],
    total: int,
) -> float:
    """The per-query signal of an adaptive weighting (`opts.weighting`, not "fixed")."""
    if opts.weighting == "coverage":
        return coverage
    if opts.weighting == "idf":
        return relative_idf(doc_freqs, total)
    agreement = route_agreement(similarity, keyword, opts.agreement_depth)
    if opts.weighting == "agreement":
        return agreement
    # "coverage-agreement": two estimates of how far to trust the keyword route, averaged.
    return (agreement + _curve(opts, coverage)) / 2


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
            `adaptive_midpoint`, `adaptive_slope`, `agreement_depth`,
            `keyword_weight_floor`).
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
        signal = keyword_signal(opts, similarity, keyword, coverage, doc_freqs, total)
        w_kw = signal if opts.weighting in AGREEMENT_WEIGHTINGS else _curve(opts, signal)
        w_kw = max(opts.keyword_weight_floor, w_kw)
        weights = {"vector": 1.0 - w_kw, "bm25": w_kw}
    if opts.fusion == "score":
        return (
            score_fusion(similarity, keyword, weights["vector"], weights["bm25"]),
            weights,
            signal,
        )
    vector_order, keyword_order = orders or (ranked(similarity), ranked(keyword))
    fused = rrf({"vector": vector_order, "bm25": keyword_order}, weights, opts.rrf_k)
    return fused, weights, signal
