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


def mmr(
    ids: Sequence[int],
    scores: Mapping[int, float],
    vectors: Mapping[int, npt.NDArray[np.float32]],
    lam: float,
    limit: int,
) -> list[int]:
    """Select up to `limit` ids by MMR: `lam * rel - (1 - lam) * max_sim_to_selected`.

    Relevance is the min-max normalised score, so `lam` trades like with like. Items without
    a vector are never penalised for redundancy and penalise nothing. Ties go to the earlier id.
    """
    pool = list(ids)
    if not pool:
        return []
    values = np.array([scores[i] for i in pool], dtype=np.float64)
    span = float(values.max() - values.min()) or 1.0
    rel = (values - values.min()) / span
    dim = next((len(v) for v in vectors.values()), 1)
    has_vec = np.array([i in vectors for i in pool])
    matrix = np.stack([vectors[i] if i in vectors else np.zeros(dim, np.float32) for i in pool])
    max_sim = np.zeros(len(pool))
    taken = np.zeros(len(pool), dtype=bool)
    selected: list[int] = []
    for _ in range(min(limit, len(pool))):
        value = lam * rel - (1.0 - lam) * max_sim
        value[taken] = -np.inf
        best = int(np.argmax(value))
        taken[best] = True
        selected.append(pool[best])
        if has_vec[best]:
            max_sim = np.maximum(max_sim, np.where(has_vec, matrix @ matrix[best], 0.0))
    return selected
