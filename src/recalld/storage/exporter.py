"""Export a store as JSONL (`storage.portable` describes the format), line by line, on any
backend: everything is read through one `contract.ExportSnapshot`.

The snapshot is one read transaction (a consistent view while the daemon keeps ingesting), and
rows are streamed, never collected. The daemon pulls the lines batch by batch in a worker
thread; the offline CLI iterates them directly.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from recalld.errors import SchemaTooNewError
from recalld.storage import portable, values
from recalld.storage.contract import ExportSnapshot, UnreadableRows

logger = logging.getLogger(__name__)


def lines(snapshot: ExportSnapshot, vectors: bool, recalld_version: str) -> Iterator[str]:
    """The export lines (without newlines): header, rows, footer.

    Raises:
        SchemaTooNewError: The store comes from a newer recalld.
    """
    version = snapshot.schema_version()
    newest = snapshot.newest_schema
    if version > newest:
        raise SchemaTooNewError(
            f"this store has schema version {version}, newer than this recalld understands "
            f"({newest}); export it with the recalld that wrote it",
            data={"found": version, "supported": newest},
        )
    meta = snapshot.meta()
    tables = snapshot.tables()
    by_name = {t.name: t for t in tables}
    yield portable.dumps(
        portable.header(recalld_version, version, meta, vectors, tables, **snapshot.header_extra)
    )
    counts = {t.name: 0 for t in tables}
    unreadable: list[dict[str, Any]] = []
    yield from _documents(snapshot, by_name, vectors, counts, unreadable)
    for table in tables:
        if table.name in (portable.DOCUMENTS, portable.CHUNKS):
            continue
        for row, row_id in snapshot.rows(table, unreadable):
            why = _problem(snapshot, table, row)
            if why is not None:
                unreadable.append(_skipped(table.name, row_id, None, why))
                continue
            yield portable.dumps({"type": table.name, "row": portable.row_dict(table, row)})
            counts[table.name] += 1
    skipped = snapshot.partial_documents(unreadable)
    logger.info("exported %s", counts)
    if unreadable:
        logger.warning(
            "export skipped %d rows holding values that cannot be read back; "
            "`recalld check --repair` resets them",
            len(unreadable),
        )
    footer: dict[str, Any] = {"type": portable.FOOTER, "counts": counts, "skipped_partial": skipped}
    if snapshot.checks_values:
        footer["skipped_unreadable"] = unreadable
    yield portable.dumps(footer)


def _problem(snapshot: ExportSnapshot, table: portable.Table, row: Any) -> str | None:
    if not snapshot.checks_values:
        return None
    return values.row_problem(table.name, table.columns, row)


def _skipped(table: str, row_id: Any, source: Any, why: str) -> dict[str, Any]:
    """A row left out of the export, as the footer lists it."""
    entry = {"table": table, "id": row_id, "problem": why}
    if isinstance(source, str):
        entry["source"] = source
    return entry


def _documents(
    snapshot: ExportSnapshot,
    tables: dict[str, portable.Table],
    vectors: bool,
    counts: dict[str, int],
    unreadable: list[dict[str, Any]],
) -> Iterator[str]:
    """Each complete document, followed by its chunks (and their vectors when asked).

    A document with a value that cannot be read back, in its row or one of its chunks, is
    left out whole (its chunks cannot travel without it) and listed in `unreadable`."""
    docs, chunks = tables[portable.DOCUMENTS], tables[portable.CHUNKS]
    id_index = docs.columns.index("id")
    source_index = docs.columns.index("source")
    chunk_id = chunks.columns.index("id")
    for doc in snapshot.documents(docs, unreadable):
        why = _problem(snapshot, docs, doc)
        lines = (
            []
            if why is not None
            else [portable.dumps({"type": portable.DOCUMENTS, "row": portable.row_dict(docs, doc)})]
        )
        try:
            for row, vector in (
                snapshot.chunks_of(chunks, doc[id_index], vectors) if why is None else ()
            ):
                why = _problem(snapshot, chunks, row)
                if why is not None:
                    why = f"chunk {row[chunk_id]}: {why}"
                    break
                line: dict[str, Any] = {
                    "type": portable.CHUNKS,
                    "row": portable.row_dict(chunks, row),
                }
                if vector is not None:
                    line["vector"] = portable.encode_vector(vector)
                lines.append(portable.dumps(line))
        except UnreadableRows as exc:
            why = f"its chunks cannot be read ({exc})"
        if why is not None:
            unreadable.append(_skipped(portable.DOCUMENTS, doc[id_index], doc[source_index], why))
            continue
        yield from lines
        counts[portable.DOCUMENTS] += 1
        counts[portable.CHUNKS] += len(lines) - 1
