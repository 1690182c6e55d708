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


async def replace_document(
    conn: PgConn, doc: NewDocument, chunks: Sequence[NewChunk], *, structure_links: bool = True
) -> int:
    """Replace a document and its chunks in the caller's transaction.

    With `structure_links`, the document's `parent` and `temporal` links are made too; the
    chunks' auto links (`ingest.autolink`) are written in the same transaction.

    Returns:
        The document id.
    """
    now = time.time()
    await _lock_source(conn, doc.source)
    rows = await conn.fetch(
        "INSERT INTO documents (source, kind, format, content_hash, state, mtime, size, "
        "created_at, updated_at, os_user, host) "
        "VALUES (%s, %s, %s, %s, 'partial', %s, %s, %s, %s, %s, %s) "
        "ON CONFLICT (scope, source) DO UPDATE SET kind = excluded.kind, "
        "format = excluded.format, content_hash = excluded.content_hash, state = 'partial', "
        "mtime = excluded.mtime, size = excluded.size, updated_at = excluded.updated_at, "
        "written_by = current_user, os_user = excluded.os_user, host = excluded.host "
        "RETURNING id",
        [
            doc.source,
            doc.kind,
            doc.format,
            doc.content_hash,
            doc.mtime,
            doc.size,
            now,
            now,
            conn.writer.os_user,
            conn.writer.host,
        ],
    )
    doc_id = int(rows[0][0])
    existing = {
        (str(r[1]), str(r[2])): int(r[0])
        for r in await conn.fetch(
            "SELECT id, key, content_hash FROM chunks WHERE document_id = %s", [doc_id]
        )
    }
    kept, inserts, stale = chunk_rows(doc_id, doc, chunks, existing, now)
    await delete_chunks(conn, stale)
    await conn.run_many("UPDATE chunks SET position = %s, parent_id = NULL WHERE id = %s", kept)
    await conn.run_many(
        "INSERT INTO chunks (document_id, position, kind, granularity, key, text, "
        "content_hash, token_count, tags, memory_type, importance, event_time, "
        "created_at, meta) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        inserts,
    )
    ids_by_key = {
        str(r[0]): int(r[1])
        for r in await conn.fetch("SELECT key, id FROM chunks WHERE document_id = %s", [doc_id])
    }
    embedded, parents, found = chunk_links(chunks, ids_by_key)
    await insert_vectors(conn, embedded)
    await conn.run_many("UPDATE chunks SET parent_id = %s WHERE id = %s", parents)
    # Links in the same transaction, so a search never sees a document without them (issue 8).
    if structure_links:
        await links.rebuild_structure(conn, doc_id)
    await links.add(conn, found, origin="auto")
    await conn.run(
        "UPDATE documents SET state = 'complete', chunk_count = %s, updated_at = %s WHERE id = %s",
        [len(chunks), now, doc_id],
    )
    return doc_id


async def insert_vectors(conn: PgConn, rows: Sequence[tuple[Any, ...]]) -> None:
    """Store the vectors of new chunks `(chunk_id, vector, kind, granularity)` in the caller's
    transaction."""
    await conn.run_many(
        "INSERT INTO chunks_vec (chunk_id, embedding, kind, granularity) VALUES (%s, %s, %s, %s)",
        [(cid, np.ascontiguousarray(v, dtype=np.float32), k, g) for cid, v, k, g in rows],
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
    await conn.execute(
        "INSERT INTO meta (key, value) VALUES (%s, %s) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [key, value],
    )
