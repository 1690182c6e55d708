"""Edits of memories that keep their history (issue 8, part 1).

An edit rewrites the memory's chunk in place, so its id, its links and its counters stay, and
first copies the version it replaces into `chunk_history`. The history goes when the memory is
forgotten (foreign-key cascade). The memory's source names the hash of its current text (as
`remember` names it), so remembering the new text again finds the edited memory.
"""

from __future__ import annotations

import json
import time
from typing import Any

import aiosqlite
import numpy as np
import numpy.typing as npt

from recalld import limits
from recalld.errors import IngestError, NotFoundError
from recalld.storage import records
from recalld.storage.records import MemoryEdit
from recalld.storage.sqlite import vectors
from recalld.storage.sqlite.vectors import VectorIndex

M004_SQL = """
CREATE TABLE chunk_history (
    id INTEGER PRIMARY KEY,
    chunk_id INTEGER NOT NULL REFERENCES chunks(id) ON DELETE CASCADE,
    version INTEGER NOT NULL,
    text TEXT NOT NULL,
    tags TEXT NOT NULL,
    memory_type TEXT,
    importance REAL NOT NULL,
    event_time REAL,
    valid_from REAL NOT NULL,
    replaced_at REAL NOT NULL,
    UNIQUE (chunk_id, version)
);
-- `auto` links are made by ingest (parent, temporal, similar, supersedes), `user` links over
-- the API; re-ingesting a document rebuilds only its own auto links.
ALTER TABLE links ADD COLUMN origin TEXT NOT NULL DEFAULT 'user';
"""


async def _fetchall(conn: aiosqlite.Connection, sql: str, params: Any = ()) -> list[Any]:
    async with conn.execute(sql, params) as cursor:
        return list(await cursor.fetchall())


async def current_version(conn: aiosqlite.Connection, chunk_id: int) -> int:
    """The version number of a memory's current text (1 for a memory never edited)."""
    rows = await _fetchall(
        conn, "SELECT max(version) FROM chunk_history WHERE chunk_id = ?", (chunk_id,)
    )
    return int(rows[0][0] or 0) + 1


async def update_memory(
    conn: aiosqlite.Connection,
    index: VectorIndex | None,
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
    """`contract.Writer.update_memory` on SQLite (`index`: the store's in-memory vectors)."""
    rows = await _fetchall(
        conn,
        "SELECT c.text, c.tags, c.memory_type, c.importance, c.event_time, c.created_at, "
        "c.document_id, c.kind, c.granularity, d.source FROM chunks c "
        "JOIN documents d ON d.id = c.document_id WHERE c.id = ?",
        (chunk_id,),
    )
    if not rows or rows[0][7] != "memory":
        raise NotFoundError(
            f"no memory with id {chunk_id}; only memories written with `remember` can be "
            "edited (edit a file's text in the file itself)",
            data={"id": chunk_id},
        )
    text, tags, memory_type, importance, event_time, created_at, doc_id, kind, gran, old = rows[0]
    if source != old:
        taken = await _fetchall(conn, "SELECT id FROM documents WHERE source = ?", (source,))
        if taken:
            raise IngestError(
                f"another memory already holds this text ({source}); forget one of them first",
                data={"source": source},
            )
    now = time.time()
    version = await current_version(conn, chunk_id)
    last = await _fetchall(
        conn, "SELECT max(replaced_at) FROM chunk_history WHERE chunk_id = ?", (chunk_id,)
    )
    await conn.execute(
        "INSERT INTO chunk_history (chunk_id, version, text, tags, memory_type, importance, "
        "event_time, valid_from, replaced_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            chunk_id,
            version,
            text,
            tags,
            memory_type,
            importance,
            event_time,
            last[0][0] or created_at,
            now,
        ),
    )
    await conn.execute(
        "UPDATE chunks SET text = ?, tags = ?, memory_type = ?, importance = ?, event_time = ?, "
        "content_hash = ?, token_count = ? WHERE id = ?",
        (
            *edit.applied(text, tags, memory_type, importance, event_time),
            chunk_hash,
            token_count,
            chunk_id,
        ),
    )
    await conn.execute(
        "UPDATE documents SET source = ?, content_hash = ?, updated_at = ? WHERE id = ?",
        (source, content_hash, now, doc_id),
    )
    if meta is not None:
        await conn.execute(
            "UPDATE chunks SET meta = ? WHERE id = ?",
            (json.dumps(meta, ensure_ascii=False, default=str), chunk_id),
        )
    if vector is not None:
        blob = np.ascontiguousarray(vector, dtype=np.float32).tobytes()
        await conn.execute("DELETE FROM chunks_vec WHERE chunk_id = ?", (chunk_id,))
        await conn.execute(
            "INSERT INTO chunks_vec (chunk_id, embedding, kind, granularity) VALUES (?, ?, ?, ?)",
            (chunk_id, blob, kind, gran),
        )
        await vectors.insert(conn, index, [(chunk_id, vector, kind, gran)], vector.shape[-1])
        # A reindex under way staged the old text's vector: let it embed the new text.
        await conn.execute("DELETE FROM reindex_vectors WHERE chunk_id = ?", (chunk_id,))
    return version + 1


async def history_of(conn: aiosqlite.Connection, chunk_id: int) -> list[dict[str, Any]]:
    """Every earlier version of a memory, oldest first."""
    rows = await _fetchall(
        conn,
        "SELECT version, text, tags, memory_type, importance, event_time, valid_from, "
        "replaced_at FROM chunk_history WHERE chunk_id = ? ORDER BY version",
        (chunk_id,),
    )
    return [
        {
            "version": r[0],
            "text": r[1],
            "tags": records.json_column(r[2], []),
            "memory_type": r[3],
            # A value JSON cannot carry is read as unknown (see `storage.values`).
            "importance": limits.number_or(r[4], 0.5),
            "event_time": limits.time_or_none(r[5]),
            "valid_from": limits.number_or(r[6], 0.0),
            "replaced_at": limits.number_or(r[7], 0.0),
        }
        for r in rows
    ]
