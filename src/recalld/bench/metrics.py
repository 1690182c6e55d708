"""Ranking metrics, as BEIR and the LoCoMo evidence-recall protocol define them."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence


def ndcg_at(ranked: Sequence[str], relevance: Mapping[str, int], k: int) -> float:
    """NDCG@k with graded relevance and the log2(rank + 1) discount (BEIR's trec_eval)."""
    dcg = sum(
        relevance.get(doc, 0) / math.log2(rank + 1) for rank, doc in enumerate(ranked[:k], start=1)
    )
    ideal = sorted((r for r in relevance.values() if r > 0), reverse=True)[:k]
    idcg = sum(r / math.log2(rank + 1) for rank, r in enumerate(ideal, start=1))
    return dcg / idcg if idcg else 0.0


def recall_at(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    """The share of relevant items found in the top k."""
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranked[:k])) / len(relevant)


def hit_at(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    """1 if any relevant item is in the top k."""
    return 1.0 if relevant.intersection(ranked[:k]) else 0.0


def mrr_at(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    """Reciprocal rank of the first relevant item in the top k, else 0."""
    for rank, doc in enumerate(ranked[:k], start=1):
        if doc in relevant:
            return 1.0 / rank
    return 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def mean(values: Sequence[float]) -> float:
    """The arithmetic mean; 0 for no values."""
    return statistics.fmean(values) if values else 0.0
