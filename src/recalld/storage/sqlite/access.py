"""The SQLite implementation of the storage contract (`storage.contract`).

`SqliteReader` wraps one aiosqlite connection and the store's in-memory vector and keyword
indexes; each operation runs the SQL of this folder's `readers`, `writer`, `links`, ... on it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from functools import partial
from typing import Any

import aiosqlite
import numpy as np
import numpy.typing as npt

from recalld.storage import contract
from recalld.storage.contract import BothRoutes, KeywordAnswer
from recalld.storage.fts import match_expression, quote_term
from recalld.storage.records import Link, MemoryEdit, NewChunk, NewDocument, ReindexState
from recalld.storage.sqlite import (
    history,
    import_sql,
    keywords,
    projects,
    readers,
    reindex,
    routes,
    writer,
)
from recalld.storage.sqlite import links as stored_links
from recalld.storage.sqlite.keywords import KeywordIndex
from recalld.storage.sqlite.on_thread import RawConnection, on_thread
from recalld.storage.sqlite.vectors import VectorIndex
from recalld.types import Chunk, Document, Filters


class SqliteReader(contract.Reader):
    """The read operations on one SQLite connection (a pooled reader, or the writer)."""

    def __init__(
        self, conn: aiosqlite.Connection, vectors: VectorIndex, keyword_index: KeywordIndex | None
    ) -> None:
        self.conn = conn
        self.vectors = vectors
        # The index a search goes through: the writer's is None (see `SqliteWriter`).
        self.search_index: VectorIndex | None = vectors
        # The keyword mirror; None: FTS5 answers (the writer, which sees its own uncommitted
        # changes, which the mirror cannot).
        self.keyword_index = keyword_index

    def prefix_match(self, column: str, prefixes: Sequence[str]) -> tuple[str, list[Any]]:
        # A range keeps the index on `source` usable and needs no LIKE escaping.
        params: list[Any] = []
        for prefix in prefixes:
            params += [prefix, prefix + "\U0010ffff"]
        return " OR ".join([f"({column} >= ? AND {column} < ?)"] * len(prefixes)), params

    def tag_match(self, chunk: str) -> str:
        return f"EXISTS (SELECT 1 FROM json_each({chunk}.tags) j WHERE j.value = ?)"

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return await readers.fetchall(self.conn, sql, params)

    async def knn(
        self, vector: npt.NDArray[np.float32], k: int, filters: Filters
    ) -> list[tuple[int, float]]:
        return await readers.knn(self.conn, self.search_index, vector, k, filters)

    async def fts(self, expression: str, k: int, filters: Filters) -> list[tuple[int, float]]:
        index, conn = self.keyword_index, self.conn
        if filters.is_empty():
            best = await keywords.lookup(index, [expression], keywords.best(k))
            if best is None:
                return await readers.fts(conn, expression, k, filters)
            return best
        found = await keywords.lookup(index, [expression], keywords.matches)
        if found is None:
            return await readers.fts(conn, expression, k, filters)
        if not len(found.ids):
            return []
        allowed = await stored_links.matching(conn, found.ids.tolist(), filters)
        return await asyncio.to_thread(keywords.best_allowed, found.ids, found.scores, allowed, k)

    async def keyword_search(
        self, terms: Sequence[str], k: int, filters: Filters, depth: int
    ) -> KeywordAnswer:
        # From the mirror: one pass in one worker thread (two more steps with filters).
        # FTS5: `fts` and the matched terms on this connection; the frequencies and the score
        # lookup are left to the caller (the searcher caches the frequencies).
        expression = match_expression(list(terms))
        index = self.keyword_index
        if filters.is_empty():
            answer = await keywords.lookup(index, [expression], keywords.search(k, depth))
            if answer is not None:
                return answer
        else:
            found = await keywords.lookup(index, [expression], keywords.matches)
            if found is not None:
                ids = found.ids.tolist()
                allowed = await stored_links.matching(self.conn, ids, filters) if ids else set()
                return await asyncio.to_thread(found.filtered, allowed, k, depth)
        hits = await readers.fts(self.conn, expression, k, filters)
        quoted = [quote_term(t) for t in terms]
        matched = [await readers.matched_terms(self.conn, cid, quoted) for cid, _ in hits[:depth]]
        return KeywordAnswer(hits, matched)

    async def both_routes(
        self,
        vector: npt.NDArray[np.float32],
        terms: Sequence[str],
        k: int,
        filters: Filters,
        depth: int,
        keyword_vectors: bool,
    ) -> BothRoutes:
        # One trip to this reader's thread (storage/sqlite/routes.py).
        if self.search_index is None and self.keyword_index is None:
            return BothRoutes()
        found = await on_thread(
            self.conn,
            partial(
                routes.run,
                index=self.search_index,
                keyword_index=self.keyword_index,
                vector=vector,
                terms=terms,
                k=k,
                filters=filters,
                depth=depth,
                keyword_vectors=keyword_vectors,
            ),
        )
        hits, stored = found.vector, found.keyword_vectors
        if hits is not None and self.vectors.note_changes(found.changes):
            # Another process wrote vectors: `knn` answers from the reloaded mirror, and the
            # keyword hits' vectors are read apart (these left out the stale vector hits).
            hits = stored = None
        return BothRoutes(hits, found.keyword, stored, found.vector_ms, found.keyword_ms)

    async def keyword_scores(self, expression: str, ids: Sequence[int]) -> dict[int, float]:
        found = None
        if ids:
            found = await keywords.lookup(self.keyword_index, [expression], keywords.scores_of(ids))
        if found is None:
            return await readers.keyword_scores(self.conn, expression, ids)
        return found

    async def latest_event_time(self, filters: Filters) -> float | None:
        return await readers.latest_event_time(self.conn, filters)

    async def granularity_vectors(
        self, granularity: str, document_id: int | None, at_most: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]] | None:
        return await readers.granularity_vectors(self.conn, granularity, document_id, at_most)

    async def document_frequency(self, expression: str) -> int:
        return await readers.document_frequency(self.conn, expression)

    async def document_frequencies(self, expressions: Sequence[str]) -> list[int]:
        found = await keywords.lookup(self.keyword_index, expressions, keywords.frequencies)
        if found is None:
            return await readers.document_frequencies(self.conn, expressions)
        return found

    async def matched_terms(self, chunk_id: int, expressions: Sequence[str]) -> list[bool]:
        answer = keywords.matched_in(chunk_id)
        found = await keywords.lookup(self.keyword_index, expressions, answer)
        if found is None:
            return await readers.matched_terms(self.conn, chunk_id, expressions)
        return found

    async def meta_value(self, key: str) -> str | None:
        return await readers.meta_value(self.conn, key)

    async def chunk_ids_by_kind(self) -> dict[str, list[int]]:
        return await readers.chunk_ids_by_kind(self.conn)

    async def chunk_total(self) -> int:
        return await readers.chunk_total(self.conn)

    async def chunks_by_id(self, ids: Sequence[int]) -> dict[int, Chunk]:
        return await readers.chunks_by_id(self.conn, ids)

    async def chunks_and_statuses(
        self, ids: Sequence[int], status_ids: Sequence[int]
    ) -> tuple[dict[int, Chunk], dict[int, str]]:
        return await readers.chunks_and_statuses(self.conn, ids, status_ids)

    async def chunks_statuses_and_links(
        self,
        ids: Sequence[int],
        status_ids: Sequence[int],
        link_ids: Sequence[int],
        through_parents: bool = False,
    ) -> tuple[dict[int, Chunk], dict[int, str], list[Link]]:
        def read(raw: RawConnection) -> tuple[dict[int, Chunk], dict[int, str], list[Link]]:
            chunks, statuses = readers.chunks_and_statuses_now(raw, ids, status_ids)
            links = stored_links.touching_now(raw, link_ids)
            if through_parents:
                links = stored_links.with_parents_now(raw, links, link_ids)
            return chunks, statuses, links

        return await on_thread(self.conn, read)

    async def vectors_by_id(
        self, ids: Sequence[int], dimension: int
    ) -> dict[int, npt.NDArray[np.float32]]:
        return await readers.vectors_by_id(self.conn, ids, dimension)

    async def neighbours(self, document_id: int, position: int, window: int) -> list[Chunk]:
        return await readers.neighbours(self.conn, document_id, position, window)

    async def document_by_source(self, source: str) -> Document | None:
        return await readers.document_by_source(self.conn, source)

    async def documents_by_source(self, sources: Sequence[str]) -> dict[str, Document]:
        return await readers.documents_by_source(self.conn, sources)

    async def chunk_keys(self, document_id: int) -> dict[str, str]:
        return await readers.chunk_keys(self.conn, document_id)

    async def documents(self, prefix: str = "", limit: int = 1000) -> list[Document]:
        return await readers.documents(self.conn, prefix, limit)

    async def counts(self) -> dict[str, int]:
        return await readers.counts(self.conn)

    async def redacted_chunks(self) -> int:
        return await readers.redacted_chunks(self.conn)

    async def skipped_files(self, prefix: str = "") -> dict[str, int]:
        return await readers.skipped_files(self.conn, prefix)

    async def errors(self, limit: int = 100) -> list[dict[str, Any]]:
        return await readers.errors(self.conn, limit)

    async def links_of(
        self, chunk_id: int, relation: str | None = None, direction: str = "both"
    ) -> list[dict[str, Any]]:
        return await stored_links.of(self.conn, chunk_id, relation, direction)

    async def links_touching(self, chunk_ids: Sequence[int]) -> list[Link]:
        return await stored_links.touching(self.conn, chunk_ids)

    async def link_status_targets(self, chunk_ids: Sequence[int]) -> list[int]:
        return await stored_links.status_targets(self.conn, chunk_ids)

    async def chunks_matching(self, chunk_ids: Sequence[int], filters: Filters) -> set[int]:
        return await stored_links.matching(self.conn, chunk_ids, filters)

    async def child_facts(
        self, chunk_ids: Sequence[int], dimension: int
    ) -> list[tuple[int, int, npt.NDArray[np.float32]]]:
        return await readers.child_facts(self.conn, chunk_ids, dimension)

    async def current_version(self, chunk_id: int) -> int:
        return await history.current_version(self.conn, chunk_id)

    async def history_of(self, chunk_id: int) -> list[dict[str, Any]]:
        return await history.history_of(self.conn, chunk_id)

    async def reindex_state(self) -> ReindexState | None:
        return await reindex.read_state(self.conn)

    async def reindex_progress(self) -> tuple[int, int]:
        return await reindex.progress(self.conn)

    async def reindex_missing(self, after: int, limit: int) -> list[tuple[int, str]]:
        return await reindex.missing(self.conn, after, limit)

    async def project_of(self, source: str) -> str | None:
        return await projects.project_of(self.conn, source)

    async def sources_of(self, project: str) -> set[str]:
        return await projects.sources_of(self.conn, project)

    async def projects_of(self, sources: list[str]) -> dict[str, str]:
        return await projects.projects_of(self.conn, sources)

    async def recent_chunks(self, filters: Filters, limit: int) -> list[Chunk]:
        return await projects.recent_chunks(self.conn, filters, limit)

    async def stored_documents(self, sources: Sequence[str]) -> dict[str, tuple[int, str, str]]:
        return await import_sql.stored_documents(self.conn, sources)

    async def chunk_ids(self, doc_ids: Sequence[int]) -> dict[tuple[int, str], int]:
        return await import_sql.chunk_ids(self.conn, doc_ids)

    async def find_same(self, table: str, values: dict[str, Any]) -> int | None:
        return await import_sql.find_same(self.conn, table, values)


class SqliteWriter(SqliteReader, contract.Writer):
    """The write operations on the store's writer connection, inside `BEGIN IMMEDIATE`.

    Writes stage their vector changes on the store's index (applied after COMMIT); a search
    inside a write does not go through it, as loading it takes the write lock this holds.
    """

    def __init__(self, conn: aiosqlite.Connection, vectors: VectorIndex) -> None:
        super().__init__(conn, vectors, None)
        self.search_index = None

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        cursor = await self.conn.execute(sql, params)
        return cursor.rowcount

    async def add_links(self, links: Sequence[Link], origin: str = "user") -> int:
        return await stored_links.add(self.conn, links, origin)

    async def remove_links(self, src: int, dst: int, relation: str | None = None) -> int:
        return await stored_links.remove(self.conn, src, dst, relation)

    async def refresh_link_status(self, chunk_ids: Iterable[int]) -> None:
        return await stored_links.refresh_status(self.conn, chunk_ids)

    async def rebuild_structure(self, document_id: int) -> None:
        return await stored_links.rebuild_structure(self.conn, document_id)

    async def update_memory(
        self,
        chunk_id: int,
        edit: MemoryEdit,
        *,
        source: str,
        content_hash: str,
        chunk_hash: str,
        token_count: int,
        vector: npt.NDArray[np.float32] | None,
        meta: dict[str, Any] | None = None,
    ) -> int:
        return await history.update_memory(
            self.conn,
            self.vectors,
            chunk_id,
            edit,
            source=source,
            content_hash=content_hash,
            chunk_hash=chunk_hash,
            token_count=token_count,
            vector=vector,
            meta=meta,
        )

    async def begin_reindex(self, spec: str, model_id: str, dimension: int) -> ReindexState:
        return await reindex.begin(self.conn, spec, model_id, dimension)

    async def cancel_reindex(self) -> int:
        return await reindex.cancel(self.conn)

    async def drop_stray_vectors(self) -> int:
        return await reindex.drop_stray(self.conn)

    async def stage_vectors(
        self, chunk_ids: Sequence[int], matrix: npt.NDArray[np.float32], model_id: str
    ) -> int:
        return await reindex.stage(self.conn, chunk_ids, matrix, model_id)

    async def swap_model(self, state: ReindexState) -> int:
        return await reindex.swap(self.conn, self.vectors, state)

    async def set_project(self, source: str, project: str | None) -> None:
        return await projects.set_project(self.conn, source, project)

    async def insert_many(self, table: str, rows: Sequence[dict[str, Any]]) -> None:
        return await import_sql.insert_many(self.conn, table, rows)

    async def insert_row(self, table: str, values: dict[str, Any]) -> tuple[int, int]:
        return await import_sql.insert_row(self.conn, table, values)

    async def set_references(
        self, table: str, column: str, key: str, pairs: Sequence[tuple[int, int]]
    ) -> None:
        return await import_sql.set_references(self.conn, table, column, key, pairs)

    async def replace_document(
        self, doc: NewDocument, chunks: Sequence[NewChunk], *, structure_links: bool = True
    ) -> int:
        return await writer.replace_document(
            self.conn, self.vectors, doc, chunks, structure_links=structure_links
        )

    async def replace_documents(
        self,
        docs: Sequence[tuple[NewDocument, Sequence[NewChunk]]],
        *,
        structure_links: bool = True,
    ) -> list[int]:
        return await writer.replace_documents(
            self.conn, self.vectors, docs, structure_links=structure_links
        )

    async def insert_vectors(
        self, rows: Sequence[tuple[int, npt.NDArray[np.float32], str, str]]
    ) -> None:
        return await writer.insert_vectors(self.conn, self.vectors, rows)

    async def delete_chunks(self, chunk_ids: Iterable[int]) -> None:
        return await writer.delete_chunks(self.conn, self.vectors, chunk_ids)

    async def delete_document(self, source: str) -> bool:
        return await writer.delete_document(self.conn, self.vectors, source)

    async def move_document(self, old: str, new: str) -> bool:
        return await writer.move_document(self.conn, self.vectors, old, new)

    async def record_error(self, source: str, error_type: str, message: str) -> None:
        return await writer.record_error(self.conn, source, error_type, message)

    async def clear_errors(self, source: str) -> None:
        return await writer.clear_errors(self.conn, source)

    async def count_use(self, chunk_ids: Sequence[int], *, retrieval: bool) -> None:
        return await writer.count_use(self.conn, chunk_ids, retrieval=retrieval)

    async def set_meta(self, key: str, value: str) -> None:
        return await writer.set_meta(self.conn, key, value)
