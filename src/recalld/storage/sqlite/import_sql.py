"""The SQL of an import, batched: each statement is a thread hop through aiosqlite, and
statements per document or per row made imports several times slower than these per batch.

Table and column names come from the store's own schema (`PRAGMA table_info`), never from the
file: the import plan refuses any table or column the store does not have.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aiosqlite

_IN_BATCH = 500  # values per `IN (...)` list


async def stored_documents(
    conn: aiosqlite.Connection, sources: Sequence[str]
) -> dict[str, tuple[int, str, str]]:
    """`source → (id, content_hash, state)` for those of `sources` that are stored."""
    found: dict[str, tuple[int, str, str]] = {}
    for start in range(0, len(sources), _IN_BATCH):
        part = list(sources[start : start + _IN_BATCH])
        marks = ", ".join("?" for _ in part)
        async with conn.execute(
            f"SELECT source, id, content_hash, state FROM documents WHERE source IN ({marks})",
            part,
        ) as cursor:
            for row in await cursor.fetchall():
                found[str(row[0])] = (int(row[1]), str(row[2]), str(row[3]))
    return found


async def chunk_ids(
    conn: aiosqlite.Connection, doc_ids: Sequence[int]
) -> dict[tuple[int, str], int]:
    """`(document id, chunk key) → chunk id` for the chunks of these documents (keys are
    unique within a document)."""
    found: dict[tuple[int, str], int] = {}
    for start in range(0, len(doc_ids), _IN_BATCH):
        part = list(doc_ids[start : start + _IN_BATCH])
        marks = ", ".join("?" for _ in part)
        async with conn.execute(
            f"SELECT document_id, key, id FROM chunks WHERE document_id IN ({marks})", part
        ) as cursor:
            for row in await cursor.fetchall():
                found[(int(row[0]), str(row[1]))] = int(row[2])
    return found


async def insert_many(
    conn: aiosqlite.Connection, table: str, rows: Sequence[dict[str, Any]]
) -> None:
    """Insert rows, one `executemany` per set of columns (an older export may lack some)."""
    groups: dict[tuple[str, ...], list[list[Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(row), []).append(list(row.values()))
    for columns, values in groups.items():
        names = ", ".join(f'"{c}"' for c in columns)
        marks = ", ".join("?" for _ in columns)
        await conn.executemany(f'INSERT INTO "{table}" ({names}) VALUES ({marks})', values)


async def insert_row(
    conn: aiosqlite.Connection, table: str, values: dict[str, Any]
) -> tuple[int, int]:
    """Insert one row unless it breaks a uniqueness constraint; returns its rowid and how many
    rows were added (0 when one with the same key was there)."""
    names = ", ".join(f'"{c}"' for c in values)
    marks = ", ".join("?" for _ in values)
    cursor = await conn.execute(
        f'INSERT OR IGNORE INTO "{table}" ({names}) VALUES ({marks})', list(values.values())
    )
    return int(cursor.lastrowid or 0), int(cursor.rowcount)


async def find_same(conn: aiosqlite.Connection, table: str, values: dict[str, Any]) -> int | None:
    """The rowid of a row with exactly these values, if one exists (idempotent imports)."""
    where = " AND ".join(f'"{c}" IS ?' for c in values) or "1"
    async with conn.execute(
        f'SELECT rowid FROM "{table}" WHERE {where} LIMIT 1', list(values.values())
    ) as cursor:
        row = await cursor.fetchone()
    return None if row is None else int(row[0])


async def set_references(
    conn: aiosqlite.Connection, table: str, column: str, key: str, pairs: Sequence[tuple[int, int]]
) -> None:
    """`UPDATE table SET column = new WHERE key = row` for each `(new, row)` pair."""
    await conn.executemany(f'UPDATE "{table}" SET "{column}" = ? WHERE "{key}" = ?', pairs)
