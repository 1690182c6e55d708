"""The export format (JSONL) and what export and import share: which tables travel, their
columns, and which columns hold ids that must be remapped.

One JSON object per line, each with a `type`:

    {"type":"header","format":"recalld-export","format_version":1,"recalld_version":"0.1.0",
     "schema_version":2,"model_id":"minilm-…","dimension":384,"vectors":false,
     "exported_at":1.7e9,"tables":{"documents":["id","source",…],"chunks":[…],…}}
    {"type":"documents","row":{"id":3,"source":"/notes/a.md",…}}
    {"type":"chunks","row":{"id":17,"document_id":3,"text":"…",…},"vector":"<base64 f32>"}
    …  every document is followed by its chunks
    {"type":"links","row":{"src":17,"dst":18,"relation":"parent",…}}
    …  then every other table, row by row
    {"type":"footer","counts":{"documents":1,"chunks":2,"links":1,…}}

Tables are found and copied generically, by their columns, so tables added by later
migrations travel without changes here. Which columns hold ids comes from each table's declared
foreign keys (`REFERENCES`): a new table whose rows point at chunks must declare it, or its ids
are copied verbatim. Derived tables (the FTS and vector indexes, their shadow tables, the vector
cascade) are rebuilt on import rather than copied; `meta` belongs to the store, not its content.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Any

FORMAT = "recalld-export"
FORMAT_VERSION = 1

HEADER = "header"
FOOTER = "footer"
DOCUMENTS = "documents"
CHUNKS = "chunks"

# Store state or indexes rebuilt from the chunks, never exported.
NOT_EXPORTED = frozenset({"meta", "vector_codes", "vector_floats", "reindex_vectors"})
# JSON cannot hold bytes; a BLOB value travels as {"base64": "..."}.
_BLOB_KEY = "base64"


@dataclass(frozen=True, slots=True)
class Table:
    """An exportable table.

    Attributes:
        name: The table.
        columns: Its columns, in declaration order.
        surrogate: The INTEGER PRIMARY KEY column (a rowid alias), re-assigned on import.
        references: Foreign-key column → the table it points at.
    """

    name: str
    columns: tuple[str, ...]
    surrogate: str | None
    references: dict[str, str] = field(default_factory=dict)


def _table(conn: sqlite3.Connection, name: str) -> Table:
    info = list(conn.execute(f'PRAGMA table_info("{name}")'))
    columns = tuple(str(r[1]) for r in info)
    pk = [r for r in info if r[5]]
    surrogate = None
    if len(pk) == 1 and str(pk[0][2]).upper() == "INTEGER":
        surrogate = str(pk[0][1])
    refs = {str(r[3]): str(r[2]) for r in conn.execute(f'PRAGMA foreign_key_list("{name}")')}
    return Table(name, columns, surrogate, refs)


def discover(conn: sqlite3.Connection) -> list[Table]:
    """The tables to export, documents and chunks first, then in foreign-key order.

    Args:
        conn: A blocking connection (`storage.sqlite.connection.connect`).
    """
    listed = [(str(r[1]), str(r[2])) for r in conn.execute("PRAGMA main.table_list")]
    virtual = [name for name, kind in listed if kind == "virtual"]
    names = sorted(
        name
        for name, kind in listed
        if kind == "table"
        and not name.startswith("sqlite_")
        and name not in NOT_EXPORTED
        # sqlite-vec keeps some of its storage in plain tables named after the virtual table.
        and not any(name.startswith(v + "_") for v in virtual)
    )
    return in_reference_order({name: _table(conn, name) for name in names})


def in_reference_order(tables: dict[str, Table]) -> list[Table]:
    """Documents and chunks first, then the rest in the order given, each after the tables it
    refers to, so an import can remap ids in one pass (a reference cycle is cut where it
    closes)."""
    ordered: list[Table] = []
    seen: set[str] = set()

    def visit(name: str, path: tuple[str, ...] = ()) -> None:
        if name in seen or name not in tables or name in path:
            return
        for target in tables[name].references.values():
            if target != name:
                visit(target, (*path, name))
        seen.add(name)
        ordered.append(tables[name])

    for name in (DOCUMENTS, CHUNKS, *tables):
        visit(name)
    return ordered


def header(
    recalld_version: str,
    schema_version: int,
    meta: dict[str, str],
    vectors: bool,
    tables: list[Table],
    **extra: Any,
) -> dict[str, Any]:
    """The first line of an export (either backend): format, versions, model, tables."""
    return {
        "type": HEADER,
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "recalld_version": recalld_version,
        "schema_version": schema_version,
        **extra,
        "model_id": meta.get("model_id"),
        "dimension": int(meta["dimension"]) if "dimension" in meta else None,
        "vectors": vectors,
        "exported_at": time.time(),
        "tables": {t.name: list(t.columns) for t in tables},
    }


def encode_value(value: Any) -> Any:
    """A column value as JSON can carry it."""
    if isinstance(value, bytes | bytearray | memoryview):
        return {_BLOB_KEY: base64.b64encode(bytes(value)).decode("ascii")}
    return value


def decode_value(value: Any) -> Any:
    """The column value back from `encode_value`.

    Raises:
        ValueError: A value that no column can hold (a list, or an object that is not a blob).
    """
    if isinstance(value, dict):
        if set(value) != {_BLOB_KEY} or not isinstance(value[_BLOB_KEY], str):
            raise ValueError("an object value must be {'base64': '...'}")
        return base64.b64decode(value[_BLOB_KEY], validate=True)
    if isinstance(value, list):
        raise ValueError("a column value cannot be a list")
    return value


def encode_vector(blob: bytes) -> str:
    """A float32 vector blob as base64."""
    return base64.b64encode(blob).decode("ascii")


def decode_vector(text: Any, dimension: int) -> bytes:
    """A vector back from base64, checked against the dimension.

    Raises:
        ValueError: Not base64, or not `dimension` float32 values.
    """
    if not isinstance(text, str):
        raise ValueError("'vector' must be a base64 string")
    blob = base64.b64decode(text, validate=True)
    if len(blob) != 4 * dimension:
        raise ValueError(f"'vector' has {len(blob) // 4} values, the header says {dimension}")
    return blob


def dumps(message: dict[str, Any]) -> str:
    """One export line (without its newline)."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def row_dict(table: Table, row: Any) -> dict[str, Any]:
    """A row of `table` (in its column order) as an export line's `row`."""
    return {c: encode_value(row[i]) for i, c in enumerate(table.columns)}


def select_list(table: Table, alias: str) -> str:
    """The SELECT list of `table`'s columns on `alias`, in export order."""
    return ", ".join(f'{alias}."{c}"' for c in table.columns)
