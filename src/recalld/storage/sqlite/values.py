"""A SQLite store's unreadable values (`storage.values` says what makes one): `scan(conn)`
finds every such row by id (blocking): `check` reports them, and `clear` (async, run by `check
--repair` in its write transaction) resets each bad value to its column's neutral value.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import aiosqlite

from recalld.storage.sqlite.connection import DatabaseError, connect
from recalld.storage.values import (
    COLUMNS,
    JSON_ARRAY,
    JSON_OBJECT,
    NUMBER,
    TIME,
    UNIT,
    decode_text,
    problem,
)

logger = logging.getLogger(__name__)

# What `clear` writes in place of a bad value (`None`: the current time).
_NEUTRAL: dict[str, Any] = {
    TIME: "null",
    NUMBER: None,
    UNIT: 0.5,
    JSON_ARRAY: "[]",
    JSON_OBJECT: "{}",
}
# The row id of each scanned table (`links` has none of its own).
_KEY = {"documents": "id", "chunks": "id", "links": "rowid", "chunk_history": "id"}


def _table_columns(conn: sqlite3.Connection, table: str) -> tuple[str, ...]:
    return tuple(str(r[1]) for r in conn.execute(f'PRAGMA table_info("{table}")'))


def _rows(conn: sqlite3.Connection, table: str, columns: tuple[str, ...]) -> Iterator[Any]:
    select = ", ".join(f'"{c}"' for c in columns)
    cursor = conn.execute(f'SELECT {_KEY[table]}, {select} FROM "{table}"')
    while batch := cursor.fetchmany(500):
        yield from batch


def scan(conn: sqlite3.Connection) -> dict[str, dict[int, list[str]]]:
    """Every row holding an unreadable value: `{table: {row id: ["column: why", ...]}}`.

    Args:
        conn: A connection to the store; its `text_factory` is set to `decode_text` for the
            scan and restored after.
    """
    found: dict[str, dict[int, list[str]]] = {}
    existing = {str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master")}
    saved = conn.text_factory
    conn.text_factory = decode_text
    try:
        for table in _KEY:
            if table not in existing:
                continue
            columns = _table_columns(conn, table)
            for row in _rows(conn, table, columns):
                bad = [
                    f"{column}: {why}"
                    for column, value in zip(columns, row[1:], strict=True)
                    if (why := problem(table, column, value)) is not None
                ]
                if bad:
                    found.setdefault(table, {})[int(row[0])] = bad
    finally:
        conn.text_factory = saved
    return found


def scan_path(path: Any) -> dict[str, dict[int, list[str]]]:
    """`scan` on a read-only connection of its own to the store file at `path`."""
    conn = connect(path, readonly=True)
    try:
        return scan(conn)
    finally:
        conn.close()


async def clear(conn: aiosqlite.Connection, found: dict[str, dict[int, list[str]]]) -> int:
    """Reset each bad value `scan` found, if it is still bad, to its column's neutral value:
    an unknown time, importance 0.5, empty tags or meta, now for a creation time, 0 for a
    count; undecodable text keeps what can be decoded. Runs in the caller's write
    transaction (an aiosqlite connection). Returns the number of values changed."""
    changed = 0
    for table, rows in found.items():
        for row_id, problems in rows.items():
            for entry in problems:
                column = entry.split(":", 1)[0]
                changed += await _clear_value(conn, table, column, row_id)
    return changed


async def _clear_value(conn: aiosqlite.Connection, table: str, column: str, row_id: int) -> int:
    key = _KEY[table]
    # As a blob, text that is not UTF-8 can be read without failing the query.
    async with conn.execute(
        f'SELECT typeof("{column}"), CAST("{column}" AS BLOB) FROM "{table}" WHERE {key} = ?',
        (row_id,),
    ) as cursor:
        row = await cursor.fetchone()
    if row is None:
        return 0
    kind, raw = str(row[0]), row[1]
    value: Any = None
    if kind == "text":
        value = decode_text(bytes(raw))
    elif kind in ("real", "integer"):
        value = float(bytes(raw)) if kind == "real" else int(bytes(raw))
    elif kind == "blob":
        value = bytes(raw)
    if problem(table, column, value) is None:
        return 0  # fixed since the scan
    meaning = COLUMNS.get(table, {}).get(column)
    fixed: Any
    if meaning is None:
        fixed = bytes(raw).decode("utf-8", "replace") if kind == "text" else 0
    elif meaning == NUMBER:
        fixed = time.time()
    else:
        neutral = _NEUTRAL[meaning]
        fixed = None if neutral == "null" else neutral
    try:
        await conn.execute(f'UPDATE "{table}" SET "{column}" = ? WHERE {key} = ?', (fixed, row_id))
    except DatabaseError as exc:  # e.g. a repaired source that now equals another one
        logger.warning("cannot clear %s.%s of row %d: %s", table, column, row_id, exc)
        return 0
    return 1
