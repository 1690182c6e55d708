"""Links found at ingest, before a document's write: near-duplicates and knowledge updates.

For each new fact or memory (`links.granularities`) of a document:

- its `links.similar_k` nearest stored chunks of the same granularity (one KNN each, on a
  reader, so the writer is not held), plus the document's other new chunks (one matrix
  product): those at or above `links.similar_threshold` get a `similar` link;
- those at or above `links.supersede_similarity` are knowledge-update candidates: when the
  detector (the rule in `supersede.py`, or the LLM) says the newer one states a new value
  for the same subject and attribute, it gets a `supersedes` link, which marks the older one
  `superseded` in the same transaction (`Writer.refresh_link_status`).

Parent and temporal links need no search; the writer makes them from the chunks themselves.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from recalld.config import LinkSettings
from recalld.errors import IngestError
from recalld.ingest import supersede
from recalld.ingest.supersede_llm import LLMSupersessionDetector
from recalld.storage.contract import Reader, Store
from recalld.storage.records import AutoLink
from recalld.storage.sqlite.connection import OperationalError
from recalld.types import ChunkDraft, Filters

logger = logging.getLogger(__name__)

_BLOCK = 1024
_WIDEN = 4  # unfiltered KNN looks this many times further
# Below this many stored chunks of a granularity, new chunks are compared with all of them in
# one matrix product (a 384-d float copy each: 30 MB at the limit, read once per document);
# above it, one KNN per new chunk (the store's vector cascade, issue 7).
EXACT_BELOW = 20_000
LLM_CANDIDATES = 2  # per new chunk, when the LLM judges


@dataclass(frozen=True, slots=True)
class _Candidate:
    """A stored or new chunk that a new chunk may link to."""

    target: int | str  # chunk id (stored) or draft key (new, same document)
    text: str
    event_time: float | None
    similarity: float


def _top_k(
    query: npt.NDArray[np.float32],
    ids: npt.NDArray[np.int64],
    matrix: npt.NDArray[np.float32],
    k: int,
) -> list[list[tuple[int, float]]]:
    """Each query row's `k` nearest stored vectors as `(chunk id, cosine distance)`."""
    if not len(ids):
        return [[] for _ in range(len(query))]
    sims = _unit(query) @ _unit(matrix).T
    k = min(k, len(ids))
    best = np.argpartition(-sims, k - 1, axis=1)[:, :k]
    out = []
    for row, cols in zip(sims, best, strict=True):
        order = cols[np.argsort(-row[cols])]
        out.append([(int(ids[c]), float(1.0 - row[c])) for c in order])
    return out


def _newer(new_time: float | None, old_time: float | None) -> bool:
    # Without times, the chunk written later is the newer one.
    return new_time is None or old_time is None or new_time >= old_time


def _unit(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit: npt.NDArray[np.float32] = vectors / np.maximum(norms, 1e-12)
    return unit


class AutoLinker:
    """Finds the `similar` and `supersedes` links of a document's new chunks.

    Args:
        store: The store the chunks go into.
        settings: Thresholds and which granularities to compare.
        detector: The LLM detector; None: the rule.
    """

    def __init__(
        self,
        store: Store,
        settings: LinkSettings,
        detector: LLMSupersessionDetector | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.detector = detector
        self.counts = {"similar": 0, "supersedes": 0}
        self._unfiltered = False

    def searches(
        self,
        drafts: Sequence[ChunkDraft],
        vectors: Sequence[npt.NDArray[np.float32] | None],
    ) -> bool:
        """Whether `links_for` these drafts reads the store (so it must see every document
        written before them committed), or finds no candidates without looking."""
        return self.settings.auto and bool(self._picked(drafts, vectors))

    def _picked(
        self,
        drafts: Sequence[ChunkDraft],
        vectors: Sequence[npt.NDArray[np.float32] | None],
    ) -> list[int]:
        # The new chunks of the granularities that are compared.
        wanted = set(self.settings.granularities)
        return [
            i for i, d in enumerate(drafts) if vectors[i] is not None and d.granularity in wanted
        ]

    async def links_for(
        self,
        drafts: Sequence[ChunkDraft],
        vectors: Sequence[npt.NDArray[np.float32] | None],
        document_id: int | None,
    ) -> list[tuple[AutoLink, ...]]:
        """The auto links of each draft (empty for chunks kept as stored)."""
        out: list[list[AutoLink]] = [[] for _ in drafts]
        picked = self._picked(drafts, vectors)
        if not self.settings.auto or not picked:
            return [tuple(links) for links in out]
        candidates = await self._stored(drafts, vectors, picked, document_id)
        if candidates is None:
            # A reindex switched models after these vectors were made: the ingest's write
            # notices and embeds (and links) again with the new model.
            return [tuple(links) for links in out]
        within = await asyncio.to_thread(self._within, drafts, vectors, picked)
        for i, found in within.items():
            candidates[i] += found
        floor = self.settings.supersede_similarity
        pairs: list[tuple[int, _Candidate]] = []
        for i, found in candidates.items():
            for cand in found:
                if cand.similarity >= self.settings.similar_threshold:
                    out[i].append(("similar", cand.target, round(cand.similarity, 4)))
                is_fact = drafts[i].granularity in ("fact", "memory")
                if (
                    is_fact
                    and self.settings.supersede != "off"
                    and cand.similarity >= floor
                    and _newer(drafts[i].event_time, cand.event_time)
                ):
                    pairs.append((i, cand))
        if self.detector is not None:
            # Each pair is paid for: the model sees only each chunk's closest candidates.
            pairs.sort(key=lambda p: (p[0], -p[1].similarity))
            ranks: dict[int, int] = {}
            kept = []
            for i, cand in pairs:
                ranks[i] = ranks.get(i, 0) + 1
                if ranks[i] <= LLM_CANDIDATES:
                    kept.append((i, cand))
            pairs = kept
        for (i, cand), verdict in zip(pairs, await self._judge(drafts, pairs), strict=True):
            if verdict:
                out[i].append(("supersedes", cand.target, 1.0))
        for links in out:
            for relation, _, _ in links:
                self.counts[relation] += 1
        return [tuple(links) for links in out]

    async def _stored(
        self,
        drafts: Sequence[ChunkDraft],
        vectors: Sequence[npt.NDArray[np.float32] | None],
        picked: list[int],
        document_id: int | None,
    ) -> dict[int, list[_Candidate]] | None:
        """Each picked draft's nearest stored chunks of its granularity (other documents);
        None when the store's vectors are no longer of the new vectors' model."""
        k = self.settings.similar_k
        dimension = len(np.asarray(vectors[picked[0]]))
        found: dict[int, list[tuple[int, float]]] = {}
        async with self.store.reading() as conn:
            if self.store.dimension != dimension:
                return None
            if await conn.chunk_total() == 0:
                return {i: [] for i in picked}
            for gran in sorted({drafts[i].granularity for i in picked}):
                rows = [i for i in picked if drafts[i].granularity == gran]
                stored = await conn.granularity_vectors(gran, document_id, EXACT_BELOW)
                if stored is not None and len(stored[0]) and stored[1].shape[-1] != dimension:
                    return None
                if stored is not None:
                    # Few enough to compare all at once: one matrix product, no KNN per chunk.
                    query = np.stack([np.asarray(vectors[i], dtype=np.float32) for i in rows])
                    top = await asyncio.to_thread(_top_k, query, *stored, k)
                    found.update(zip(rows, top, strict=True))
                    continue
                for i in rows:
                    vector = vectors[i]
                    assert vector is not None
                    found[i] = await self._knn(conn, vector, gran, k)
            ids = sorted({cid for hits in found.values() for cid, _ in hits})
            chunks = await conn.chunks_by_id(ids)
        out: dict[int, list[_Candidate]] = {}
        for i, hits in found.items():
            out[i] = [
                _Candidate(cid, chunks[cid].text, chunks[cid].event_time, 1.0 - dist)
                for cid, dist in hits
                # The document's own stored chunks are being replaced: its new drafts stand in.
                if cid in chunks
                and chunks[cid].document_id != document_id
                and chunks[cid].granularity == drafts[i].granularity
            ][:k]
        return out

    async def _knn(
        self, conn: Reader, vector: npt.NDArray[np.float32], granularity: str, k: int
    ) -> list[tuple[int, float]]:
        if not self._unfiltered:
            try:
                return await conn.knn(vector, k, Filters(granularities=(granularity,)))
            except OperationalError as exc:
                # Seen once on a 7k-chunk store under bench ingest: sqlite-vec 0.1 failed to
                # open a metadata chunk ("Could not open metadata blob"). Links are a bonus:
                # search unfiltered (wider, then filtered here) rather than fail the ingest.
                logger.warning("filtered KNN failed (%s); auto links search unfiltered", exc)
                self._unfiltered = True
        return await conn.knn(vector, k * _WIDEN, Filters())

    def _within(
        self,
        drafts: Sequence[ChunkDraft],
        vectors: Sequence[npt.NDArray[np.float32] | None],
        picked: list[int],
    ) -> dict[int, list[_Candidate]]:
        """Each picked draft's similar earlier drafts of the same document and granularity."""
        floor = min(self.settings.similar_threshold, self.settings.supersede_similarity)
        matrix = _unit(np.stack([np.asarray(vectors[i], dtype=np.float32) for i in picked]))
        grans = np.array([drafts[i].granularity for i in picked])
        out: dict[int, list[_Candidate]] = {}
        # Row blocks keep memory bounded on a log with thousands of facts.
        for start in range(0, len(picked), _BLOCK):
            end = min(start + _BLOCK, len(picked))
            sims = matrix[start:end] @ matrix[:end].T
            rows = np.arange(start, end)[:, None]
            cols = np.arange(end)[None, :]
            # Only earlier drafts, of the same granularity, above the floor.
            mask = (sims >= floor) & (cols < rows) & (grans[start:end, None] == grans[None, :end])
            for r, col in zip(*np.nonzero(mask), strict=True):
                row = start + int(r)
                new, old = drafts[picked[row]], drafts[picked[int(col)]]
                if new.key == old.key:
                    continue
                cand = _Candidate(old.key, old.text, old.event_time, float(sims[r, col]))
                out.setdefault(picked[row], []).append(cand)
        for found in out.values():
            found.sort(key=lambda c: -c.similarity)
            del found[self.settings.similar_k :]
        return out

    async def _judge(
        self, drafts: Sequence[ChunkDraft], pairs: list[tuple[int, _Candidate]]
    ) -> list[bool]:
        texts = [(drafts[i].text, cand.text) for i, cand in pairs]
        if not texts:
            return []
        if self.detector is not None:
            try:
                return await self.detector.judge(texts)
            except IngestError as exc:
                logger.warning("%s; using the rule for knowledge updates instead", exc.message)
        return await asyncio.to_thread(lambda: [supersede.supersedes(n, o) for n, o in texts])
