"""Memory edits that keep their history, on PostgreSQL (`contract.Writer.update_memory`, called
by `pg.access`)."""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import numpy.typing as npt

from recalld.errors import IngestError, NotFoundError
from recalld.storage.pg.handle import PgConn
from recalld.storage.records import MemoryEdit


async def current_version(conn: PgConn, chunk_id: int) -> int:
    """The version number of a memory's current text (1 for a memory never edited)."""
    rows = await conn.fetch(
        "SELECT max(version) FROM chunk_history WHERE chunk_id = %s", [chunk_id]
    )
    return int(rows[0][0] or 0) + 1


async def update_memory(
    conn: PgConn,
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
    """`contract.Writer.update_memory` on PostgreSQL."""
    rows = await conn.fetch(
        "SELECT c.text, c.tags, c.memory_type, c.importance, c.event_time, c.created_at, "
        "c.document_id, c.kind, c.granularity, d.source FROM chunks c "
        "JOIN documents d ON d.id = c.document_id WHERE c.id = %s FOR UPDATE OF c",
        [chunk_id],
    )
    if not rows or rows[0][7] != "memory":
        raise NotFoundError(
            f"no memory with id {chunk_id}; only memories written with `remember` can be "
            "edited (edit a file's text in the file itself)",
            data={"id": chunk_id},
        )
    text, tags, memory_type, importance, event_time, created_at, doc_id, kind, gran, old = rows[0]
    if source != old:
        taken = await conn.fetch(
            "SELECT id FROM documents WHERE source = %s AND scope = %s",
            [source, conn.writer.scope],
        )
        if taken:
            raise IngestError(
                f"another memory already holds this text ({source}); forget one of them first",
                data={"source": source},
            )
    now = time.time()
    version = await current_version(conn, chunk_id)
    last = await conn.fetch(
        "SELECT max(replaced_at) FROM chunk_history WHERE chunk_id = %s", [chunk_id]
    )
    await conn.run(
        "INSERT INTO chunk_history (chunk_id, version, text, tags, memory_type, importance, "
        "event_time, valid_from, replaced_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
        [
            chunk_id,
            version,
            text,
            tags,
            memory_type,
            importance,
            event_time,
            last[0][0] or created_at,
            now,
        ],
    )
    await conn.run(
        "UPDATE chunks SET text = %s, tags = %s, memory_type = %s, importance = %s, "
        "event_time = %s, content_hash = %s, token_count = %s WHERE id = %s",
        [
            *edit.applied(text, tags, memory_type, importance, event_time),
            chunk_hash,
            token_count,
            chunk_id,
        ],
    )
    await conn.run(
        "UPDATE documents SET source = %s, content_hash = %s, updated_at = %s, "
        "written_by = current_user, os_user = %s, host = %s WHERE id = %s",
        [source, content_hash, now, conn.writer.os_user, conn.writer.host, doc_id],
    )
    if meta is not None:
        await conn.run(
            "UPDATE chunks SET meta = %s WHERE id = %s",
            [json.dumps(meta, ensure_ascii=False, default=str), chunk_id],
        )
    if vector is not None:
        await conn.run(
            "INSERT INTO chunks_vec (chunk_id, embedding, kind, granularity) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT (chunk_id) DO UPDATE "
            "SET embedding = excluded.embedding",
            [chunk_id, np.ascontiguousarray(vector, dtype=np.float32), kind, gran],
        )
        # A reindex under way staged the old text's vector: let it embed the new text.
        await conn.run("DELETE FROM reindex_vectors WHERE chunk_id = %s", [chunk_id])
    return version + 1


async def history_of(conn: PgConn, chunk_id: int) -> list[dict[str, Any]]:
    """Every earlier version of a memory, oldest first."""
    rows = await conn.fetch(
        "SELECT version, text, tags, memory_type, importance, event_time, valid_from, "
        "replaced_at FROM chunk_history WHERE chunk_id = %s ORDER BY version",
        [chunk_id],
    )
    return [
        {
            "version": r[0],
            "text": r[1],
            "tags": json.loads(r[2]),
            "memory_type": r[3],
            "importance": r[4],
            "event_time": r[5],
            "valid_from": r[6],
            "replaced_at": r[7],
        }
        for r in rows
    ]
