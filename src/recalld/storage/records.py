"""Neutral storage records: what both backends read and write, in one place.

Column lists and row readers (`row_to_chunk`), what a write is given (`NewDocument`,
`NewChunk`, `MemoryEdit`, `Link`), the reindex state and the model-mismatch message. Nothing
here touches a database.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from recalld import limits
from recalld.errors import ModelMismatchError
from recalld.types import Chunk, ChunkDraft, Document

STATE_KEYS = ("reindex_spec", "reindex_model_id", "reindex_dimension", "reindex_started_at")


# The spec (`local`, `hash:32`, `openai:...`) the store's vectors were made with, so a daemon
# whose config does not name a model can load the one the store holds (see `registry.open_store`).
SPEC_KEY = "model_spec"

# Memories are stored under this prefix and the hash of their text (`Ingestor.remember`), so a
# memory that lost its document row gets the same source back and stays deduplicated.
MEMORY_PREFIX = "memory:"


def memory_source(text: str) -> str:
    """The source `Ingestor.remember` gives a memory with this text."""
    return MEMORY_PREFIX + hashlib.sha256(text.strip().encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class ReindexState:
    """A reindex in progress, as recorded in `meta`.

    Attributes:
        spec: The target model as `embed.model` names it.
        model_id: The target's model id.
        dimension: The target's vector length.
        started_at: When the reindex began (epoch seconds).
    """

    spec: str
    model_id: str
    dimension: int
    started_at: float

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready copy."""
        return {
            "spec": self.spec,
            "model": self.model_id,
            "dimension": self.dimension,
            "started_at": self.started_at,
        }


def state_from_meta(meta: dict[str, str]) -> ReindexState | None:
    """The reindex recorded in a `meta` mapping, or None."""
    if not all(k in meta for k in STATE_KEYS):
        return None
    return ReindexState(
        meta["reindex_spec"],
        meta["reindex_model_id"],
        int(meta["reindex_dimension"]),
        float(meta["reindex_started_at"]),
    )


CHUNK_COLUMNS = (
    "c.id, c.document_id, d.source, c.position, c.kind, c.granularity, c.key, c.parent_id, "
    "c.text, c.token_count, c.tags, c.memory_type, c.importance, c.event_time, c.created_at, "
    "c.access_count, c.last_accessed_at, c.retrieval_count, c.last_retrieved_at, c.status, c.meta"
)

# `CHUNK_COLUMNS` with every column but the id and the status NULL: the rows of the
# candidates a search needs the status of only (`Reader.chunks_and_statuses`), read in the same
# statement as the whole rows of the others (a chunk row always has a document id).
_COLUMNS = CHUNK_COLUMNS.split(", ")
_STATUS_AT = _COLUMNS.index("c.status")
CHUNK_STATUS_COLUMNS = ", ".join(c if c in ("c.id", "c.status") else "NULL" for c in _COLUMNS)


def chunks_and_statuses(rows: Sequence[Any]) -> tuple[dict[int, Chunk], dict[int, str]]:
    """Rows of `CHUNK_COLUMNS` as chunks and rows of `CHUNK_STATUS_COLUMNS` as statuses."""
    chunks: dict[int, Chunk] = {}
    statuses: dict[int, str] = {}
    for row in rows:
        if row[1] is None:
            statuses[int(row[0])] = row[_STATUS_AT]
        else:
            chunks[int(row[0])] = row_to_chunk(row)
    return chunks, statuses


def json_column(text: Any, default: Any) -> Any:
    """A JSON column read back; `NaN`, `Infinity` and `1e400` become null, and text that is not
    JSON at all becomes `default` (`check` reports such rows)."""
    if text == "[]" or text == "{}":  # most rows' tags and meta: no decoder needed
        value: Any = [] if text == "[]" else {}
        return value if isinstance(value, type(default)) else default
    try:
        # One decoder for every row: `json.loads` with hooks builds a new one per call,
        # which cost more than the decoding (~5 us a column, 50 chunks a search).
        value = _DECODER.decode(text) if isinstance(text, str) else _loads(text)
    except (TypeError, ValueError):
        return default
    return value if isinstance(value, type(default)) else default


def _finite_float(text: str) -> float | None:
    value = float(text)
    return value if limits.is_number(value) else None


def _no_constant(_: str) -> None:
    return None


_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float)


def _loads(text: Any) -> Any:
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)


def row_to_chunk(row: Any) -> Chunk:
    """A `Chunk` from a row of `CHUNK_COLUMNS` (both backends).

    A number that cannot be sent as JSON (an `inf` event time an older recalld let in) is read
    as unknown, so one bad row cannot fail a whole search; `check` reports it by id.
    """
    (cid, document_id, source, position, kind, granularity, key, parent_id, text, tokens, tags,
     memory_type, importance, event_time, created_at, access_count, last_accessed_at,
     retrieval_count, last_retrieved_at, status, meta) = row  # fmt: skip
    return Chunk(
        id=int(cid),
        document_id=int(document_id),
        source=source,
        position=position,
        kind=kind,
        granularity=granularity,
        key=key,
        parent_id=None if parent_id is None else int(parent_id),
        text=text,
        token_count=tokens,
        tags=() if tags == "[]" else tuple(t for t in json_column(tags, []) if isinstance(t, str)),
        memory_type=memory_type,
        importance=limits.number_or(importance, 0.5),
        event_time=limits.time_or_none(event_time),
        created_at=limits.number_or(created_at, 0.0),
        access_count=access_count,
        last_accessed_at=limits.time_or_none(last_accessed_at),
        retrieval_count=retrieval_count,
        last_retrieved_at=limits.time_or_none(last_retrieved_at),
        status=status,
        meta=json_column(meta, {}),
    )


def row_to_document(row: Any) -> Document:
    """A `Document` from a row of `DOCUMENT_COLUMNS` (both backends)."""
    return Document(
        id=int(row[0]),
        source=row[1],
        kind=row[2],
        content_hash=row[3],
        state=row[4],
        chunk_count=row[5],
        created_at=limits.number_or(row[6], 0.0),
        updated_at=limits.number_or(row[7], 0.0),
        mtime=limits.time_or_none(row[8]),
        size=None if row[9] is None else int(row[9]),
    )


DOCUMENT_COLUMNS = (
    "id, source, kind, content_hash, state, chunk_count, created_at, updated_at, mtime, size"
)


def chunk_hash(draft: ChunkDraft) -> str:
    """The content hash that decides whether a stored chunk can be kept as it is."""
    payload = json.dumps(
        [
            draft.text,
            draft.kind,
            draft.granularity,
            draft.parent_key,
            draft.event_time,
            draft.meta,
            list(draft.tags),
            draft.memory_type,
            draft.importance,
        ],
        sort_keys=True,
        ensure_ascii=False,
        default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


def _event_time(chunk: float | None, document: float | None) -> float | None:
    """A chunk's event time, or its document's when it has none a date can show (a log line
    stamped `1e400` must not poison the store: see `recalld.limits`)."""
    return limits.time_or_none(chunk if limits.is_time(chunk) else document)


@dataclass(frozen=True, slots=True)
class NewDocument:
    """The document row of a replacement."""

    source: str
    kind: str
    format: str
    content_hash: str
    mtime: float | None = None
    size: int | None = None
    # The event time of chunks that bring none (the file's mtime, or the ingest time). Kept
    # chunks keep theirs: a paragraph untouched by an edit still dates from when it was written.
    event_time: float | None = None


# An auto link from a new chunk: (relation, target chunk id or target draft key, weight).
AutoLink = tuple[str, int | str, float]


@dataclass(frozen=True, slots=True)
class NewChunk:
    """One chunk of a replacement: its draft, token count and vector (None: keep the stored one),
    and the auto links found for it at ingest (`ingest.autolink`)."""

    draft: ChunkDraft
    token_count: int
    vector: npt.NDArray[np.float32] | None
    links: tuple[AutoLink, ...] = ()


ChunkRow = tuple[Any, ...]


def chunk_rows(
    doc_id: int,
    doc: NewDocument,
    chunks: Sequence[NewChunk],
    existing: dict[tuple[str, str], int],
    now: float,
) -> tuple[list[tuple[int, int]], list[ChunkRow], list[int]]:
    """What `replace_document` writes, on either backend: `(position, id)` of the chunks kept
    as stored (no new vector), the rows of the new chunks in the `INSERT` column order, and
    the ids of stored chunks no longer wanted. `existing` maps `(key, content hash)` to id."""
    hashes = [chunk_hash(c.draft) for c in chunks]
    keep = {(c.draft.key, h) for c, h in zip(chunks, hashes, strict=True) if c.vector is None}
    stale = [cid for key_hash, cid in existing.items() if key_hash not in keep]
    kept: list[tuple[int, int]] = []
    inserts: list[ChunkRow] = []
    for position, (chunk, digest) in enumerate(zip(chunks, hashes, strict=True)):
        draft = chunk.draft
        if chunk.vector is None:
            kept.append((position, existing[(draft.key, digest)]))
            continue
        inserts.append(
            (
                doc_id,
                position,
                draft.kind,
                draft.granularity,
                draft.key,
                draft.text,
                digest,
                chunk.token_count,
                json.dumps(list(draft.tags)),
                draft.memory_type,
                draft.importance,
                _event_time(draft.event_time, doc.event_time),
                now,
                json.dumps(draft.meta, ensure_ascii=False, default=str),
            )
        )
    return kept, inserts, stale


def chunk_links(
    chunks: Sequence[NewChunk], ids_by_key: dict[str, int]
) -> tuple[list[tuple[int, npt.NDArray[np.float32], str, str]], list[tuple[int, int]], list[Link]]:
    """Once the chunks have ids: the vectors to store, the `(parent id, chunk id)` pairs (a
    parent may come after its child in the list, hence a second pass), and the auto links
    the ingest found, with chunk keys resolved to ids."""
    embedded: list[tuple[int, npt.NDArray[np.float32], str, str]] = []
    parents: list[tuple[int, int]] = []
    found: list[Link] = []
    for chunk in chunks:
        draft = chunk.draft
        chunk_id = ids_by_key[draft.key]
        if chunk.vector is not None:
            vector = np.ascontiguousarray(chunk.vector, dtype=np.float32)
            embedded.append((chunk_id, vector, draft.kind, draft.granularity))
        if draft.parent_key is not None and draft.parent_key in ids_by_key:
            parents.append((ids_by_key[draft.parent_key], chunk_id))
        for relation, target, weight in chunk.links:
            dst = ids_by_key.get(target) if isinstance(target, str) else target
            if dst is not None:
                found.append((chunk_id, dst, relation, weight))
    return embedded, parents, found


RELATIONS: tuple[str, ...] = (
    "similar",
    "related",
    "contradicts",
    "extends",
    "supersedes",
    "caused_by",
    "temporal",
    "parent",
)


# Which incoming relation gives which status, strongest first (OpenMem's statuses).
STATUS_OF = (("supersedes", "superseded"), ("contradicts", "contradicted"))


LINK_STATUSES = ("active", "superseded", "contradicted")


Link = tuple[int, int, str, float]


def merged(links: list[Link], more: Iterable[Link]) -> list[Link]:
    """`links`, then those of `more` not among them."""
    seen = set(links)
    return [*links, *(link for link in more if link not in seen)]


def untimed_parents(links: Iterable[Link], ids: Iterable[int]) -> list[int]:
    """The parents (`parent` links, child -> parent) of those of `ids` without a `temporal`
    link of their own, not themselves in `ids`, sorted: the chunks whose temporal links give
    those of `ids` a place in time (neighbour support through parents). `links` must hold
    every link touching `ids`."""
    inside = set(ids)
    timed = {end for s, d, r, _ in links if r == "temporal" for end in (s, d)}
    return sorted(
        {d for s, d, r, _ in links if r == "parent" and s in inside and s not in timed} - inside
    )


def link_dict(row: Sequence[Any]) -> dict[str, Any]:
    """A link row `(src, dst, relation, weight, origin, created_at)` as the protocol returns it."""
    return {
        "src": int(row[0]),
        "dst": int(row[1]),
        "relation": row[2],
        "weight": float(row[3]),
        "origin": row[4],
        "created_at": row[5],
    }


@dataclass(frozen=True, slots=True)
class MemoryEdit:
    """The new values of an edited memory; None keeps the current one."""

    text: str | None = None
    memory_type: str | None = None
    tags: tuple[str, ...] | None = None
    importance: float | None = None
    event_time: float | None = None

    def applied(
        self,
        text: str,
        tags: str,
        memory_type: str | None,
        importance: float,
        event_time: float | None,
    ) -> tuple[str, str, str | None, float, float | None]:
        """The memory's new `(text, tags as stored JSON, type, importance, event time)`."""
        return (
            self.text if self.text is not None else text,
            json.dumps(list(self.tags)) if self.tags is not None else tags,
            self.memory_type if self.memory_type is not None else memory_type,
            self.importance if self.importance is not None else importance,
            self.event_time if self.event_time is not None else event_time,
        )


def model_mismatch(
    path: Path | str, stored: dict[str, str], model_id: str, dimension: int
) -> ModelMismatchError:
    """The error a store embedded with another model gives (both backends)."""
    spec = stored.get(SPEC_KEY)
    named = f"embed.model = {spec!r}" if spec else "embed.model back to the store's model"
    return ModelMismatchError(
        f"{path} was embedded with {stored['model_id']} ({stored['dimension']} dims) "
        f"but recalld is configured for {model_id} ({dimension} dims); set {named}, "
        "or re-embed: start recalld with the store's model and run "
        "`recalld reindex --model SPEC` (SPEC: the model you want); the daemon keeps "
        "answering with the old model until the switch",
        data={
            "stored_model": stored["model_id"],
            "stored_dimension": int(stored["dimension"]),
            "stored_spec": spec,
            "model": model_id,
            "dimension": dimension,
        },
    )
