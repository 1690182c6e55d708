"""MemX's four-factor re-rank: semantic, recency, frequency and importance, z-scored and squashed.

Every factor but the semantic one is off unless its weight is set: vstash found such factors
lower NDCG on static benchmarks, so they earn their place only through this repo's benchmarks.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from recalld.retrieval.fusion import sigmoid


@dataclass(frozen=True, slots=True)
class Factors:
    """The inputs of one candidate's re-rank."""

    semantic: float
    age_days: float
    uses: int
    importance: float


def recency(age_days: float, half_life_days: float) -> float:
    """Exponential decay: 1 now, 0.5 after one half-life (MemX eq. 2)."""
    return float(0.5 ** (max(age_days, 0.0) / half_life_days))


def frequency(uses: int, cap: int = 100) -> float:
    """Log-normalised use count, capped at 1 (MemX eq. 3)."""
    return min(1.0, math.log1p(max(uses, 0)) / math.log1p(cap))


def zscore_sigmoid(scores: Sequence[float]) -> list[float]:
    """Z-score then sigmoid (MemX eq. 4); unchanged when all scores are (nearly) equal."""
    if len(scores) < 2:
        return list(scores)
    mean = statistics.fmean(scores)
    spread = statistics.pstdev(scores)
    if spread < 1e-6:
        return list(scores)
    return [sigmoid((s - mean) / spread) for s in scores]


def rerank_scores(
    candidates: Sequence[Factors],
    *,
    half_life_days: float,
    recency_weight: float,
    frequency_weight: float,
    importance_weight: float,
    semantic_weight: float = 0.45,
) -> list[tuple[float, dict[str, float]]]:
    """Composite scores with each factor's contribution, for `explain`.

    The semantic input is first z-scored and squashed over the candidate set, so the weights
    compare like with like; factors with weight 0 are left out of the explanation.
    """
    semantic = zscore_sigmoid([c.semantic for c in candidates])
    out: list[tuple[float, dict[str, float]]] = []
    for cand, sem in zip(candidates, semantic, strict=True):
        parts = {"semantic": semantic_weight * sem}
        if recency_weight and half_life_days > 0:
            parts["recency"] = recency_weight * recency(cand.age_days, half_life_days)
        if frequency_weight:
            parts["frequency"] = frequency_weight * frequency(cand.uses)
        if importance_weight:
            parts["importance"] = importance_weight * cand.importance
        out.append((sum(parts.values()), parts))
    return out
