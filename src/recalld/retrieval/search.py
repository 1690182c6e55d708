"""The query path: recall → fusion → gate → the ranking stages → expansion and packing.

    query ─▶ embed (cached) ─▶ vector KNN ─┐
          └▶ escaped terms ─▶ FTS5 BM25 ───┴▶ fusion ─▶ gate ─▶ STAGES ─▶ expand ─▶ pack

Recall, fusion and the gate are `retrieval.recall`, expansion `retrieval.expansion`; the
Searcher holds the settings and the caches (query vectors, document frequencies), builds the
`Query` and runs the path.

The ranking stages and their order are `retrieval.stages.STAGES`, written there only; a new
stage is one `pipeline.Stage` subclass and one line in that list. Each stage can be switched
off per call, and every result says which routes found it, at which ranks, and each stage's
entry for it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import OrderedDict
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from recalld.config import SearchSettings
from recalld.embeddings.base import Embedder
from recalld.errors import QueryError
from recalld.retrieval import (
    answerability_tune,
    expansion,
    fact_source,
    gate,
    packing,
    recall,
    selftune,
    temporal,
)
from recalld.retrieval.pipeline import Candidates, Query, load_for, run_stages
from recalld.retrieval.stages import STAGES
from recalld.retrieval.timeparse import TimeIntent, parse
from recalld.storage.contract import Store
from recalld.storage.fts import query_terms, quote_term
from recalld.types import NO_FILTERS, Filters, Hit, SearchResult

logger = logging.getLogger(__name__)

MODES = ("hybrid", "vector", "bm25")
TIME_MODES = ("boost", "filter")
FUSIONS = ("score", "rrf")
WEIGHTINGS = ("coverage", "idf", "fixed", "agreement", "coverage-agreement")


class Searcher:
    """Runs searches against one store with one embedder.

    Args:
        store: The open store.
        embedder: The model the store was embedded with.
        settings: Defaults for every stage; each call may override them.
        calibration: Gate thresholds for the model (see `gate.calibrate`).
    """

    def __init__(
        self,
        store: Store,
        embedder: Embedder,
        settings: SearchSettings,
        calibration: gate.Calibration,
        query_cache: int = 1024,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.settings = settings
        self.calibration = calibration
        self._query_cache: OrderedDict[str, npt.NDArray[np.float32]] = OrderedDict()
        self._query_cache_size = query_cache
        self._df_cache: dict[str, int] = {}
        self._df_generation = -1
        self._total = 0
        self._embedding_down = False
        self.tuning: selftune.StoreTuning | None = None  # the store's own fusion choice

    def use_model(self, embedder: Embedder, calibration: gate.Calibration) -> None:
        """Search with another model from now on (after a reindex swapped the store's)."""
        self.embedder, self.calibration = embedder, calibration
        self._query_cache.clear()  # its vectors belong to the old model

    def _note_embedding(self, asked: Query, recalled: recall.Recalled) -> None:
        """Log an embedding outage (recall then searched by keywords only, issue 6)."""
        if not recalled.degraded:
            if asked.uses_vector:
                self._embedding_down = False
            return
        # Once per outage at WARNING; every search in it would otherwise log the same line.
        level = logging.DEBUG if self._embedding_down else logging.WARNING
        message = recalled.degraded[0]
        logger.log(level, "cannot embed the query (%s); searching by keywords only", message)
        self._embedding_down = True

    async def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        """The query's vector, from a bounded LRU cache or the model (in a worker thread)."""
        cached = self._query_cache.get(text)
        if cached is not None:
            self._query_cache.move_to_end(text)
            return cached
        embedder = self.embedder
        vector: npt.NDArray[np.float32] = (await asyncio.to_thread(embedder.embed, [text]))[0]
        if embedder is not self.embedder:
            return vector  # a reindex switched models meanwhile: the cache holds the new one's
        self._query_cache[text] = vector
        if len(self._query_cache) > self._query_cache_size:
            self._query_cache.popitem(last=False)
        return vector

    async def _doc_freqs(self, terms: list[str]) -> tuple[list[int], int]:
        # Document frequencies change only when the store does; the cache follows its generation.
        # Concurrent searches share it, and one may start a new generation while another is
        # between awaits: each works on the dict it began with (issue 6, found under load).
        generation = self.store.generation
        if generation > self._df_generation:
            total = await self.store.read(lambda r: r.chunk_total())
            if generation > self._df_generation:
                self._df_cache, self._df_generation, self._total = {}, generation, total
        cache, total = self._df_cache, self._total
        found = {t.lower(): cache[t.lower()] for t in terms if t.lower() in cache}
        missing = [t for t in terms if t.lower() not in found]
        if missing:
            expressions = [quote_term(t) for t in missing]
            counts = await self.store.read(lambda c: c.document_frequencies(expressions))
            for term, count in zip(missing, counts, strict=True):
                found[term.lower()] = cache[term.lower()] = count
        return [found[t.lower()] for t in terms], total

    async def search(
        self,
        query: str,
        *,
        limit: int | None = None,
        filters: Filters = NO_FILTERS,
        **overrides: Any,
    ) -> SearchResult:
        """Search the store: recall, fusion and the gate, the ranking stages, expand, pack.

        Args:
            query: Free text; it never reaches FTS5 syntax unescaped.
            limit: How many hits to return.
            filters: Source, kind, granularity, tag and time filters.
            **overrides: Any `SearchSettings` field for this call only (e.g. `mode="bm25"`).

        Raises:
            QueryError: The query is empty or an override is unknown or malformed.
        """
        started = time.perf_counter()
        asked = await self._query(query, limit, filters, overrides)
        recalled = await recall.recall(asked, self.store, self.embed_query, self._doc_freqs)
        self._note_embedding(asked, recalled)
        completed = await recall.complete(asked, recalled, self.store, self.embed_query)
        found = recall.fuse_and_gate(asked, recalled, completed, self.calibration, self.store)
        loading = time.perf_counter()
        await load_for(STAGES, asked, found)
        found.timings["rank_ms"] = (time.perf_counter() - loading) * 1000
        await run_stages(STAGES, asked, found)
        await found.load()  # the hits' chunks (`limit` loaded them: nothing to read)
        hits = [
            Hit(chunk=found.chunks[cid], score=found.scores[cid], explain=explain)
            for cid, explain in recall.explain_hits(recalled, completed, found).items()
        ]
        opts = asked.settings
        if opts.expand > 0 and hits:
            await expansion.expand(self.store, hits, opts.expand)
        if opts.fact_source and hits:
            await fact_source.attach(self.store, hits)
        packed = None
        if opts.budget_tokens and hits:
            hits, packed = await self._pack(hits, opts.budget_tokens)
        found.timings["total_ms"] = (time.perf_counter() - started) * 1000
        summary = self._summary(asked, recalled, found)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("search: %d hits, %s", len(hits), summary["timings_ms"])
        return SearchResult(
            hits=hits, tier=found.tier, rejected=found.rejected, explain=summary, packing=packed
        )

    async def _query(
        self, text: str, limit: int | None, filters: Filters, overrides: dict[str, Any]
    ) -> Query:
        """The request, checked, with its settings resolved and its time intent read.

        Time-aware search (issue 8): a time expression in the query narrows recall (filter)
        or boosts the fused candidates in its range (the `time` stage), relative to the
        scope's dates.
        """
        if not text.strip():
            raise QueryError("the query is empty; pass some words to search for")
        tuned_kind, tuned = self._tuned(filters, overrides)
        learned = self._answerability_learned(filters, overrides)
        opts, limit = self._settings(limit, {**tuned, **learned, **overrides})
        intent, note = await self._time_intent(text, filters) if opts.time_aware else (None, None)
        recall_filters = filters
        if intent is not None and intent.has_range and opts.time_mode == "filter":
            recall_filters = temporal.narrow(filters, intent)
        return Query(
            text,
            query_terms(text),
            opts,
            limit,
            filters,
            recall_filters,
            intent,
            note,
            tuned_kind,
            tuned,
            bool(learned),
        )

    def _settings(self, limit: int | None, overrides: dict[str, Any]) -> tuple[SearchSettings, int]:
        """The call's settings and limit, checked."""
        try:
            # A copy of ~50 fields costs ~40 us; without overrides the frozen defaults serve.
            opts = dataclasses.replace(self.settings, **overrides) if overrides else self.settings
        except TypeError as exc:
            raise QueryError(f"unknown search option: {exc}") from exc
        if (
            opts.mode not in MODES
            or opts.fusion not in FUSIONS
            or (opts.weighting not in WEIGHTINGS)
            or opts.time_mode not in TIME_MODES
        ):
            raise QueryError(
                f"mode must be one of {MODES}, fusion one of {FUSIONS}, weighting one of "
                f"{WEIGHTINGS} and time_mode one of {TIME_MODES}"
            )
        if opts.coverage_depth < 1 or opts.agreement_depth < 1:
            raise QueryError("coverage_depth and agreement_depth must be 1 or more")
        if not 0.0 <= opts.keyword_weight_floor <= 1.0:
            raise QueryError("keyword_weight_floor must be between 0 and 1")
        if not 0.0 <= opts.neighbour_support <= 1.0:
            raise QueryError("neighbour_support must be between 0 and 1")
        if opts.budget_tokens < 0:
            raise QueryError("budget_tokens must be 0 (no packing) or more")
        limit = opts.limit if limit is None else limit
        if limit < 1 or limit > 1000:
            raise QueryError("limit must be between 1 and 1000")
        return opts, limit

    def _summary(
        self, asked: Query, recalled: recall.Recalled, found: Candidates
    ) -> dict[str, Any]:
        """The result set's `explain`."""
        summary = {
            **found.summary,
            "rejected": found.rejected,
            "tier": found.tier,
            "calibration": self._tuning_note(asked.tuned_kind, asked.tuned, asked.settings),
            "timings_ms": {k: round(v, 3) for k, v in found.timings.items()},
        }
        if recalled.degraded:
            summary["vector_unavailable"] = recalled.degraded[0]
        return summary

    def _tuned(
        self, filters: Filters, overrides: dict[str, Any]
    ) -> tuple[str | None, dict[str, Any]]:
        """The kind searched and the fusion settings the store calibrated for it ({} when
        self-tuning is off, not calibrated, or the call sets its own fusion)."""
        if not overrides.get("self_tune", self.settings.self_tune) or self.tuning is None:
            return None, {}
        if any(f in overrides for f in selftune.FUSION_FIELDS):
            return None, {}
        kind, tuned = self.tuning.settings_for(
            filters.kinds[0] if len(filters.kinds) == 1 else None
        )
        return kind, tuned

    def _answerability_learned(
        self, filters: Filters, overrides: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The answerability threshold and k the store learned for the units searched ({}
        when `answerability_self_tune` is off, none was learned, or the call sets its own)."""
        if not overrides.get("answerability_self_tune", self.settings.answerability_self_tune):
            return {}
        scopes = (self.tuning.answerability if self.tuning is not None else None) or {}
        scope = answerability_tune.scope_of(filters.granularities)
        learned = scopes.get(scope) or scopes.get(answerability_tune.ALL)
        own = ("answerability_threshold", "answerability_k")
        if learned is None or learned.skipped or not learned.current():
            return {}
        if any(f in overrides for f in own):
            return {}
        return {"answerability_threshold": learned.threshold, "answerability_k": learned.k}

    def _tuning_note(
        self, kind: str | None, tuned: Mapping[str, Any], opts: SearchSettings
    ) -> dict[str, Any] | None:
        """What `explain` says about self-calibration."""
        if not opts.self_tune:
            return None
        if self.tuning is None:
            return {"calibrated": False, "family": selftune.family_of(opts)}
        return {
            "calibrated": True,
            "kind": kind,
            "family": selftune.family_of(opts),
            "chosen": bool(tuned),
        }

    async def _time_intent(
        self, query: str, filters: Filters
    ) -> tuple[TimeIntent | None, dict[str, Any] | None]:
        """The query's time intent, or None when it says nothing about time."""
        if parse(query, datetime.now(UTC)).is_empty():
            return None, None  # most queries: no anchor to look up
        # "Now" is the latest event in the searched scope (a 2023 chat's "last week" is in
        # 2023), never later than the wall clock.
        latest = await self.store.read(lambda c: c.latest_event_time(filters))
        anchor = min(latest, time.time()) if latest is not None else time.time()

        async def find_event(phrase: str) -> float | None:
            found = await self.search(
                phrase, limit=1, filters=filters, time_aware=False, gate=False, budget_tokens=0
            )
            return found.hits[0].chunk.event_time if found.hits else None

        intent, note = await temporal.read_intent(query, anchor, find_event)
        if intent.is_empty():
            return None, None
        return intent, note

    async def _pack(self, hits: list[Hit], budget: int) -> tuple[list[Hit], dict[str, Any]]:
        """Pack the hits to `budget` tokens, with their parent as context for fact hits."""
        parent_ids = [h.chunk.parent_id for h in hits if h.chunk.parent_id is not None]
        parents = await self.store.read(lambda c: c.chunks_by_id(parent_ids))
        return await asyncio.to_thread(
            packing.pack, hits, budget, packing.token_counter(self.embedder), parents
        )
