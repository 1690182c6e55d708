"""Export on PostgreSQL: the same JSONL as `storage.sqlite.exporter`, from one snapshot.

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

import logging
from collections.abc import Generator, Iterator
from typing import Any

import numpy as np
import psycopg

from recalld.errors import SchemaTooNewError, StoreError
from recalld.storage import portable
from recalld.storage.pg.schema import SCHEMA_VERSION
from recalld.storage.pg.store import redact

logger = logging.getLogger(__name__)

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
    ordered: list[portable.Table] = []
    seen: set[str] = set()

    def visit(name: str, path: tuple[str, ...] = ()) -> None:
        if name in seen or name not in tables or name in path:
            return
        for target in tables[name].references.values():
            if target != name:
                visit(target, (*path, name))
        seen.add(name)
        ordered.append(tables[name])

    for name in (portable.DOCUMENTS, portable.CHUNKS, *names):
        visit(name)
    return ordered


def export_lines(url: str, *, vectors: bool, recalld_version: str) -> Generator[str, None, None]:
    """The store in the database at `url` as export lines (see `storage.sqlite.exporter`).

    Raises:
        StoreError: The database cannot be reached or holds no store.
        SchemaTooNewError: The store comes from a newer recalld.
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
            yield from _lines(conn, vectors, recalld_version)
    except psycopg.Error as exc:
        raise StoreError(f"cannot export {shown}: {exc}", data={"path": shown}) from exc


def _lines(conn: psycopg.Connection[Any], vectors: bool, recalld_version: str) -> Iterator[str]:
    meta = {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta")}
    version = int(meta.get("schema_version", 0))
    if version > SCHEMA_VERSION:
        raise SchemaTooNewError(
            f"this store has schema version {version}, newer than this recalld understands "
            f"({SCHEMA_VERSION}); export it with the recalld that wrote it",
            data={"found": version, "supported": SCHEMA_VERSION},
        )
    tables = discover(conn)
    by_name = {t.name: t for t in tables}
    yield portable.dumps(
        portable.header(recalld_version, version, meta, vectors, tables, backend="postgresql")
    )
    counts = {t.name: 0 for t in tables}
    yield from _documents(conn, by_name, vectors, counts)
    for table in tables:
        if table.name in (portable.DOCUMENTS, portable.CHUNKS):
            continue
        with conn.cursor(name=f"export_{table.name}") as cursor:
            cursor.execute(
                f'SELECT {portable.select_list(table, "t")} FROM "{table.name}" t'.encode()
            )
            while rows := cursor.fetchmany(_FETCH):
                for row in rows:
                    yield portable.dumps({"type": table.name, "row": portable.row_dict(table, row)})
                counts[table.name] += len(rows)
    skipped = conn.execute("SELECT count(*) FROM documents WHERE state <> 'complete'").fetchone()
    logger.info("exported %s", counts)
    yield portable.dumps(
        {
            "type": portable.FOOTER,
            "counts": counts,
            "skipped_partial": int(skipped[0]) if skipped else 0,
        }
    )


def _documents(
    conn: psycopg.Connection[Any],
    tables: dict[str, portable.Table],
    vectors: bool,
    counts: dict[str, int],
) -> Iterator[str]:
    """Each complete document, followed by its chunks (and their vectors when asked)."""
    docs, chunks = tables[portable.DOCUMENTS], tables[portable.CHUNKS]
    vector_sql = ", v.embedding::real[]" if vectors else ""
    vector_join = "LEFT JOIN chunks_vec v ON v.chunk_id = c.id" if vectors else ""
    chunk_sql = (
        f"SELECT {portable.select_list(chunks, 'c')}{vector_sql} FROM chunks c {vector_join} "
        "WHERE c.document_id = %s ORDER BY c.position, c.id"
    )
    id_index = docs.columns.index("id")
    width = len(chunks.columns)
    with conn.cursor(name="export_documents") as doc_cursor:
        doc_cursor.execute(
            f"SELECT {portable.select_list(docs, 'd')} FROM documents d WHERE d.state = 'complete' "
            "ORDER BY d.id".encode()
        )
        while batch := doc_cursor.fetchmany(_FETCH):
            for doc in batch:
                yield portable.dumps(
                    {"type": portable.DOCUMENTS, "row": portable.row_dict(docs, doc)}
                )
                counts[portable.DOCUMENTS] += 1
                for row in conn.execute(chunk_sql.encode(), (doc[id_index],)).fetchall():
                    line: dict[str, Any] = {
                        "type": portable.CHUNKS,
                        "row": portable.row_dict(chunks, row),
                    }
                    if vectors and row[width] is not None:
                        blob = np.asarray(row[width], dtype=np.float32).tobytes()
                        line["vector"] = portable.encode_vector(blob)
                    yield portable.dumps(line)
                    counts[portable.CHUNKS] += 1
