"""Plain dataclasses shared by every layer.

`ChunkDraft` is what a chunker produces (no ids, no vectors); `Chunk` is a stored chunk;
`Hit` is one search result with its explanation. They carry no behaviour beyond small
conveniences, so `chunkers`, `storage` and `retrieval` can share them without importing each
other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["text", "code", "conversation", "memory"]
Granularity = Literal["chunk", "session", "round", "window", "fact", "memory"]
Tier = Literal["high", "medium", "low"]

KINDS: tuple[str, ...] = ("text", "code", "conversation", "memory")
# The memory types of issue 8: MemX's data model types its memories, and its examples use
# `semantic` and `procedural` (tag signatures such as `procedural::ops|release`).
MEMORY_TYPES: tuple[str, ...] = ("episodic", "semantic", "procedural", "preference")
GRANULARITIES: tuple[str, ...] = ("chunk", "session", "round", "window", "fact", "memory")


@dataclass(frozen=True, slots=True)
class ChunkDraft:
    """A chunk as a chunker produces it, before it has an id or a vector.

    Attributes:
        text: The text that is embedded and indexed.
        kind: The family of source it came from.
        granularity: `chunk` for documents and code; `session` / `round` / `fact` for
            conversations; `memory` for memories written directly.
        key: A stable id within its document (e.g. a round's first `dia_id`), so that
            re-ingesting a grown log can keep what it already has.
        parent_key: The `key` of the coarser chunk this one belongs to, if any.
        event_time: When the content happened (unix seconds), if known.
        meta: Format-specific details: heading path, language, symbol, line span,
            speakers, dia_ids, whether facts are heuristic.
        tags, memory_type, importance: Set for memories written directly.
    """

    text: str
    kind: Kind = "text"
    granularity: Granularity = "chunk"
    key: str = ""
    parent_key: str | None = None
    event_time: float | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    memory_type: str | None = None
    importance: float = 0.5


@dataclass(frozen=True, slots=True)
class Filters:
    """Search filters; every field narrows the result set, empty fields do nothing.

    Attributes:
        sources: Source prefixes (a folder path matches every file under it).
        kinds: Chunk kinds to keep.
        granularities: Granularities to keep.
        tags: Every listed tag must be present.
        since: Keep chunks whose event time is at or after this (unix seconds).
        until: Keep chunks whose event time is before this.
        project: Keep chunks of this project (a git root or folder) and of no project; a
            document belongs to a project when `storage.sqlite.projects` records one for it.
    """

    sources: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    granularities: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    since: float | None = None
    until: float | None = None
    project: str | None = None

    def is_empty(self) -> bool:
        """True when no filter is set."""
        return not (self.sources or self.kinds or self.granularities or self.tags) and (
            self.since is None and self.until is None and self.project is None
        )


NO_FILTERS = Filters()


@dataclass(frozen=True, slots=True)
class Chunk:
    """A stored chunk."""

    id: int
    document_id: int
    source: str
    position: int
    kind: str
    granularity: str
    key: str
    parent_id: int | None
    text: str
    token_count: int
    tags: tuple[str, ...]
    memory_type: str | None
    importance: float
    event_time: float | None
    created_at: float
    access_count: int
    last_accessed_at: float | None
    retrieval_count: int
    last_retrieved_at: float | None
    status: str
    meta: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Document:
    """A stored source: a file, a log, or the pseudo-document that holds memories."""

    id: int
    source: str
    content_hash: str
    state: str
    kind: str
    chunk_count: int
    created_at: float
    updated_at: float
    mtime: float | None
    size: int | None


@dataclass(slots=True)
class Hit:
    """One search result.

    Attributes:
        chunk: The stored chunk that matched.
        score: The final score after every enabled stage (higher is better).
        explain: Per-stage detail: routes and ranks, fused score, factors.
        context: Expanded text (neighbours or parent), when expansion is on.
    """

    chunk: Chunk
    score: float
    explain: dict[str, Any] = field(default_factory=dict)
    context: str | None = None


@dataclass(slots=True)
class SearchResult:
    """A whole result set: the hits, the confidence tier and whether the gate rejected it.

    `packing` is set when the search packed its hits to a token budget: tokens used, hits
    and parent contexts dropped (see `retrieval.packing`).
    """

    hits: list[Hit]
    tier: Tier
    rejected: bool
    explain: dict[str, Any] = field(default_factory=dict)
    packing: dict[str, Any] | None = None
