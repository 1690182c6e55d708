"""`check --repair`: restore the invariants `storage.sqlite.check` verifies, losing no user data.

What each broken invariant gets (issue 6):

- chunk whose document is gone: a memory (kind `memory`) gets its document row back; other
  chunks go, and their file is ingested again by the next reconcile;
- vector whose chunk is gone: deleted;
- chunk without a vector: re-embedded with the store's model, in batches;
- FTS rows missing, extra or inconsistent: the index is rebuilt from the chunks (FTS5
  `rebuild`);
- wrong `chunk_count`: recounted;
- vector cascade tables out of step: refilled from `chunks_vec`;
- `partial` document: a memory or text source is completed in place; a file is listed in
  `reingest`, and the caller ingests it again (or removes it if the file is gone);
- `PRAGMA integrity_check` failures: `REINDEX`; whatever remains is reported, not guessed at;
- model / dimension mismatch: reported only, as it needs every chunk re-embedded;
- values that cannot be read back (`storage.values`: an `inf` event time, text that is not
  UTF-8): reset to their column's neutral value (an unknown time, importance 0.5, ...);
- a reindex's staged vectors without a chunk, of the wrong size, or left without a reindex in
  progress: dropped (a running reindex embeds the chunks again); a sound reindex is left alone.

Structural fixes run in one write transaction. Embedding runs between transactions, so a
daemon keeps serving and ingesting while a large store is repaired; every batch re-checks in
its own transaction that its chunks still exist and still lack a vector.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import aiosqlite
import numpy as np

from recalld.errors import EmbeddingError
from recalld.storage.contract import Embed
from recalld.storage.records import memory_source
from recalld.storage.repair_report import RepairReport
from recalld.storage.sqlite import reindex, values, vectors, writer
from recalld.storage.sqlite.vectors import VectorIndex

if TYPE_CHECKING:  # the store calls `repair_store` (`SqliteStore.repair`)
    from recalld.storage.sqlite.store import SqliteStore

logger = logging.getLogger(__name__)

EMBED_BATCH = 256
_FTS_PROBLEMS = frozenset({"chunks_without_fts", "orphan_fts_rows", "fts_parity", "fts_integrity"})


async def _rows(conn: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    async with conn.execute(sql, params) as cursor:
        return list(await cursor.fetchall())


async def _count(conn: aiosqlite.Connection, sql: str) -> int:
    return int((await _rows(conn, sql))[0][0])


async def _adopt_orphans(
    conn: aiosqlite.Connection, index: VectorIndex | None, report: RepairReport
) -> None:
    """Give orphan memories their document back; delete other orphan chunks."""
    rows = await _rows(
        conn,
        "SELECT c.id, c.document_id, c.kind, c.text, c.created_at FROM chunks c WHERE NOT EXISTS "
        "(SELECT 1 FROM documents d WHERE d.id = c.document_id) ORDER BY c.document_id, c.id",
    )
    groups: dict[int, list[Any]] = {}
    for row in rows:
        groups.setdefault(int(row[1]), []).append(row)
    doomed: list[int] = []
    adopted = 0
    for doc_id, chunks in groups.items():
        first = chunks[0]
        source = memory_source(str(first[3]))
        lone_memory = len(chunks) == 1 and first[2] == "memory"
        if lone_memory and not await _rows(
            conn, "SELECT 1 FROM documents WHERE source = ?", (source,)
        ):
            digest = hashlib.sha256(str(first[3]).strip().encode()).hexdigest()
            await conn.execute(
                "INSERT INTO documents (id, source, kind, format, content_hash, state, "
                "chunk_count, created_at, updated_at) "
                "VALUES (?, ?, 'memory', 'memory', ?, 'complete', 1, ?, ?)",
                (doc_id, source, digest, first[4], first[4]),
            )
            adopted += 1
        else:
            # A file's chunks without their document: the reconcile finds the file unknown and
            # ingests it again; a memory whose text is stored elsewhere is a duplicate.
            doomed.extend(int(c[0]) for c in chunks)
    await writer.delete_chunks(conn, index, doomed)
    report.did("orphan_memories_restored", adopted, "memories given back their document row")
    report.did("orphan_chunks_deleted", len(doomed), "chunks without a document deleted")


async def _structural(
    conn: aiosqlite.Connection, index: VectorIndex | None, failed: set[str], report: RepairReport
) -> None:
    """Everything that needs no model, in the caller's write transaction."""
    fts_broken = bool(failed & _FTS_PROBLEMS)
    triggers: list[Any] = []
    if fts_broken:
        # A broken index cannot take the delete trigger's edits (FTS5 reports corruption when
        # asked to remove what it does not hold), so the triggers are set aside while chunks
        # are deleted, and the index is rebuilt from the chunks afterwards. DDL is
        # transactional in SQLite: a failure restores them with everything else.
        triggers = await _rows(
            conn,
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'chunks' "
            "AND sql LIKE '%chunks_fts%'",
        )
        for name, _ in triggers:
            await conn.execute(f'DROP TRIGGER "{name}"')  # a name from the schema itself
    orphans = await _rows(
        conn,
        "SELECT chunk_id FROM chunks_vec v WHERE NOT EXISTS "
        "(SELECT 1 FROM chunks c WHERE c.id = v.chunk_id)",
    )
    ids = [int(r[0]) for r in orphans]
    await conn.executemany("DELETE FROM chunks_vec WHERE chunk_id = ?", [(i,) for i in ids])
    await vectors.delete(conn, index, ids)
    report.did("orphan_vectors_deleted", len(ids), "vectors without a chunk deleted")
    await _adopt_orphans(conn, index, report)
    if "reindex" in failed:
        report.did("reindex_rows_dropped", await reindex.drop_stray(conn), "bad staged vectors")
    if fts_broken:
        for _, sql in triggers:
            await conn.execute(sql)
        await conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild')")
        chunks = await _count(conn, "SELECT count(*) FROM chunks")
        report.did("fts_rebuilt", max(chunks, 1), "full-text index rebuilt from the chunks")
    cursor = await conn.execute(
        "UPDATE documents SET chunk_count = "
        "(SELECT count(*) FROM chunks c WHERE c.document_id = documents.id) "
        "WHERE chunk_count != (SELECT count(*) FROM chunks c WHERE c.document_id = documents.id)"
    )
    report.did("chunk_counts_fixed", max(cursor.rowcount, 0), "document chunk counts recounted")
    if "integrity_check" in failed:
        # Rebuilds every index b-tree from its table: the usual cure for "missing from index".
        await conn.execute("REINDEX")
        report.did("reindexed", 1, "SQLite indexes rebuilt (REINDEX)")


async def _missing_vectors(store: SqliteStore, after: int) -> list[Any]:
    async def query(conn: aiosqlite.Connection) -> list[Any]:
        return await _rows(
            conn,
            "SELECT c.id, c.text, c.kind, c.granularity FROM chunks c WHERE c.id > ? AND NOT "
            "EXISTS (SELECT 1 FROM chunks_vec v WHERE v.chunk_id = c.id) ORDER BY c.id LIMIT ?",
            (after, EMBED_BATCH),
        )

    return await store.read_conn(query)


async def _reembed(store: SqliteStore, embed: Embed, report: RepairReport) -> None:
    """Embed chunks that lost their vector, one batch per transaction."""
    total = 0
    after = -1
    while batch := await _missing_vectors(store, after):
        # Chunk ids only go up: a damaged index that hands back ids already done ends the
        # pass rather than re-embedding them for ever (issue 18).
        if max(int(r[0]) for r in batch) <= after:
            report.unrepaired.append(
                {
                    "name": "chunks_without_vector",
                    "detail": "the chunk table returned rows out of order (a damaged index); "
                    "stop recalld and run `recalld check --offline --repair` to rebuild it",
                }
            )
            break
        after = max(int(r[0]) for r in batch)
        found = await embed([str(r[1]) for r in batch])
        if found.shape != (len(batch), store.dimension):
            raise EmbeddingError(
                f"the model returned {found.shape} vectors for {len(batch)} chunks of "
                f"{store.dimension} dims; is embed.model the store's model?"
            )

        async def insert(
            conn: aiosqlite.Connection, batch: list[Any] = batch, found: Any = found
        ) -> int:
            rows = []
            for row, vector in zip(batch, found, strict=True):
                # Re-checked inside the transaction: an ingest may have replaced the chunk.
                still = await _rows(
                    conn,
                    "SELECT 1 FROM chunks c WHERE c.id = ? AND NOT EXISTS "
                    "(SELECT 1 FROM chunks_vec v WHERE v.chunk_id = c.id)",
                    (int(row[0]),),
                )
                if still:
                    rows.append((int(row[0]), np.asarray(vector, np.float32), row[2], row[3]))
            await conn.executemany(
                "INSERT INTO chunks_vec (chunk_id, embedding, kind, granularity) "
                "VALUES (?, ?, ?, ?)",
                [(cid, v.tobytes(), kind, gran) for cid, v, kind, gran in rows],
            )
            await vectors.insert(conn, store.vectors, rows, store.dimension)
            return len(rows)

        total += await store.write_conn(insert)
    report.did("vectors_reembedded", total, "chunks re-embedded with the store's model")


async def _finish(
    conn: aiosqlite.Connection,
    index: VectorIndex | None,
    dimension: int,
    failed: set[str],
    report: RepairReport,
) -> None:
    """Mirror tables and partial documents, once every chunk has its vector."""
    if "vector_index" in failed:
        # The repair's own deletes and inserts keep the mirror in step; this is for a mirror
        # that was out of step before.
        count = await vectors.rebuild(conn, index, dimension)
        report.did("vector_index_rebuilt", max(count, 1), "vector index refilled from chunks_vec")
    partial = await _rows(
        conn,
        "SELECT d.id, d.source, (SELECT count(*) FROM chunks c WHERE c.document_id = d.id AND "
        "NOT EXISTS (SELECT 1 FROM chunks_vec v WHERE v.chunk_id = c.id)) "
        "FROM documents d WHERE d.state = 'partial'",
    )
    completed = 0
    for doc_id, source, unembedded in partial:
        if os.path.isabs(str(source)):
            report.reingest.append(str(source))
        elif not unembedded:
            # No file to read again: the chunks are all there is, and they are whole now.
            await conn.execute(
                "UPDATE documents SET state = 'complete', updated_at = ? WHERE id = ?",
                (time.time(), int(doc_id)),
            )
            completed += 1
    report.did("partial_completed", completed, "memories and texts marked complete in place")
    report.did("partial_to_reingest", len(report.reingest), "file documents to ingest again")


async def repair_store(store: SqliteStore, embed: Embed | None, failed: set[str]) -> RepairReport:
    """Restore the invariants behind the `failed` check names (see `check.failed`).

    Args:
        store: The open store (the daemon's, or one opened offline).
        embed: Embeds texts with the store's model; None: chunks without a vector stay so and
            are reported.
        failed: The checks that failed; structural checks are found again inside the repair's
            own transaction, so a report a little out of date does no harm.

    Returns:
        What was done, the file documents to re-ingest, and what could not be repaired.
    """
    report = RepairReport()
    if "model" in failed:
        report.unrepaired.append(
            {
                "name": "model",
                "detail": "the vector table does not match the stored model; every chunk must "
                "be re-embedded: set embed.model back to the store's model",
            }
        )
        return report
    await store.write_conn(lambda c: _structural(c, store.vectors, failed, report))
    if "unreadable_values" in failed:
        found = await asyncio.to_thread(values.scan_path, store.path)
        cleared = await store.write_conn(lambda c: values.clear(c, found))
        report.did("values_cleared", cleared, "unreadable values reset (an unknown time, ...)")
    if embed is not None:
        try:
            await _reembed(store, embed, report)
        except EmbeddingError as exc:
            # What was re-embedded is committed; the rest waits for the model to answer.
            report.unrepaired.append({"name": "chunks_without_vector", "detail": exc.message})
    else:
        missing = await store.read_conn(
            lambda c: _count(
                c,
                "SELECT count(*) FROM chunks c WHERE NOT EXISTS "
                "(SELECT 1 FROM chunks_vec v WHERE v.chunk_id = c.id)",
            )
        )
        if missing:
            report.unrepaired.append(
                {"name": "chunks_without_vector", "detail": "no embedding model to re-embed"}
            )
    await store.write_conn(lambda c: _finish(c, store.vectors, store.dimension, failed, report))
    return report
