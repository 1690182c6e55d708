"""An export's snapshot of a PostgreSQL store (`contract.ExportSnapshot`; `storage.exporter`
writes the same JSONL as from SQLite).

Tables are discovered from the catalog as `storage.portable.discover` does from SQLite's
PRAGMAs: the same tables (documents, chunks, links, errors, chunk_history), the same surrogate
ids (a single identity primary key) and the same foreign keys. Columns that belong to this
database rather than to the memories are left out, so an export from either backend imports
into the other: generated columns (`tsv`), the row scope, and who wrote each document (an
import records its own writer). The export runs in one `REPEATABLE READ` read-only
transaction (a consistent snapshot while daemons keep writing) and streams rows through
server-side cursors. Blocking: the daemon pulls it in a worker thread.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import psycopg

from recalld.errors import StoreError
from recalld.storage import portable
from recalld.storage.contract import ExportSnapshot
from recalld.storage.pg.schema import SCHEMA_VERSION
from recalld.storage.pg.store import redact

_FETCH = 500
# The store's own state, rebuilt indexes, and columns that are this database's, not the data's.
_NOT_EXPORTED = portable.NOT_EXPORTED | {"chunks_vec"}
_LOCAL_COLUMNS = frozenset({"scope", "written_by", "os_user", "host"})


def discover(conn: psycopg.Connection[Any]) -> list[portable.Table]:
    """The tables to export, documents and chunks first, then in foreign-key order."""
    names = [
        str(r[0])
        for r in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind = 'r' ORDER BY c.relname"
        )
        if str(r[0]) not in _NOT_EXPORTED
    ]
    tables: dict[str, portable.Table] = {}
    for name in names:
        columns = conn.execute(
            "SELECT attname, attidentity <> '' FROM pg_attribute "
            "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped "
            "AND attgenerated = '' ORDER BY attnum",
            (name,),
        ).fetchall()
        keys = conn.execute(
            "SELECT a.attname FROM pg_constraint k JOIN pg_attribute a "
            "ON a.attrelid = k.conrelid AND a.attnum = ANY(k.conkey) "
            "WHERE k.conrelid = %s::regclass AND k.contype = 'p'",
            (name,),
        ).fetchall()
        identity = {str(c) for c, is_identity in columns if is_identity}
        surrogate = str(keys[0][0]) if len(keys) == 1 and str(keys[0][0]) in identity else None
        refs = {
            str(r[0]): str(r[1])
            for r in conn.execute(
                "SELECT a.attname, k.confrelid::regclass::text FROM pg_constraint k "
                "JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = k.conkey[1] "
                "WHERE k.conrelid = %s::regclass AND k.contype = 'f'",
                (name,),
            )
        }
        kept = tuple(str(c) for c, _ in columns if str(c) not in _LOCAL_COLUMNS)
        tables[name] = portable.Table(name, kept, surrogate, refs)
    return portable.in_reference_order(tables)


@contextlib.contextmanager
def export_snapshot(url: str) -> Iterator[ExportSnapshot]:
    """One read-only `REPEATABLE READ` transaction on the database at `url`.

    Raises:
        StoreError: The database cannot be reached or holds no store.
    """
    shown = redact(url)
    try:
        with psycopg.connect(url) as conn:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            if not conn.execute("SELECT to_regclass('meta') IS NOT NULL").fetchone()[0]:  # type: ignore[index]
                raise StoreError(
                    f"no store at {shown}; nothing to export",
                    data={"path": shown, "reason": "missing"},
                )
            yield PgSnapshot(conn)
    except psycopg.Error as exc:
        raise StoreError(f"cannot export {shown}: {exc}", data={"path": shown}) from exc


class PgSnapshot(ExportSnapshot):
    """The reads of an export, on one connection in a read-only transaction. Values are
    typed by the schema, so none is unreadable and no rows break off."""

    newest_schema = SCHEMA_VERSION
    checks_values = False

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    @property
    def header_extra(self) -> dict[str, Any]:
        return {"backend": "postgresql"}

    def schema_version(self) -> int:
        return int(self.meta().get("schema_version", 0))

    def meta(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in self.conn.execute("SELECT key, value FROM meta")}

    def tables(self) -> list[portable.Table]:
        return discover(self.conn)

    def documents(
        self, table: portable.Table, unreadable: list[dict[str, Any]]
    ) -> Iterator[Sequence[Any]]:
        sql = (
            f"SELECT {portable.select_list(table, 'd')} FROM documents d "
            "WHERE d.state = 'complete' ORDER BY d.id"
        )
        return self._stream("export_documents", sql)

    def chunks_of(
        self, table: portable.Table, document_id: Any, vectors: bool
    ) -> Iterator[tuple[Sequence[Any], bytes | None]]:
        vector_sql = ", v.embedding::real[]" if vectors else ""
        vector_join = "LEFT JOIN chunks_vec v ON v.chunk_id = c.id" if vectors else ""
        sql = (
            f"SELECT {portable.select_list(table, 'c')}{vector_sql} FROM chunks c {vector_join} "
            "WHERE c.document_id = %s ORDER BY c.position, c.id"
        )
        width = len(table.columns)
        for row in self.conn.execute(sql.encode(), (document_id,)).fetchall():
            vector = row[width] if vectors else None
            yield row, None if vector is None else np.asarray(vector, np.float32).tobytes()

    def rows(
        self, table: portable.Table, unreadable: list[dict[str, Any]]
    ) -> Iterator[tuple[Sequence[Any], Any]]:
        sql = f'SELECT {portable.select_list(table, "t")} FROM "{table.name}" t'
        for row in self._stream(f"export_{table.name}", sql):
            yield row, None

    def partial_documents(self, unreadable: list[dict[str, Any]]) -> int:
        skipped = self.conn.execute(
            "SELECT count(*) FROM documents WHERE state <> 'complete'"
        ).fetchone()
        return int(skipped[0]) if skipped else 0

    def _stream(self, name: str, sql: str) -> Iterator[Sequence[Any]]:
        """The rows of a query through a server-side cursor, in batches."""
        with self.conn.cursor(name=name) as cursor:
            cursor.execute(sql.encode())
            while rows := cursor.fetchmany(_FETCH):
                yield from rows
