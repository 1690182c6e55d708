"""Export a store as JSONL (`storage.portable` describes the format), line by line.

`export_lines` is a blocking generator over its own read-only connection, inside one read
transaction: the export is one consistent snapshot (WAL) even while the daemon keeps ingesting,
and rows are streamed, never collected. The daemon pulls it batch by batch in a worker thread;
the offline CLI iterates it directly.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

from recalld.errors import SchemaTooNewError, StoreError
from recalld.storage import portable, values
from recalld.storage.sqlite.connection import UNREADABLE, DatabaseError, connect
from recalld.storage.sqlite.schema import SCHEMA_VERSION, schema_version

logger = logging.getLogger(__name__)

_FETCH = 500


def export_lines(
    path: Path | str, *, vectors: bool, recalld_version: str
) -> Generator[str, None, None]:
    """The store at `path` as export lines (without newlines): header, rows, footer.

    Args:
        path: The store file.
        vectors: Include each chunk's vector (base64 float32).
        recalld_version: Stamped in the header.

    Raises:
        StoreError: No store at `path`, or it cannot be read.
        SchemaTooNewError: The store comes from a newer recalld.
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
        yield from _lines(conn, vectors, recalld_version)
        conn.execute("COMMIT")
    except DatabaseError as exc:
        raise StoreError(f"cannot export {path}: {exc}", data={"path": str(path)}) from exc
    finally:
        conn.close()


def _lines(conn: sqlite3.Connection, vectors: bool, recalld_version: str) -> Iterator[str]:
    version = schema_version(conn)
    if version > SCHEMA_VERSION:
        raise SchemaTooNewError(
            f"this store has schema version {version}, newer than this recalld understands "
            f"({SCHEMA_VERSION}); export it with the recalld that wrote it",
            data={"found": version, "supported": SCHEMA_VERSION},
        )
    meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    tables = portable.discover(conn)
    by_name = {t.name: t for t in tables}
    yield portable.dumps(portable.header(recalld_version, version, meta, vectors, tables))
    counts = {t.name: 0 for t in tables}
    unreadable: list[dict[str, Any]] = []
    yield from _documents(conn, by_name, vectors, counts, unreadable)
    for table in tables:
        if table.name in (portable.DOCUMENTS, portable.CHUNKS):
            continue
        columns = portable.select_list(table, "t")
        select = f'SELECT {columns}, t.rowid FROM "{table.name}" t ORDER BY t.rowid'
        for row in _fetch(conn, select, (), table.name, unreadable):
            why = values.row_problem(table.name, table.columns, row)
            if why is not None:
                unreadable.append(_skipped(table.name, row[len(table.columns)], None, why))
                continue
            yield portable.dumps({"type": table.name, "row": portable.row_dict(table, row)})
            counts[table.name] += 1
    partial = "SELECT count(*) FROM documents WHERE state != 'complete'"
    skipped = next(_fetch(conn, partial, (), portable.DOCUMENTS, unreadable), (0,))
    logger.info("exported %s", counts)
    if unreadable:
        logger.warning(
            "export skipped %d rows holding values that cannot be read back; "
            "`recalld check --repair` resets them",
            len(unreadable),
        )
    yield portable.dumps(
        {
            "type": portable.FOOTER,
            "counts": counts,
            "skipped_partial": int(skipped[0]),
            "skipped_unreadable": unreadable,
        }
    )


def _fetch(
    conn: sqlite3.Connection,
    sql: str,
    params: tuple[Any, ...],
    table: str,
    unreadable: list[dict[str, Any]],
) -> Iterator[Any]:
    """The rows of a query, in batches; a page that cannot be read (a damaged file) ends the
    query with an entry in `unreadable` instead of ending the export."""
    last: Any = None
    try:
        cursor = conn.execute(sql, params)
        while rows := cursor.fetchmany(_FETCH):
            yield from rows
            last = rows[-1][-1]
    except UNREADABLE as exc:
        where = f"after row {last}" if last is not None else "from the start"
        logger.error("export: %s cannot be read %s: %s", table, where, exc)
        unreadable.append(
            {"table": table, "id": last, "problem": f"the rows {where} cannot be read ({exc})"}
        )


def _skipped(table: str, row_id: Any, source: Any, why: str) -> dict[str, Any]:
    """A row left out of the export, as the footer lists it."""
    entry = {"table": table, "id": row_id, "problem": why}
    if isinstance(source, str):
        entry["source"] = source
    return entry


def _documents(
    conn: sqlite3.Connection,
    tables: dict[str, portable.Table],
    vectors: bool,
    counts: dict[str, int],
    unreadable: list[dict[str, Any]],
) -> Iterator[str]:
    """Each complete document, followed by its chunks (and their vectors when asked).

    A document with a value that cannot be read back, in its row or one of its chunks, is
    left out whole (its chunks cannot travel without it) and listed in `unreadable`."""
    docs, chunks = tables[portable.DOCUMENTS], tables[portable.CHUNKS]
    # Partial documents are half-written by a crash; `check --repair` completes them. The id
    # comes last too, so `_fetch` can say where a damaged page stopped it.
    doc_sql = (
        f"SELECT {portable.select_list(docs, 'd')}, d.id FROM documents d "
        "WHERE d.state = 'complete' ORDER BY d.id"
    )
    vector_sql = ", f.embedding" if vectors else ""
    vector_join = "LEFT JOIN vector_floats f ON f.chunk_id = c.id" if vectors else ""
    chunk_sql = (
        f"SELECT {portable.select_list(chunks, 'c')}{vector_sql} FROM chunks c {vector_join} "
        "WHERE c.document_id = ? ORDER BY c.position, c.id"
    )
    id_index = docs.columns.index("id")
    source_index = docs.columns.index("source")
    chunk_id = chunks.columns.index("id")
    for doc in _fetch(conn, doc_sql, (), portable.DOCUMENTS, unreadable):
        why = values.row_problem(portable.DOCUMENTS, docs.columns, doc)
        lines = (
            []
            if why is not None
            else [portable.dumps({"type": portable.DOCUMENTS, "row": portable.row_dict(docs, doc)})]
        )
        try:
            for row in conn.execute(chunk_sql, (doc[id_index],)) if why is None else ():
                why = values.row_problem(portable.CHUNKS, chunks.columns, row)
                if why is not None:
                    why = f"chunk {row[chunk_id]}: {why}"
                    break
                line: dict[str, Any] = {
                    "type": portable.CHUNKS,
                    "row": portable.row_dict(chunks, row),
                }
                if vectors and row[len(chunks.columns)] is not None:
                    line["vector"] = portable.encode_vector(bytes(row[len(chunks.columns)]))
                lines.append(portable.dumps(line))
        except UNREADABLE as exc:
            why = f"its chunks cannot be read ({exc})"
        if why is not None:
            unreadable.append(_skipped(portable.DOCUMENTS, doc[id_index], doc[source_index], why))
            continue
        yield from lines
        counts[portable.DOCUMENTS] += 1
        counts[portable.CHUNKS] += len(lines) - 1
