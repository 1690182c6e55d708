"""Every write on PostgreSQL: the `contract.Writer` operations `pg.access` calls.

Several daemons may write one database at once. A document's replacement first takes a
transaction-scoped advisory lock on its (scope, source), so two daemons ingesting the same file
run one after the other; the second sees the first's document, and the unique (scope, source)
and (document_id, key) constraints make a duplicate impossible even without the lock. Every
replacement records which role, OS user and host wrote the document.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from recalld.storage.pg import links
from recalld.storage.pg.handle import PgConn
from recalld.storage.records import NewChunk, NewDocument, chunk_links, chunk_rows


async def _lock_source(conn: PgConn, source: str) -> None:
    # 64-bit hash of scope and source; a collision only makes two sources wait for each other.
    await conn.run(
        "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
        [conn.writer.scope + "\x1f" + source],
    )


async def _document_id(conn: PgConn, source: str) -> int | None:
    rows = await conn.fetch(
        "SELECT id FROM documents WHERE source = %s AND scope = %s", [source, conn.writer.scope]
    )
    return int(rows[0][0]) if rows else None


# The `chunks` columns a new chunk is written with: `records.chunk_rows`' order, after the id
# (allocated up front, so parents and vectors can point at chunks before they are copied in).
_CHUNK_COLUMNS = (
    "id", "document_id", "position", "kind", "granularity", "key", "text", "content_hash",
    "token_count", "tags", "memory_type", "importance", "event_time", "created_at", "meta",
    "parent_id",
)  # fmt: skip
_VECTOR_COLUMNS = ("chunk_id", "embedding", "kind", "granularity")
_VECTOR_TYPES = ("int8", "halfvec", "text", "text")


async def replace_document(
    conn: PgConn, doc: NewDocument, chunks: Sequence[NewChunk], *, structure_links: bool = True
) -> int:
    """See `contract.Writer.replace_document` (auto links in the same transaction too).

    New chunks and their vectors go in by `COPY` with ids drawn from the identity sequence
    first, so a document costs about four round trips whatever its size, not one statement
    per chunk; the document row is written complete at once (the transaction makes it appear
    with its chunks or not at all).

    Returns:
        The document id.
    """
    now = time.time()
    # The source's lock and the document row in one statement: the row is produced only once
    # the lock is held.
    rows = await conn.fetch(
        "WITH locked AS (SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))) "
        "INSERT INTO documents (source, kind, format, content_hash, state, chunk_count, mtime, "
        "size, created_at, updated_at, os_user, host) "
        "SELECT %s::text, %s::text, %s::text, %s::text, 'complete', %s::integer, "
        "%s::double precision, %s::bigint, %s::double precision, %s::double precision, "
        "%s::text, %s::text FROM locked "
        "ON CONFLICT (scope, source) DO UPDATE SET kind = excluded.kind, "
        "format = excluded.format, content_hash = excluded.content_hash, state = 'complete', "
        "chunk_count = excluded.chunk_count, mtime = excluded.mtime, size = excluded.size, "
        "updated_at = excluded.updated_at, written_by = current_user, "
        "os_user = excluded.os_user, host = excluded.host "
        "RETURNING id",
        [
            conn.writer.scope + "\x1f" + doc.source,
            doc.source,
            doc.kind,
            doc.format,
            doc.content_hash,
            len(chunks),
            doc.mtime,
            doc.size,
            now,
            now,
            conn.writer.os_user,
            conn.writer.host,
        ],
    )
    doc_id = int(rows[0][0])
    # The stored chunks (read under the lock) and ids for the new ones, which are the chunks
    # with a vector (`chunk_rows`), in one statement.
    rows = await conn.fetch(
        "SELECT id, key, content_hash FROM chunks WHERE document_id = %s UNION ALL "
        "SELECT nextval(pg_get_serial_sequence('chunks', 'id')), NULL, NULL "
        "FROM generate_series(1, %s)",
        [doc_id, sum(c.vector is not None for c in chunks)],
    )
    stored = [r for r in rows if r[1] is not None]
    new_ids = sorted(int(r[0]) for r in rows if r[1] is None)
    existing = {(str(r[1]), str(r[2])): int(r[0]) for r in stored}
    kept, inserts, stale = chunk_rows(doc_id, doc, chunks, existing, now)
    await delete_chunks(conn, stale)
    await conn.run_many("UPDATE chunks SET position = %s, parent_id = NULL WHERE id = %s", kept)
    kept_ids = {cid for _, cid in kept}
    ids_by_key = {key: cid for (key, _), cid in existing.items() if cid in kept_ids}
    ids_by_key.update((str(row[4]), cid) for row, cid in zip(inserts, new_ids, strict=True))
    embedded, parents, found = chunk_links(chunks, ids_by_key)
    # New chunks carry their parent in the COPY (the foreign key is checked at the statement's
    # end, so a parent later in the same COPY is fine); kept chunks get theirs by UPDATE.
    parent_of = {child: parent for parent, child in parents}
    await conn.copy_rows(
        "chunks",
        _CHUNK_COLUMNS,
        ((cid, *row, parent_of.get(cid)) for row, cid in zip(inserts, new_ids, strict=True)),
    )
    await insert_vectors(conn, embedded)
    await conn.run_many(
        "UPDATE chunks SET parent_id = %s WHERE id = %s",
        [(parent, child) for parent, child in parents if child in kept_ids],
    )
    # Links in the same transaction, so a search never sees a document without them (issue 8).
    # A new document without parents or rounds has no structure links to make.
    has_structure = parents or any(c.draft.granularity == "round" for c in chunks)
    if structure_links and (stored or has_structure):
        await links.rebuild_structure(conn, doc_id, fresh=not stored)
    await links.add(conn, found, origin="auto")
    return doc_id


async def insert_vectors(conn: PgConn, rows: Sequence[tuple[Any, ...]]) -> None:
    """Store the vectors of new chunks `(chunk_id, vector, kind, granularity)` in the caller's
    transaction (binary `COPY`: float16s as they are stored)."""
    await conn.copy_rows(
        "chunks_vec",
        _VECTOR_COLUMNS,
        ((cid, np.ascontiguousarray(v, dtype=np.float32), k, g) for cid, v, k, g in rows),
        _VECTOR_TYPES,
    )


async def delete_chunks(conn: PgConn, chunk_ids: Iterable[int]) -> None:
    """Delete chunks; their vectors, links and history go with them by cascade."""
    ids = list(chunk_ids)
    if ids:
        # What the deleted chunks superseded becomes active again (unless something else holds it).
        targets = await links.status_targets(conn, ids)
        await conn.run("DELETE FROM chunks WHERE id = ANY(%s)", [ids])
        await links.refresh_status(conn, targets)


async def delete_document(conn: PgConn, source: str) -> bool:
    """Delete a document and everything that hangs off it. Returns whether it existed."""
    await _lock_source(conn, source)
    doc_id = await _document_id(conn, source)
    if doc_id is None:
        return False
    rows = await conn.fetch("SELECT id FROM chunks WHERE document_id = %s", [doc_id])
    await delete_chunks(conn, [int(r[0]) for r in rows])
    await conn.run("DELETE FROM documents WHERE id = %s", [doc_id])
    return True


async def move_document(conn: PgConn, old: str, new: str) -> bool:
    """Rename a document's source, replacing any document already at `new`."""
    for source in sorted((old, new)):  # one order, so two movers cannot deadlock
        await _lock_source(conn, source)
    doc_id = await _document_id(conn, old)
    if doc_id is None:
        return False
    await delete_document(conn, new)
    await conn.run(
        "UPDATE documents SET source = %s, updated_at = %s WHERE id = %s",
        [new, time.time(), doc_id],
    )
    return True


async def record_error(conn: PgConn, source: str, error_type: str, message: str) -> None:
    """Record why a source could not be ingested."""
    await conn.run(
        "INSERT INTO errors (source, error_type, message, at) VALUES (%s, %s, %s, %s)",
        [source, error_type, message, time.time()],
    )


async def replace_documents(
    conn: PgConn,
    docs: Sequence[tuple[NewDocument, Sequence[NewChunk]]],
    *,
    structure_links: bool = True,
) -> list[int]:
    """See `contract.Writer.replace_documents`: each document as `replace_document` writes it
    (a few round trips, whatever its size), then one statement for their errors."""
    ids = [
        await replace_document(conn, doc, chunks, structure_links=structure_links)
        for doc, chunks in docs
    ]
    if docs:
        await conn.run(
            "DELETE FROM errors WHERE source = ANY(%s)", [[doc.source for doc, _ in docs]]
        )
    return ids


async def clear_errors(conn: PgConn, source: str) -> None:
    """Forget the errors of a source that has now been ingested."""
    await conn.run("DELETE FROM errors WHERE source = %s", [source])


async def count_use(conn: PgConn, chunk_ids: Sequence[int], *, retrieval: bool) -> None:
    """Count retrievals (returned by search) or accesses (read explicitly) apart."""
    column = "retrieval" if retrieval else "access"
    last = "last_retrieved_at" if retrieval else "last_accessed_at"
    now = time.time()
    await conn.run_many(
        f"UPDATE chunks SET {column}_count = {column}_count + 1, {last} = %s WHERE id = %s",
        [(now, cid) for cid in chunk_ids],
    )


async def set_meta(conn: PgConn, key: str, value: str) -> None:
    """Set one value of the store's `meta` table."""
    await conn.run(  # `%s` placeholders: `run`, not `execute` (which takes `?`)
        "INSERT INTO meta (key, value) VALUES (%s, %s) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [key, value],
    )
