"""Stored values that cannot be read back: one set of rules for import, export, check and repair.

A value is unreadable when JSON cannot carry it (`inf`, `NaN`), when it is outside the range
its column means (`recalld.limits`: a time `datetime` cannot show, an importance outside 0..1,
an integer past 64 bits), when a JSON column does not hold JSON of its shape, or when a text
column holds bytes that are not UTF-8 (a flipped bit). An older recalld let `1e400` in as an
event time (issue 18); a damaged file can hold anything.

- `problem(table, column, value)` says what is wrong with one value, or None: the import
  refuses a file holding one (`import_plan`), the export skips and reports its row
  (`exporter`).
- `scan(conn)` finds every such row in a store by id (blocking): `check` reports them, and
  `clear` (async, run by `check --repair` in its write transaction) resets each bad value to
  its column's neutral value.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import aiosqlite

from recalld import limits
from recalld.storage.sqlite.connection import DatabaseError, connect

logger = logging.getLogger(__name__)

# What each column means, for the columns whose values are checked beyond "finite".
TIME = "time"  # unix seconds or NULL
NUMBER = "number"  # a finite number
UNIT = "unit"  # a finite number in 0..1
JSON_ARRAY = "json array"
JSON_OBJECT = "json object"

COLUMNS: dict[str, dict[str, str]] = {
    "documents": {
        "mtime": TIME,
        "created_at": NUMBER,
        "updated_at": NUMBER,
    },
    "chunks": {
        "tags": JSON_ARRAY,
        "importance": UNIT,
        "event_time": TIME,
        "created_at": NUMBER,
        "last_accessed_at": TIME,
        "last_retrieved_at": TIME,
        "meta": JSON_OBJECT,
    },
    "links": {"weight": UNIT, "created_at": NUMBER},
    "chunk_history": {
        "tags": JSON_ARRAY,
        "importance": UNIT,
        "event_time": TIME,
        "valid_from": NUMBER,
        "replaced_at": NUMBER,
    },
}
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


class Undecodable(bytes):
    """A text value whose bytes are not UTF-8, as `decode_text` hands it over."""


def decode_text(raw: bytes) -> str | Undecodable:
    """A connection's `text_factory` that keeps undecodable text as a marker, not an error
    that would fail the whole query."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return Undecodable(raw)


def _json_problem(value: Any, shape: type) -> str | None:
    if not isinstance(value, str):
        return f"not JSON text but {type(value).__name__}"
    try:
        parsed = json.loads(value, parse_constant=_refuse_constant)
    except ValueError as exc:
        return f"not JSON ({exc})"
    if not isinstance(parsed, shape):
        return f"JSON of the wrong shape ({type(parsed).__name__})"
    return None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def problem(table: str, column: str, value: Any) -> str | None:
    """What makes `value` unreadable in `table.column`, or None when it is fine."""
    if isinstance(value, Undecodable):
        return "text that is not UTF-8"
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float) and not limits.is_number(value):
        return f"{value!r} is not a finite 64-bit number"
    meaning = COLUMNS.get(table, {}).get(column)
    if meaning is None:
        return None
    if meaning == TIME:
        if value is None or limits.is_time(value):
            return None
        return f"{value!r} is not a time between the years 1 and 9999"
    if meaning == NUMBER:
        return None if limits.is_number(value) else f"{value!r} is not a number"
    if meaning == UNIT:
        if limits.is_number(value) and 0.0 <= value <= 1.0:
            return None
        return f"{value!r} is not a number between 0 and 1"
    return _json_problem(value, list if meaning == JSON_ARRAY else dict)


def row_problem(table: str, columns: tuple[str, ...], row: Any) -> str | None:
    """The first unreadable value of a row, as `column: why`, or None."""
    for index, column in enumerate(columns):
        why = problem(table, column, row[index])
        if why is not None:
            return f"{column}: {why}"
    return None


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


def describe(found: dict[str, dict[int, list[str]]], most: int = 20) -> str:
    """One line naming the bad rows by table and id (the first `most` of each table)."""
    parts = []
    for table, rows in sorted(found.items()):
        ids = sorted(rows)
        shown = ", ".join(str(i) for i in ids[:most]) + (" …" if len(ids) > most else "")
        first = rows[ids[0]][0]
        parts.append(f"{table} {shown} (e.g. {first})")
    return "; ".join(parts)


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
