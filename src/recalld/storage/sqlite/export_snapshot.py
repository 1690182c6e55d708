"""An export's snapshot of a SQLite store (`contract.ExportSnapshot`; `storage.exporter` writes
the lines): its own read-only connection inside one read transaction, consistent under WAL
while the daemon keeps ingesting.

A page that cannot be read (a damaged file) ends a query with an entry in the export's
`unreadable` list instead of ending the export; text that is not UTF-8 is read as
`values.Undecodable`, so its row is skipped, not exported.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from recalld.errors import StoreError
from recalld.storage import portable, values
from recalld.storage.contract import ExportSnapshot, UnreadableRows
from recalld.storage.sqlite.connection import UNREADABLE, DatabaseError, connect
from recalld.storage.sqlite.schema import SCHEMA_VERSION, schema_version

logger = logging.getLogger(__name__)

_FETCH = 500


@contextlib.contextmanager
def export_snapshot(path: Path | str) -> Iterator[ExportSnapshot]:
    """One read transaction on the store file at `path`.

    Raises:
        StoreError: No store at `path`, or it cannot be read.
    """
    path = Path(path)
    if not path.exists():
        raise StoreError(
            f"no store at {path}; nothing to export", data={"path": str(path), "reason": "missing"}
        )
    conn = connect(path, readonly=True)
    conn.text_factory = values.decode_text  # text that is not UTF-8 is skipped, not exported
    try:
        conn.execute("BEGIN")  # one snapshot for the whole export
        yield SqliteSnapshot(conn)
        conn.execute("COMMIT")
    except DatabaseError as exc:
        raise StoreError(f"cannot export {path}: {exc}", data={"path": str(path)}) from exc
    finally:
        conn.close()


class SqliteSnapshot(ExportSnapshot):
    """The reads of an export, on one connection in a read transaction."""

    newest_schema = SCHEMA_VERSION
    checks_values = True

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    @property
    def header_extra(self) -> dict[str, Any]:
        return {}

    def schema_version(self) -> int:
        return schema_version(self.conn)

    def meta(self) -> dict[str, str]:
        return dict(self.conn.execute("SELECT key, value FROM meta").fetchall())

    def tables(self) -> list[portable.Table]:
        return portable.discover(self.conn)

    def documents(
        self, table: portable.Table, unreadable: list[dict[str, Any]]
    ) -> Iterator[Sequence[Any]]:
        # The id comes last too, so `_fetch` can say where a damaged page stopped it.
        sql = (
            f"SELECT {portable.select_list(table, 'd')}, d.id FROM documents d "
            "WHERE d.state = 'complete' ORDER BY d.id"
        )
        return self._fetch(sql, table.name, unreadable)

    def chunks_of(
        self, table: portable.Table, document_id: Any, vectors: bool
    ) -> Iterator[tuple[Sequence[Any], bytes | None]]:
        vector_sql = ", f.embedding" if vectors else ""
        vector_join = "LEFT JOIN vector_floats f ON f.chunk_id = c.id" if vectors else ""
        sql = (
            f"SELECT {portable.select_list(table, 'c')}{vector_sql} FROM chunks c {vector_join} "
            "WHERE c.document_id = ? ORDER BY c.position, c.id"
        )
        width = len(table.columns)
        try:
            for row in self.conn.execute(sql, (document_id,)):
                blob = row[width] if vectors else None
                yield row, None if blob is None else bytes(blob)
        except UNREADABLE as exc:
            raise UnreadableRows(str(exc)) from exc

    def rows(
        self, table: portable.Table, unreadable: list[dict[str, Any]]
    ) -> Iterator[tuple[Sequence[Any], Any]]:
        columns = portable.select_list(table, "t")
        sql = f'SELECT {columns}, t.rowid FROM "{table.name}" t ORDER BY t.rowid'
        for row in self._fetch(sql, table.name, unreadable):
            yield row, row[len(table.columns)]

    def partial_documents(self, unreadable: list[dict[str, Any]]) -> int:
        partial = "SELECT count(*) FROM documents WHERE state != 'complete'"
        return int(next(self._fetch(partial, portable.DOCUMENTS, unreadable), (0,))[0])

    def _fetch(self, sql: str, table: str, unreadable: list[dict[str, Any]]) -> Iterator[Any]:
        """The rows of a query, in batches; a page that cannot be read ends the query with an
        entry in `unreadable` instead of ending the export."""
        last: Any = None
        try:
            cursor = self.conn.execute(sql)
            while rows := cursor.fetchmany(_FETCH):
                yield from rows
                last = rows[-1][-1]
        except UNREADABLE as exc:
            where = f"after row {last}" if last is not None else "from the start"
            logger.error("export: %s cannot be read %s: %s", table, where, exc)
            unreadable.append(
                {"table": table, "id": last, "problem": f"the rows {where} cannot be read ({exc})"}
            )
