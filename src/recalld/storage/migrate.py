"""`recalld migrate`: copy a SQLite store into an empty PostgreSQL store, vectors included.

Rows keep their ids, so parent links, memory links and anything that remembered a chunk id
stay valid; the identity sequences are moved past the copied ids at the end. Rows are copied
in batches by `COPY`, each batch one transaction, all in one `Store.bulk_load` (an empty
store's HNSW index is built once at the end), with the SQLite file opened read-only; the
counts of every table are compared at the end and a difference is an error. The destination must be
empty (no documents): migrating twice, or into a live store, would mix two stores.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from recalld.errors import StoreError
from recalld.storage.pg.handle import PgConn
from recalld.storage.pg.store import PgStore
from recalld.storage.pg.writer import insert_vectors
from recalld.storage.records import SPEC_KEY
from recalld.storage.registry import open_store
from recalld.storage.sqlite.connection import connect

logger = logging.getLogger(__name__)

BATCH = 2000
Progress = Callable[[str, int], None]

_DOCUMENTS = (
    "id, source, kind, format, content_hash, state, chunk_count, mtime, size, created_at, "
    "updated_at"
)
_CHUNKS = (
    "id, document_id, position, kind, granularity, key, text, content_hash, token_count, tags, "
    "memory_type, importance, event_time, created_at, access_count, last_accessed_at, "
    "retrieval_count, last_retrieved_at, status, meta"
)
_LINKS = "src, dst, relation, weight, created_at, origin"
_ERRORS = "id, source, error_type, message, at"
_HISTORY = (
    "id, chunk_id, version, text, tags, memory_type, importance, event_time, valid_from, "
    "replaced_at"
)
TABLES = ("documents", "chunks", "chunks_vec", "links", "errors", "chunk_history")


def _sqlite_counts(conn: sqlite3.Connection) -> dict[str, int]:
    return {t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in TABLES}


async def _pg_counts(store: PgStore) -> dict[str, int]:
    async def count(conn: PgConn) -> dict[str, int]:
        found = {}
        for table in TABLES:
            rows = await conn.fetch(f"SELECT count(*) FROM {table}")
            found[table] = int(rows[0][0])
        return found

    return await store.read_pg(count)


async def migrate(
    source: Path,
    url: str,
    *,
    isolate_users: bool = False,
    vector_index: str = "hnsw",
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Copy the SQLite store at `source` into the (empty) PostgreSQL database at `url`.

    Returns:
        `{"from", "to", "model", "dimension", "counts"}`; counts are equal on both sides.

    Raises:
        StoreError: `source` is not a store, the destination is not empty, or the counts differ.
    """
    if not await asyncio.to_thread(source.exists):
        raise StoreError(f"no store at {source}", data={"path": str(source)})
    lite = await asyncio.to_thread(connect, source, readonly=True)
    try:
        meta = dict(lite.execute("SELECT key, value FROM meta").fetchall())
        if "model_id" not in meta:
            raise StoreError(f"{source} has no embedding model stamped; nothing to migrate")
        model_id, dimension = str(meta["model_id"]), int(meta["dimension"])
        expected = await asyncio.to_thread(_sqlite_counts, lite)
        store = await open_store(
            url,
            model_id=model_id,
            dimension=dimension,
            isolate_users=isolate_users,
            vector_index=vector_index,
            model_spec=meta.get(SPEC_KEY),
        )
        assert isinstance(store, PgStore)
        try:
            if (await _pg_counts(store))["documents"]:
                raise StoreError(
                    f"{store.path} already holds documents; migrate into an empty database",
                    data={"to": store.path},
                )
            await _copy(lite, store, dimension, progress or (lambda _table, _n: None))
            found = await _pg_counts(store)
        finally:
            await store.close()
    finally:
        await asyncio.to_thread(lite.close)
    if found != expected:
        raise StoreError(
            f"migration incomplete: {source} has {expected}, {redacted(url)} has {found}",
            data={"expected": expected, "found": found},
        )
    return {
        "from": str(source),
        "to": redacted(url),
        "model": model_id,
        "dimension": dimension,
        "counts": found,
    }


def redacted(url: str) -> str:
    """The URL without its password."""
    from recalld.storage.pg.store import redact

    return redact(url)


async def _batches(lite: sqlite3.Connection, sql: str) -> Any:
    cursor = await asyncio.to_thread(lite.execute, sql)
    while True:
        rows = await asyncio.to_thread(cursor.fetchmany, BATCH)
        if not rows:
            return
        yield [tuple(r) for r in rows]


async def _copy_rows(conn: PgConn, table: str, columns: list[str], rows: list[Any]) -> None:
    await conn.copy_rows(table, columns, rows)


async def _link_parents(conn: PgConn, rows: list[Any]) -> None:
    await conn.run(
        "UPDATE chunks c SET parent_id = v.parent FROM unnest(%s::bigint[], %s::bigint[]) "
        "AS v(id, parent) WHERE c.id = v.id",
        [[r[0] for r in rows], [r[1] for r in rows]],
    )


async def _copy(
    lite: sqlite3.Connection, store: PgStore, dimension: int, progress: Progress
) -> None:
    """Every table's rows by `COPY`, in one bulk load (the HNSW index is built at its end)."""
    steps: list[tuple[str, str, str]] = [
        ("documents", _DOCUMENTS, "ORDER BY id"),
        # Parents are linked once every chunk is in (they may come after their children).
        ("chunks", _CHUNKS, "ORDER BY id"),
        ("links", _LINKS, ""),
        ("errors", _ERRORS, "ORDER BY id"),
        ("chunk_history", _HISTORY, "ORDER BY id"),
    ]
    async with store.bulk_load():
        for table, columns, order in steps:
            done = 0
            async for batch in _batches(lite, f"SELECT {columns} FROM {table} {order}"):
                await store.write_pg(
                    partial(_copy_rows, table=table, columns=columns.split(", "), rows=batch)
                )
                done += len(batch)
                progress(table, done)
        done = 0
        async for batch in _batches(
            lite, "SELECT id, parent_id FROM chunks WHERE parent_id IS NOT NULL"
        ):
            await store.write_pg(partial(_link_parents, rows=batch))
            done += len(batch)
            progress("parents", done)
        done = 0
        async for batch in _batches(
            lite, "SELECT chunk_id, embedding, kind, granularity FROM chunks_vec ORDER BY chunk_id"
        ):
            rows = [
                (cid, np.frombuffer(blob, dtype=np.float32, count=dimension), kind, gran)
                for cid, blob, kind, gran in batch
            ]
            await store.write_pg(partial(insert_vectors, rows=rows))
            done += len(rows)
            progress("vectors", done)

    async def advance(conn: PgConn) -> None:
        for table in ("documents", "chunks", "errors", "chunk_history"):
            await conn.run(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                f"(SELECT coalesce(max(id), 0) + 1 FROM {table}), false)"
            )

    await store.write_pg(advance)
