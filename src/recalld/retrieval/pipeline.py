"""What every ranking stage shares: the query, the candidates, and the stage signature.

A search builds one `Query` (what was asked, with every setting resolved), recalls and fuses
into one `Candidates` (what was found so far), and hands both to each stage of
`retrieval.stages.STAGES` in turn. A stage says when it is `enabled` (from the query alone)
and `run`s on the candidates: it may reorder, rescore, add or drop them, and it writes only
its own per-hit `explain` entry (`Candidates.notes(stage.name)`) and its own `timings_ms`
entry (`stage.timing`, timed by `run_stages`).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from recalld.config import SearchSettings
from recalld.retrieval.timeparse import TimeIntent
from recalld.storage.contract import Store
from recalld.storage.records import Link, untimed_parents
from recalld.types import Chunk, Filters, Tier


@dataclass(frozen=True, slots=True)
class Query:
    """One search request with every setting resolved; built once, read by every stage.

    Attributes:
        text: The query as typed.
        terms: Its escaped keyword terms.
        settings: The search settings for this call (defaults, self-tuning, overrides).
        limit: How many hits to return.
        filters: The caller's filters.
        recall_filters: The filters recall runs with (narrowed by a time filter).
        intent: The query's time intent, None when it says nothing about time.
        time_note: What `explain` says about that intent.
        tuned_kind: The content kind self-tuning chose settings for, if any.
        tuned: The fusion settings self-tuning chose ({} when none).
        answerability_learned: Whether the answerability threshold and k are the ones the
            store learned (`answerability_self_tune`) rather than the configured ones.
    """

    text: str
    terms: list[str]
    settings: SearchSettings
    limit: int
    filters: Filters
    recall_filters: Filters
    intent: TimeIntent | None = None
    time_note: dict[str, Any] | None = None
    tuned_kind: str | None = None
    tuned: Mapping[str, Any] = field(default_factory=dict)
    answerability_learned: bool = False

    @property
    def pool(self) -> int:
        """How many candidates each route recalls and fusion keeps."""
        return max(self.settings.candidates, self.limit)

    @property
    def uses_vector(self) -> bool:
        return self.settings.mode in ("hybrid", "vector")

    @property
    def uses_keyword(self) -> bool:
        """The keyword route also runs for the gate's keyword evidence."""
        return self.settings.mode in ("hybrid", "bm25") or self.settings.gate


@dataclass(slots=True)
class Candidates:
    """What a search has found so far, best first; the stages work on it in place.

    Attributes:
        store: The store they were found in (stages read chunks, links, vectors from it).
        order: Candidate chunk ids, best first.
        scores: Each candidate's current score.
        fused: Each candidate's fused score (spreading activation adds the chunks it reaches).
        chunks: The loaded chunks: of every id in `order` once a stage that reads them all
            has run (`load_for`); else of those the stages read.
        statuses: The status of each candidate in `order` whose chunk is not loaded.
        rejected: Whether the result set is rejected (then `order` is empty).
        tier: The result set's confidence: `high`, `medium` or `low`.
        summary: Result-level `explain` entries the stages add.
        timings: `timings_ms` entries, in milliseconds.
    """

    store: Store
    order: list[int]
    scores: dict[int, float]
    fused: dict[int, float]
    rejected: bool
    tier: Tier
    chunks: dict[int, Chunk] = field(default_factory=dict)
    statuses: dict[int, str] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    _notes: dict[str, dict[int, Any]] = field(default_factory=dict)
    # The links touching some ids, read with the first load (`load_statuses`), those ids, and
    # whether the links touching their untimed parents came too.
    _links: tuple[frozenset[int], list[Link], bool] | None = None

    def notes(self, stage: str) -> dict[int, Any]:
        """The per-hit `explain` entries of one stage (`{chunk id: value}`), to write to."""
        return self._notes.setdefault(stage, {})

    def explain_of(self, cid: int) -> dict[str, Any]:
        """Every stage's `explain` entry for one candidate, in stage order."""
        return {stage: notes[cid] for stage, notes in self._notes.items() if cid in notes}

    async def load(self, first: int | None = None) -> None:
        """Load the chunks of the first `first` candidates (None: of all) not loaded yet; ids
        no longer stored leave `order`, and those moving up in their place are loaded."""
        while missing := [c for c in self.order[:first] if c not in self.chunks]:
            found = await self.store.read(lambda c: c.chunks_by_id(missing))
            self.chunks.update(found)
            self._drop_gone(missing)

    async def load_statuses(self, first: int, links: bool = False, parents: bool = False) -> None:
        """Load the chunks of the first `first` candidates and only the status of the others,
        in one read, with the links touching every candidate when `links` (and, with
        `parents`, the temporal links of their untimed parents: `Stage.reads_parents_links`);
        ids no longer stored leave `order`."""
        missing = [c for c in self.order[:first] if c not in self.chunks]
        rest = [c for c in self.order[first:] if c not in self.chunks]
        every = list(self.order) if links else []
        if every:
            found, statuses, touching = await self.store.read(
                lambda c: c.chunks_statuses_and_links(missing, rest, every, parents)
            )
            self._links = (frozenset(every), touching, parents)
            self.chunks.update(found)
            self.statuses.update(statuses)
            self._drop_gone([*missing, *(c for c in rest if c not in statuses)])
        elif missing or rest:
            found, statuses = await self.store.read(lambda c: c.chunks_and_statuses(missing, rest))
            self.chunks.update(found)
            self.statuses.update(statuses)
            self._drop_gone([*missing, *(c for c in rest if c not in statuses)])
        await self.load(first)  # the ones that moved up, if any left

    def _drop_gone(self, asked: list[int]) -> None:
        gone = {c for c in asked if c not in self.chunks}
        if gone:
            self.order = [c for c in self.order if c not in gone]

    def status_of(self, cid: int) -> str:
        """A candidate's status, from its chunk or `statuses`."""
        chunk = self.chunks.get(cid)
        return chunk.status if chunk is not None else self.statuses[cid]

    async def links_touching(self, ids: Sequence[int]) -> list[Link]:
        """Every link with either end in `ids` (`Reader.links_touching`): from the first load
        when it read them for all of `ids` (`Stage.reads_links`), else read now."""
        if self._links is not None and self._links[0].issuperset(ids):
            wanted = set(ids)
            return [link for link in self._links[1] if link[0] in wanted or link[1] in wanted]
        return await self.store.read(lambda c: c.links_touching(ids))

    async def links_through_parents(self, ids: Sequence[int]) -> list[Link]:
        """Every link touching `ids` and (at least) every temporal link of their
        `untimed_parents`: as the first load read them when it read them for exactly `ids`
        (`Stage.reads_parents_links`), else read now (one more read when there are such
        parents)."""
        if self._links is not None and self._links[2] and self._links[0] == frozenset(ids):
            return self._links[1]
        links = await self.links_touching(ids)
        parents = untimed_parents(links, ids)
        return [*links, *await self.links_touching(parents)] if parents else links

    async def vectors(self, ids: Sequence[int]) -> dict[int, npt.NDArray[np.float32]]:
        """The stored vectors of `ids` (those that have one)."""
        store = self.store
        return await store.read(lambda c: c.vectors_by_id(ids, store.dimension))


class Stage(ABC):
    """One ranking stage. Subclass it, then add an instance to `retrieval.stages.STAGES`.

    Attributes:
        name: The stage's key in each hit's `explain` (and its name in the docs' stage list).
        timing: The `timings_ms` entry its time is added to.
        when_off: Result-level `explain` entries it reports while switched off.
    """

    name: ClassVar[str]
    timing: ClassVar[str] = "rank_ms"
    when_off: ClassVar[Mapping[str, Any]] = {}

    @abstractmethod
    def enabled(self, query: Query) -> bool:
        """Whether the stage runs for this query."""

    @abstractmethod
    async def run(self, query: Query, found: Candidates) -> None:
        """Rank `found` in place."""

    def reads_every_chunk(self, query: Query) -> bool:
        """Whether it reads the chunk of every candidate: then a search loads them all before
        the stages (`load_for`). A stage that reads fewer says so, and loads those itself
        (`Candidates.load`)."""
        return True

    def reads_links(self, query: Query) -> bool:
        """Whether it follows the links between the candidates: then the first load reads
        them in the same read (`Candidates.links_touching`)."""
        return False

    def reads_parents_links(self, query: Query) -> bool:
        """Whether it also follows the links of the candidates' parents where the candidates
        have no temporal link of their own (`records.untimed_parents`): then a first load
        that reads the links reads theirs too."""
        return False


async def load_for(stages: Sequence[Stage], query: Query, found: Candidates) -> None:
    """The candidates' first load: every chunk when an enabled stage reads them all, else
    the chunks of the first `limit` and the others' status (the status penalty's), in one
    read. At 100k chunks the default stages return 10 of 50 candidates: reading the other
    40 whole took ~1 ms of CPU a search, most of it building their chunks."""
    if any(stage.enabled(query) and stage.reads_every_chunk(query) for stage in stages):
        await found.load()
    else:
        links = any(stage.enabled(query) and stage.reads_links(query) for stage in stages)
        parents = any(stage.enabled(query) and stage.reads_parents_links(query) for stage in stages)
        await found.load_statuses(query.limit, links, parents)


async def run_stages(stages: Sequence[Stage], query: Query, found: Candidates) -> None:
    """Run each enabled stage in order, adding its time to its `timings_ms` entry."""
    for stage in stages:
        if not stage.enabled(query):
            found.summary.update(stage.when_off)
            continue
        started = time.perf_counter()
        await stage.run(query, found)
        elapsed = (time.perf_counter() - started) * 1000
        found.timings[stage.timing] = found.timings.get(stage.timing, 0.0) + elapsed
