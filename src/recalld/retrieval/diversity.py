"""Diversity: maximal marginal relevance over embeddings, and exact-content dedup (two stages)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from recalld.retrieval.pipeline import Candidates, Query, Stage


def dedup(ids: Sequence[int], texts: Mapping[int, str], keep: int | None = None) -> list[int]:
    """Drop later items whose whitespace-normalised text equals an earlier one's; with
    `keep`, stop once that many are kept (the rest are not looked at)."""
    seen: set[str] = set()
    kept: list[int] = []
    for item in ids:
        if keep is not None and len(kept) >= keep:
            break
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


class Dedup(Stage):
    """`search.dedup`: a candidate whose text an earlier one already has leaves."""

    name = "dedup"

    def enabled(self, query: Query) -> bool:
        return query.settings.dedup

    def reads_every_chunk(self, query: Query) -> bool:
        return query.settings.mmr  # else the texts up to the `limit` it keeps

    async def run(self, query: Query, found: Candidates) -> None:
        if query.settings.mmr:
            found.order = dedup(found.order, {c: found.chunks[c].text for c in found.order})
            return
        # Without MMR the next stage is `limit`, which keeps the first `limit`: the other
        # candidates' texts (~0.3 ms to normalise 50 at 100k chunks) would be thrown away, so
        # they are read only as far as it takes to keep `limit`.
        keep, seen = query.limit, query.limit
        while True:
            await found.load(seen)
            head = found.order[:seen]
            kept = dedup(head, {c: found.chunks[c].text for c in head}, keep)
            if len(kept) >= keep or seen >= len(found.order):
                break
            seen += keep - len(kept)  # as many more as were dropped
        found.order = kept


class MMR(Stage):
    """`search.mmr`: the `limit` hits are chosen by maximal marginal relevance."""

    name = "mmr"

    def enabled(self, query: Query) -> bool:
        return query.settings.mmr

    def reads_every_chunk(self, query: Query) -> bool:
        return False  # their vectors

    async def run(self, query: Query, found: Candidates) -> None:
        if len(found.order) > query.limit:
            vectors = await found.vectors(found.order)
            found.order = mmr(
                found.order, found.scores, vectors, query.settings.mmr_lambda, query.limit
            )
