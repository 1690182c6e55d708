"""MemX's four-factor re-rank: semantic, recency, frequency and importance, z-scored and squashed.

    score(m) = a_s·f_sem + a_r·f_rec + a_f·f_freq + a_i·f_imp             (MemX eq. 1)
    f_rec    = 2^(-d/h), d = days since the last retrieval (else creation)  (eq. 2)
    f_freq   = min(1, ln(c + 1) / 10), c = retrievals (else accesses)       (eq. 3)
    final    = sigmoid((score - mean) / std) over the candidates            (eq. 4)

One deliberate difference: MemX feeds the raw RRF score in as f_sem, but fused scores here are
on another scale than the [0, 1] factors (RRF's are ~0.03), which would let recency swamp
relevance. f_sem is therefore the fused score z-scored and squashed over the candidates first,
so the published weights compare like with like.

Every factor but the semantic one is off unless its weight is set: vstash found such factors
lower NDCG on static benchmarks, so they earn their place only through this repo's benchmarks
(`python -m bench ablation`).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from recalld.retrieval.fusion import sigmoid
from recalld.retrieval.pipeline import Candidates, Query, Stage
from recalld.types import Chunk

DAY = 86400.0


@dataclass(frozen=True, slots=True)
class Factors:
    """The inputs of one candidate's re-rank."""

    semantic: float
    age_days: float
    uses: int
    importance: float


@dataclass(frozen=True, slots=True)
class Weights:
    """The weight of each factor; 0 (or a half-life of 0 for recency) leaves a factor out."""

    semantic: float = 0.45
    recency: float = 0.0
    half_life_days: float = 30.0
    frequency: float = 0.0
    importance: float = 0.0

    def any_factor(self) -> bool:
        """True when at least one factor besides the semantic one is on."""
        return bool((self.recency and self.half_life_days > 0) or self.frequency or self.importance)


def factors_of(chunk: Chunk, semantic: float, now: float) -> Factors:
    """A stored chunk's factors (MemX: retrievals, not admin reads, drive recency/frequency)."""
    stamp = chunk.last_retrieved_at or chunk.created_at
    uses = chunk.retrieval_count or chunk.access_count
    return Factors(semantic, (now - stamp) / DAY, uses, chunk.importance)


def recency(age_days: float, half_life_days: float) -> float:
    """Exponential decay: 1 now, 0.5 after one half-life (MemX eq. 2)."""
    return float(0.5 ** (max(age_days, 0.0) / half_life_days))


def frequency(uses: int) -> float:
    """Log-normalised use count, capped at 1 (MemX eq. 3: saturates at e^10 - 1 uses)."""
    return min(1.0, math.log1p(max(uses, 0)) / 10.0)


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
    candidates: Sequence[Factors], weights: Weights
) -> list[tuple[float, dict[str, float]]]:
    """Final scores (eq. 4 over the composite of eq. 1) with each factor's weighted part.

    Factors with weight 0 are left out of the explanation.
    """
    semantic = zscore_sigmoid([c.semantic for c in candidates])
    composite: list[float] = []
    parts_of: list[dict[str, float]] = []
    for cand, sem in zip(candidates, semantic, strict=True):
        parts = {"semantic": weights.semantic * sem}
        if weights.recency and weights.half_life_days > 0:
            parts["recency"] = weights.recency * recency(cand.age_days, weights.half_life_days)
        if weights.frequency:
            parts["frequency"] = weights.frequency * frequency(cand.uses)
        if weights.importance:
            parts["importance"] = weights.importance * cand.importance
        composite.append(sum(parts.values()))
        parts_of.append(parts)
    final = zscore_sigmoid(composite)
    return list(zip(final, parts_of, strict=True))


def weights_of(query: Query) -> Weights:
    """The factor weights a query's settings ask for."""
    opts = query.settings
    return Weights(
        opts.semantic_weight,
        opts.recency_weight,
        opts.recency_half_life_days,
        opts.frequency_weight,
        opts.importance_weight,
    )


class Rerank(Stage):
    """The four-factor re-rank, on when any factor besides the semantic one has a weight."""

    name = "factors"

    def enabled(self, query: Query) -> bool:
        return weights_of(query).any_factor()

    async def run(self, query: Query, found: Candidates) -> None:
        if not found.order:
            return
        order, chunks, now = found.order, found.chunks, time.time()
        scored = rerank_scores(
            [factors_of(chunks[c], found.scores[c], now) for c in order], weights_of(query)
        )
        found.scores = {c: s for c, (s, _) in zip(order, scored, strict=True)}
        notes = found.notes(self.name)
        for cid, (_, parts) in zip(order, scored, strict=True):
            notes[cid] = {k: round(v, 4) for k, v in parts.items()}
        found.order = sorted(order, key=lambda c: -found.scores[c])
