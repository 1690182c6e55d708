"""Online re-embedding in the store: the staging table, the state in `meta`, the swap.

While a reindex runs, the new model's vectors collect in `reindex_vectors` (migration m003), a
plain table keyed by chunk id whose rows go with their chunk (`ON DELETE CASCADE`), so a chunk
deleted or replaced during the reindex leaves nothing stale behind and a new chunk simply shows
up as missing. `chunks_vec` stays the live index, filled by ingest with the old model, until
`swap` replaces it in one transaction. Nothing here embeds: `ingest.reindex` does that between
transactions, and this module only reads and writes rows.

Why a plain table and a copy at the swap, rather than a second vec0 table renamed into place:
sqlite-vec 0.1.9 does not rename its shadow tables (`ALTER TABLE ... RENAME` leaves a table
that fails with "no such table: main.<new>_rowids"), and copying into a fresh vec0 table runs
at ~38k rows/s here, which is a short write lock even at 100k chunks.

The state lives in `meta` (`reindex_spec`, `reindex_model_id`, `reindex_dimension`,
`reindex_started_at`), so a daemon killed half-way resumes from the rows already staged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import aiosqlite
import numpy as np
import numpy.typing as npt

from recalld.errors import ReindexError
from recalld.storage import shared_sql
from recalld.storage.records import SPEC_KEY, STATE_KEYS, ReindexState, state_from_meta
from recalld.storage.sqlite import schema, vectors
from recalld.storage.sqlite.vectors import VectorIndex

logger = logging.getLogger(__name__)

M003_SQL = """
CREATE TABLE reindex_vectors (
    chunk_id INTEGER PRIMARY KEY REFERENCES chunks(id) ON DELETE CASCADE,
    embedding BLOB NOT NULL
);
"""


async def _meta(conn: aiosqlite.Connection) -> dict[str, str]:
    async with conn.execute("SELECT key, value FROM meta") as cursor:
        return {str(r[0]): str(r[1]) for r in await cursor.fetchall()}


async def _scalar(conn: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()) -> int:
    async with conn.execute(sql, params) as cursor:
        row = await cursor.fetchone()
    return int(row[0]) if row is not None else 0


async def read_state(conn: aiosqlite.Connection) -> ReindexState | None:
    """The reindex in progress (any connection), or None."""
    return state_from_meta(await _meta(conn))


async def _set_meta(conn: aiosqlite.Connection, values: dict[str, str]) -> None:
    await conn.executemany(
        "INSERT INTO meta (key, value) VALUES (?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        list(values.items()),
    )


async def begin(
    conn: aiosqlite.Connection, spec: str, model_id: str, dimension: int
) -> ReindexState:
    """Record a new reindex and empty the staging table (in the caller's transaction)."""
    state = ReindexState(spec, model_id, dimension, time.time())
    await conn.execute("DELETE FROM reindex_vectors")
    await _set_meta(
        conn,
        {
            "reindex_spec": spec,
            "reindex_model_id": model_id,
            "reindex_dimension": str(dimension),
            "reindex_started_at": repr(state.started_at),
        },
    )
    return state


async def cancel(conn: aiosqlite.Connection) -> int:
    """Forget the reindex and drop its staged vectors. Returns how many were dropped."""
    dropped = await _scalar(conn, "SELECT count(*) FROM reindex_vectors")
    await conn.execute("DELETE FROM reindex_vectors")
    await conn.executemany("DELETE FROM meta WHERE key = ?", [(k,) for k in STATE_KEYS])
    return dropped


async def drop_stray(conn: aiosqlite.Connection) -> int:
    """Drop staged vectors that cannot be used: no chunk, the wrong size, or no reindex in
    progress (for `check --repair`). Returns how many went."""
    state = await read_state(conn)
    if state is None:
        cursor = await conn.execute("DELETE FROM reindex_vectors")
    else:
        cursor = await conn.execute(
            "DELETE FROM reindex_vectors WHERE length(embedding) != ? OR NOT EXISTS "
            "(SELECT 1 FROM chunks c WHERE c.id = reindex_vectors.chunk_id)",
            (4 * state.dimension,),
        )
    return max(int(cursor.rowcount), 0)


async def progress(conn: aiosqlite.Connection) -> tuple[int, int]:
    """`(staged, chunks)`: vectors already made with the new model, and chunks in all."""
    staged = await _scalar(conn, "SELECT count(*) FROM reindex_vectors")
    total = await _scalar(conn, "SELECT count(*) FROM chunks")
    return staged, total


async def missing(conn: aiosqlite.Connection, after: int, limit: int) -> list[tuple[int, str]]:
    """Up to `limit` chunks with id above `after` that have no new vector yet, by id."""
    async with conn.execute(shared_sql.UNSTAGED_AFTER, (after, limit)) as cursor:
        return [(int(r[0]), str(r[1])) for r in await cursor.fetchall()]


async def stage(
    conn: aiosqlite.Connection,
    chunk_ids: Sequence[int],
    matrix: npt.NDArray[np.float32],
    model_id: str,
) -> int:
    """Store new vectors for chunks that still exist (in the caller's transaction).

    The state is checked in the same transaction: a batch embedded just before a cancel (or
    a cancel and a new reindex to another model) is dropped, never mixed in.

    Returns:
        How many were stored.

    Raises:
        ReindexError: No reindex to `model_id` is recorded any more.
    """
    state = await read_state(conn)
    if state is None or state.model_id != model_id:
        raise ReindexError(
            f"the reindex to {model_id} was cancelled or replaced; its vectors are dropped",
            data={"model": model_id},
        )
    async with conn.execute(
        "SELECT id FROM chunks WHERE id IN (SELECT value FROM json_each(?))",
        (_json_ids(chunk_ids),),
    ) as cursor:
        alive = {int(r[0]) for r in await cursor.fetchall()}
    rows = [
        (cid, np.ascontiguousarray(matrix[i], dtype=np.float32).tobytes())
        for i, cid in enumerate(chunk_ids)
        if cid in alive
    ]
    await conn.executemany(
        "INSERT OR REPLACE INTO reindex_vectors (chunk_id, embedding) VALUES (?, ?)", rows
    )
    return len(rows)


def _json_ids(ids: Sequence[int]) -> str:
    return "[" + ",".join(str(int(i)) for i in ids) + "]"


async def swap(conn: aiosqlite.Connection, index: VectorIndex | None, state: ReindexState) -> int:
    """Make the staged vectors the live index (in the caller's write transaction).

    The caller has staged a vector for every chunk (checked here). `chunks_vec` is dropped and
    created again at the new dimension, filled from the staged rows, the cascade's tables are
    rebuilt from it (`vectors.rebuild`), and `meta` names the new model; the staging table is
    left empty and the reindex state removed.

    Returns:
        The number of vectors in the new index.

    Raises:
        RuntimeError: Some chunk has no staged vector (the caller catches up first).
    """
    left = await _scalar(conn, shared_sql.UNSTAGED_COUNT)
    if left:
        raise RuntimeError(f"{left} chunks have no vector from {state.model_id} yet")
    await conn.execute("DROP TABLE IF EXISTS chunks_vec")
    await conn.execute(schema.vector_table_sql(state.dimension))
    await conn.execute(
        "INSERT INTO chunks_vec (chunk_id, embedding, kind, granularity) "
        "SELECT r.chunk_id, r.embedding, c.kind, c.granularity "
        "FROM reindex_vectors r JOIN chunks c ON c.id = r.chunk_id"
    )
    await conn.execute("DELETE FROM reindex_vectors")
    count = await vectors.rebuild(conn, index, state.dimension)
    await conn.executemany("DELETE FROM meta WHERE key = ?", [(k,) for k in STATE_KEYS])
    await _set_meta(
        conn,
        {
            "model_id": state.model_id,
            "dimension": str(state.dimension),
            SPEC_KEY: state.spec,
        },
    )
    logger.info("switched the vector index to %s (%d vectors)", state.model_id, count)
    return count
