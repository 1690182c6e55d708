"""Stored values that cannot be read back: one set of rules for import, export, check and repair.

A value is unreadable when JSON cannot carry it (`inf`, `NaN`), when it is outside the range
its column means (`recalld.limits`: a time `datetime` cannot show, an importance outside 0..1,
an integer past 64 bits), when a JSON column does not hold JSON of its shape, or when a text
column holds bytes that are not UTF-8 (a flipped bit). An older recalld let `1e400` in as an
event time (issue 18); a damaged file can hold anything.

`problem(table, column, value)` says what is wrong with one value, or None: the import refuses
a file holding one (`import_plan`), the export skips and reports its row (`exporter`). A SQLite
store is scanned for them, and repaired, by `storage.sqlite.values`.
"""

from __future__ import annotations

import json
from typing import Any

from recalld import limits

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


def describe(found: dict[str, dict[int, list[str]]], most: int = 20) -> str:
    """One line naming the bad rows by table and id (the first `most` of each table)."""
    parts = []
    for table, rows in sorted(found.items()):
        ids = sorted(rows)
        shown = ", ".join(str(i) for i in ids[:most]) + (" …" if len(ids) > most else "")
        first = rows[ids[0]][0]
        parts.append(f"{table} {shown} (e.g. {first})")
    return "; ".join(parts)
