"""Every write to the store, run by the single writer connection inside one transaction.

Documents are replaced atomically: the old chunks that changed go, the new ones arrive with
their vectors, and the document turns `complete`, all in one `BEGIN IMMEDIATE` transaction, so
a search never sees half a document. Chunks whose key and content hash are unchanged keep their
row, vector and counters, which is how a grown conversation log only adds its new rounds.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import aiosqlite
import numpy as np
import numpy.typing as npt

from recalld.storage.records import (
    ChunkRow,
    Link,
    NewChunk,
    NewDocument,
    chunk_links,
    chunk_rows,
)
from recalld.storage.sqlite import links, vectors
from recalld.storage.sqlite.on_thread import RawConnection, on_thread
from recalld.storage.sqlite.vectors import VectorIndex

# Forgets a source's errors: by itself (`clear_errors`) or as its documents are written.
_CLEAR_ERRORS = "DELETE FROM errors WHERE source = ?"


async def _fetchall(conn: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    # One hop to the connection's thread (execute, fetch and close there), not three.
    return list(await conn.execute_fetchall(sql, params))


async def replace_document(
    conn: aiosqlite.Connection,
    index: VectorIndex | None,
    doc: NewDocument,
    chunks: Sequence[NewChunk],
    *,
    structure_links: bool = True,
) -> int:
    """`contract.Writer.replace_document` on SQLite (`index`: the store's in-memory vectors)."""
    [doc_id] = await _replace(conn, index, [(doc, chunks)], structure_links, clear_errors=False)
    return doc_id


async def replace_documents(
    conn: aiosqlite.Connection,
    index: VectorIndex | None,
    docs: Sequence[tuple[NewDocument, Sequence[NewChunk]]],
    *,
    structure_links: bool = True,
) -> list[int]:
    """`contract.Writer.replace_documents` on SQLite (`index`: the store's in-memory vectors)."""
    return await _replace(conn, index, docs, structure_links, clear_errors=True)


async def _replace(
    conn: aiosqlite.Connection,
    index: VectorIndex | None,
    docs: Sequence[tuple[NewDocument, Sequence[NewChunk]]],
    structure_links: bool,
    *,
    clear_errors: bool,
) -> list[int]:
    """Write documents in order; their ids. Documents with no stale chunks (every new one) go
    in one trip to the connection's thread together (`on_thread`; a trip each, and another
    for the errors, cost ~0.18 CPU s of 1,000 SciFact abstracts' ingest). One whose changed
    chunks must go first takes a few trips of its own, and auto links one each."""
    ids: list[int] = []
    while len(ids) < len(docs):
        now = time.time()
        written, begun = await on_thread(
            conn,
            partial(
                _begin_and_fill_each,
                index=index,
                docs=docs[len(ids) :],
                now=now,
                structure_links=structure_links,
                clear_errors=clear_errors,
            ),
        )
        for doc_id, found in written:
            # In the same transaction, so a search never sees a document without its links
            # (issue 8). Links only point at chunks written before, so they can wait for the
            # documents after theirs.
            await links.add(conn, found, origin="auto")
            ids.append(doc_id)
        if begun is not None:
            _, chunks = docs[len(ids)]
            await delete_chunks(conn, index, begun.stale)
            found = await on_thread(
                conn,
                partial(
                    _fill,
                    index=index,
                    begun=begun,
                    chunks=chunks,
                    now=now,
                    structure_links=structure_links,
                ),
            )
            await links.add(conn, found, origin="auto")
            ids.append(begun.doc_id)
    return ids


@dataclass(frozen=True, slots=True)
class _Begun:
    """A document's row written (`partial`) and what its chunks make of the stored ones."""

    doc_id: int
    fresh: bool  # it had no chunks stored
    kept: list[tuple[int, int]]
    inserts: list[ChunkRow]
    stale: list[int]


def _begin(raw: RawConnection, doc: NewDocument, chunks: Sequence[NewChunk], now: float) -> _Begun:
    found = raw.execute("SELECT id FROM documents WHERE source = ?", (doc.source,)).fetchall()
    if found:
        doc_id = int(found[0][0])
        raw.execute(
            "UPDATE documents SET kind = ?, format = ?, content_hash = ?, state = 'partial', "
            "mtime = ?, size = ?, updated_at = ? WHERE id = ?",
            (doc.kind, doc.format, doc.content_hash, doc.mtime, doc.size, now, doc_id),
        )
    else:
        cursor = raw.execute(
            "INSERT INTO documents (source, kind, format, content_hash, state, mtime, size, "
            "created_at, updated_at) VALUES (?, ?, ?, ?, 'partial', ?, ?, ?, ?)",
            (doc.source, doc.kind, doc.format, doc.content_hash, doc.mtime, doc.size, now, now),
        )
        doc_id = int(cursor.lastrowid)
    existing = {
        (row[1], row[2]): int(row[0])
        for row in raw.execute(
            "SELECT id, key, content_hash FROM chunks WHERE document_id = ?", (doc_id,)
        ).fetchall()
    }
    kept, inserts, stale = chunk_rows(doc_id, doc, chunks, existing, now)
    return _Begun(doc_id, not existing, kept, inserts, stale)


def _fill(
    raw: RawConnection,
    index: VectorIndex | None,
    begun: _Begun,
    chunks: Sequence[NewChunk],
    now: float,
    structure_links: bool,
) -> list[Link]:
    """Write the chunks of a begun document (its stale ones gone) and mark it `complete`;
    the auto links still to add."""
    doc_id = begun.doc_id
    # Statements go out batched, a few per document rather than one per chunk.
    if begun.kept:
        raw.executemany("UPDATE chunks SET position = ?, parent_id = NULL WHERE id = ?", begun.kept)
    if begun.inserts:
        raw.executemany(
            "INSERT INTO chunks (document_id, position, kind, granularity, key, text, "
            "content_hash, token_count, tags, memory_type, importance, event_time, "
            "created_at, meta) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            begun.inserts,
        )
    # Keys are unique within a document, so they map the new rows back to their ids.
    ids_by_key = {
        str(row[0]): int(row[1])
        for row in raw.execute(
            "SELECT key, id FROM chunks WHERE document_id = ?", (doc_id,)
        ).fetchall()
    }
    embedded, parents, found = chunk_links(chunks, ids_by_key)
    insert_vector_rows(raw, index, embedded)
    if parents:
        raw.executemany("UPDATE chunks SET parent_id = ? WHERE id = ?", parents)
    # A new document without parents or rounds has no structure links to make.
    if structure_links and (
        not begun.fresh or parents or any(c.draft.granularity == "round" for c in chunks)
    ):
        links.rebuild_structure_rows(raw, doc_id, fresh=begun.fresh)
    raw.execute(
        "UPDATE documents SET state = 'complete', chunk_count = ?, updated_at = ? WHERE id = ?",
        (len(chunks), now, doc_id),
    )
    return found


def _begin_and_fill_each(
    raw: RawConnection,
    index: VectorIndex | None,
    docs: Sequence[tuple[NewDocument, Sequence[NewChunk]]],
    now: float,
    structure_links: bool,
    clear_errors: bool,
) -> tuple[list[tuple[int, list[Link]]], _Begun | None]:
    """`_begin` and `_fill` each document in turn, up to the first whose stale chunks must go
    first: `(document id, auto links still to add)` of those filled, and that one begun (None
    when every document was filled)."""
    written: list[tuple[int, list[Link]]] = []
    for doc, chunks in docs:
        begun = _begin(raw, doc, chunks, now)
        if clear_errors:
            raw.execute(_CLEAR_ERRORS, (doc.source,))
        if begun.stale:
            return written, begun
        written.append((begun.doc_id, _fill(raw, index, begun, chunks, now, structure_links)))
    return written, None


async def insert_vectors(
    conn: aiosqlite.Connection,
    index: VectorIndex | None,
    rows: Sequence[tuple[int, npt.NDArray[np.float32], str, str]],
) -> None:
    """Store the vectors of new chunks `(chunk_id, vector, kind, granularity)` in the caller's
    transaction: the sqlite-vec table and the cascade's codes and float copies."""
    await on_thread(conn, partial(insert_vector_rows, index=index, rows=rows))


def insert_vector_rows(
    raw: RawConnection,
    index: VectorIndex | None,
    rows: Sequence[tuple[int, npt.NDArray[np.float32], str, str]],
) -> None:
    """`insert_vectors` on the connection's own thread (`on_thread`), within a larger write."""
    # One executemany per table rather than a statement per chunk (issue 7: bulk ingest).
    raw.executemany(
        "INSERT INTO chunks_vec (chunk_id, embedding, kind, granularity) VALUES (?, ?, ?, ?)",
        [
            (cid, np.ascontiguousarray(vector, dtype=np.float32).tobytes(), kind, granularity)
            for cid, vector, kind, granularity in rows
        ],
    )
    dimension = rows[0][1].shape[-1] if rows else 0
    vectors.insert_rows(raw, index, rows, dimension)


async def delete_chunks(
    conn: aiosqlite.Connection, index: VectorIndex | None, chunk_ids: Iterable[int]
) -> None:
    """Delete chunks with their vectors; FTS rows go with them by trigger, links by cascade."""
    params = [(cid,) for cid in chunk_ids]
    if not params:
        return
    # What the deleted chunks superseded becomes active again (unless something else holds it).
    targets = await links.status_targets(conn, [cid for (cid,) in params])
    # vec0 tables take no part in foreign keys, so their rows are removed explicitly.
    await conn.executemany("DELETE FROM chunks_vec WHERE chunk_id = ?", params)
    await vectors.delete(conn, index, [cid for (cid,) in params])
    await conn.executemany("DELETE FROM chunks WHERE id = ?", params)
    await links.refresh_status(conn, targets)


async def delete_document(
    conn: aiosqlite.Connection, index: VectorIndex | None, source: str
) -> bool:
    """Delete a document and everything that hangs off it. Returns whether it existed."""
    rows = await _fetchall(conn, "SELECT id FROM documents WHERE source = ?", (source,))
    if not rows:
        return False
    doc_id = int(rows[0][0])
    chunk_ids = [
        int(r[0])
        for r in await _fetchall(conn, "SELECT id FROM chunks WHERE document_id = ?", (doc_id,))
    ]
    await delete_chunks(conn, index, chunk_ids)
    await conn.execute("DELETE FROM documents WHERE id = ?", (doc_id,))
    return True


async def move_document(
    conn: aiosqlite.Connection, index: VectorIndex | None, old: str, new: str
) -> bool:
    """Rename a document's source, replacing any document already at `new`."""
    rows = await _fetchall(conn, "SELECT id FROM documents WHERE source = ?", (old,))
    if not rows:
        return False
    await delete_document(conn, index, new)
    await conn.execute(
        "UPDATE documents SET source = ?, updated_at = ? WHERE id = ?",
        (new, time.time(), int(rows[0][0])),
    )
    return True


async def record_error(
    conn: aiosqlite.Connection, source: str, error_type: str, message: str
) -> None:
    """Record why a source could not be ingested."""
    await conn.execute(
        "INSERT INTO errors (source, error_type, message, at) VALUES (?, ?, ?, ?)",
        (source, error_type, message, time.time()),
    )


async def clear_errors(conn: aiosqlite.Connection, source: str) -> None:
    """Forget the errors of a source that has now been ingested."""
    await conn.execute(_CLEAR_ERRORS, (source,))


async def count_use(
    conn: aiosqlite.Connection, chunk_ids: Sequence[int], *, retrieval: bool
) -> None:
    """Count retrievals (returned by search) or accesses (read explicitly) apart, as MemX does."""
    column = "retrieval" if retrieval else "access"
    last = "last_retrieved_at" if retrieval else "last_accessed_at"
    await conn.executemany(
        f"UPDATE chunks SET {column}_count = {column}_count + 1, {last} = ? WHERE id = ?",
        [(time.time(), cid) for cid in chunk_ids],
    )


async def set_meta(conn: aiosqlite.Connection, key: str, value: str) -> None:
    """Set one value of the store's `meta` table (self-calibration records its choice there)."""
    await conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))
