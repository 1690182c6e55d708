"""Diversity: maximal marginal relevance over embeddings, and exact-content dedup."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt


def dedup(ids: Sequence[int], texts: Mapping[int, str]) -> list[int]:
    """Drop later items whose whitespace-normalised text equals an earlier one's."""
    seen: set[str] = set()
    kept: list[int] = []
    for item in ids:
        key = " ".join(texts[item].split()).casefold()
        if key not in seen:
            seen.add(key)
            kept.append(item)
    return kept


def mmr(ids: Sequence[int], scores: Mapping[int, float],
        vectors: Mapping[int, npt.NDArray[np.float32]], lam: float, limit: int) -> list[int]:
    """Select up to `limit` ids by MMR: `lam * rel - (1 - lam) * max_sim_to_selected`.

    Relevance is the min-max normalised score, so `lam` trades like with like. Items without
    a vector are never penalised for redundancy.
    """
    pool = list(ids)
    if not pool:
        return []
    values = [scores[i] for i in pool]
    low, high = min(values), max(values)
    span = high - low or 1.0
    rel = {i: (scores[i] - low) / span for i in pool}
    selected: list[int] = []
    while pool and len(selected) < limit:
        best, best_value = pool[0], -np.inf
        for item in pool:
            redundancy = 0.0
            vec = vectors.get(item)
            if vec is not None and selected:
                sims = [float(vec @ vectors[s]) for s in selected if s in vectors]
                redundancy = max(sims, default=0.0)
            value = lam * rel[item] - (1.0 - lam) * redundancy
            if value > best_value:
                best, best_value = item, value
        selected.append(best)
        pool.remove(best)
    return selected
