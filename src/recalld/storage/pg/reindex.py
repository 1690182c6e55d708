"""Online re-embedding on pgvector: the reindex operations of `contract.Writer`, called by
`pg.access`.

The new model's vectors collect in `reindex_vectors` (migration pg_m002), whose `halfvec`
column has no fixed dimension, and go with their chunk by cascade. The swap, in the caller's
one write transaction, empties `chunks_vec`, changes its column to `halfvec(new dimension)`
(`ALTER ... TYPE` on an empty table), fills it from the staged rows and re-creates the HNSW
index when the store has one; the table itself stays, so its grants and row-level policies do.

A store that isolates users (row-level security) cannot be re-embedded from a daemon: each
role sees only its own chunks and may not write `meta`, so no role could swap the whole index.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from recalld.errors import ReindexError
from recalld.storage import shared_sql
from recalld.storage.pg.handle import PgConn
from recalld.storage.records import SPEC_KEY, STATE_KEYS, ReindexState, state_from_meta

logger = logging.getLogger(__name__)


async def _meta(conn: PgConn) -> dict[str, str]:
    return {str(k): str(v) for k, v in await conn.fetch("SELECT key, value FROM meta")}


async def _scalar(conn: PgConn, sql: str, params: Sequence[object] = ()) -> int:
    rows = await conn.fetch(sql, list(params))
    return int(rows[0][0])


async def _set_meta(conn: PgConn, values: dict[str, str]) -> None:
    await conn.run_many(
        "INSERT INTO meta (key, value) VALUES (%s, %s) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        list(values.items()),
    )


def _refuse_isolated(conn: PgConn) -> None:
    if conn.writer.scope:
        raise ReindexError(
            "this PostgreSQL store isolates users (row-level security), so no daemon sees every "
            "chunk to re-embed; re-embed into a new database instead (`recalld export` with "
            "--no-vectors, then `recalld import` under the new model)"
        )


async def read_state(conn: PgConn) -> ReindexState | None:
    """The reindex in progress, or None."""
    return state_from_meta(await _meta(conn))


async def begin(conn: PgConn, spec: str, model_id: str, dimension: int) -> ReindexState:
    """Record a new reindex and empty the staging table (in the caller's transaction)."""
    _refuse_isolated(conn)
    state = ReindexState(spec, model_id, dimension, time.time())
    await conn.run("DELETE FROM reindex_vectors")
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


async def cancel(conn: PgConn) -> int:
    """Forget the reindex and drop its staged vectors. Returns how many were dropped."""
    dropped = await conn.run("DELETE FROM reindex_vectors")
    if await read_state(conn) is not None:
        await conn.run("DELETE FROM meta WHERE key = ANY(%s)", [list(STATE_KEYS)])
    return max(dropped, 0)


async def drop_stray(conn: PgConn) -> int:
    """Drop staged vectors that cannot be used: the wrong size, or no reindex in progress
    (chunks take their staged vectors along by cascade). Returns how many went."""
    state = await read_state(conn)
    if state is None:
        dropped = await conn.run("DELETE FROM reindex_vectors")
    else:
        dropped = await conn.run(
            "DELETE FROM reindex_vectors WHERE vector_dims(embedding) <> %s", [state.dimension]
        )
    return max(dropped, 0)


async def progress(conn: PgConn) -> tuple[int, int]:
    """`(staged, chunks)`: vectors already made with the new model, and chunks in all."""
    rows = await conn.fetch(
        "SELECT (SELECT count(*) FROM reindex_vectors), (SELECT count(*) FROM chunks)"
    )
    return int(rows[0][0]), int(rows[0][1])


async def missing(conn: PgConn, after: int, limit: int) -> list[tuple[int, str]]:
    """Up to `limit` chunks with id above `after` that have no new vector yet, by id."""
    rows = await conn.fetchall(shared_sql.UNSTAGED_AFTER, [after, limit])
    return [(int(r[0]), str(r[1])) for r in rows]


async def stage(
    conn: PgConn, chunk_ids: Sequence[int], matrix: npt.NDArray[np.float32], model_id: str
) -> int:
    """Store new vectors for chunks that still exist (`contract.Writer.stage_vectors`).

    Raises:
        ReindexError: No reindex to `model_id` is recorded any more.
    """
    state = await read_state(conn)
    if state is None or state.model_id != model_id:
        raise ReindexError(
            f"the reindex to {model_id} was cancelled or replaced; its vectors are dropped",
            data={"model": model_id},
        )
    alive = {
        int(r[0])
        for r in await conn.fetch(
            "SELECT id FROM chunks WHERE id = ANY(%s)", [[int(c) for c in chunk_ids]]
        )
    }
    rows = [
        (cid, np.ascontiguousarray(matrix[i], dtype=np.float32))
        for i, cid in enumerate(chunk_ids)
        if cid in alive
    ]
    await conn.run_many(
        "INSERT INTO reindex_vectors (chunk_id, embedding) VALUES (%s, %s) "
        "ON CONFLICT (chunk_id) DO UPDATE SET embedding = excluded.embedding",
        rows,
    )
    return len(rows)


async def swap(conn: PgConn, state: ReindexState) -> int:
    """Make the staged vectors the live index (in the caller's write transaction; see the
    module docstring).

    Raises:
        RuntimeError: Some chunk has no staged vector (the caller catches up first).
    """
    _refuse_isolated(conn)
    left = await _scalar(conn, shared_sql.UNSTAGED_COUNT)
    if left:
        raise RuntimeError(f"{left} chunks have no vector from {state.model_id} yet")
    meta = await _meta(conn)
    dimension = int(state.dimension)
    await conn.run("DROP INDEX IF EXISTS chunks_vec_hnsw")
    await conn.run("DELETE FROM chunks_vec")
    await conn.run(f"ALTER TABLE chunks_vec ALTER COLUMN embedding TYPE halfvec({dimension})")
    count = await conn.run(
        "INSERT INTO chunks_vec (chunk_id, scope, embedding, kind, granularity) "
        "SELECT r.chunk_id, c.scope, r.embedding, c.kind, c.granularity "
        "FROM reindex_vectors r JOIN chunks c ON c.id = r.chunk_id"
    )
    if meta.get("vector_index", "hnsw") == "hnsw":
        await conn.run(
            "CREATE INDEX chunks_vec_hnsw ON chunks_vec USING hnsw (embedding halfvec_cosine_ops)"
        )
    await conn.run("DELETE FROM reindex_vectors")
    await conn.run("DELETE FROM meta WHERE key = ANY(%s)", [list(STATE_KEYS)])
    await _set_meta(
        conn,
        {"model_id": state.model_id, "dimension": str(dimension), SPEC_KEY: state.spec},
    )
    conn.dimension = dimension
    logger.info("switched the vector index to %s (%d vectors)", state.model_id, count)
    return max(count, 0)
