"""The batched SQL of an import on PostgreSQL (`contract.Writer`'s import operations, called by
`pg.access`).

Table and column names come from the store's own catalog (`pg.export_snapshot.discover`), never from
the file. Rows without a `scope` take the column default (this store's scope).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from recalld.storage.pg.handle import PgConn


def _names(columns: Sequence[str]) -> str:
    return ", ".join(f'"{c}"' for c in columns)


async def _surrogate(conn: PgConn, table: str) -> str | None:
    # The single identity primary key, as `portable.Table.surrogate`; None for links.
    rows = await conn.fetch(
        "SELECT a.attname FROM pg_constraint k JOIN pg_attribute a "
        "ON a.attrelid = k.conrelid AND a.attnum = ANY(k.conkey) "
        "WHERE k.conrelid = %s::regclass AND k.contype = 'p' AND a.attidentity <> ''",
        [table],
    )
    return str(rows[0][0]) if len(rows) == 1 else None


async def stored_documents(conn: PgConn, sources: Sequence[str]) -> dict[str, tuple[int, str, str]]:
    """`source → (id, content_hash, state)` for those of `sources` stored in this scope."""
    rows = await conn.fetch(
        "SELECT source, id, content_hash, state FROM documents "
        "WHERE source = ANY(%s) AND scope = %s",
        [list(sources), conn.writer.scope],
    )
    return {str(r[0]): (int(r[1]), str(r[2]), str(r[3])) for r in rows}


async def chunk_ids(conn: PgConn, doc_ids: Sequence[int]) -> dict[tuple[int, str], int]:
    """`(document id, chunk key) → chunk id` for the chunks of these documents."""
    rows = await conn.fetch(
        "SELECT document_id, key, id FROM chunks WHERE document_id = ANY(%s)", [list(doc_ids)]
    )
    return {(int(r[0]), str(r[1])): int(r[2]) for r in rows}


async def insert_many(conn: PgConn, table: str, rows: Sequence[dict[str, Any]]) -> None:
    """Insert rows, one batch per set of columns (an older export may lack some)."""
    groups: dict[tuple[str, ...], list[list[Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(row), []).append(list(row.values()))
    for columns, values in groups.items():
        marks = ", ".join("%s" for _ in columns)
        await conn.run_many(f'INSERT INTO "{table}" ({_names(columns)}) VALUES ({marks})', values)


async def insert_row(conn: PgConn, table: str, values: dict[str, Any]) -> tuple[int, int]:
    """Insert one row unless it breaks a uniqueness constraint; returns its id (0 for a
    table without one) and how many rows were added."""
    key = await _surrogate(conn, table)
    returned = f'"{key}"' if key else "0"
    marks = ", ".join("%s" for _ in values)
    rows = await conn.fetch(
        f'INSERT INTO "{table}" ({_names(list(values))}) VALUES ({marks}) '
        f"ON CONFLICT DO NOTHING RETURNING {returned}",
        list(values.values()),
    )
    return (int(rows[0][0]), 1) if rows else (0, 0)


async def find_same(conn: PgConn, table: str, values: dict[str, Any]) -> int | None:
    """The id of a row with exactly these values, if one exists (idempotent imports); 0 for
    a table without ids."""
    key = await _surrogate(conn, table)
    returned = f'"{key}"' if key else "0"
    where = " AND ".join(f'"{c}" IS NOT DISTINCT FROM %s' for c in values) or "true"
    rows = await conn.fetch(
        f'SELECT {returned} FROM "{table}" WHERE {where} LIMIT 1',
        list(values.values()),
    )
    return None if not rows else int(rows[0][0])


async def set_references(
    conn: PgConn, table: str, column: str, key: str, pairs: Sequence[tuple[int, int]]
) -> None:
    """`UPDATE table SET column = new WHERE key = row` for each `(new, row)` pair."""
    await conn.run_many(f'UPDATE "{table}" SET "{column}" = %s WHERE "{key}" = %s', pairs)
