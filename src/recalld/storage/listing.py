"""Browsing the store (`recalld list`): documents, memories and per-source counts, a page at a
time. The SQL runs on both backends (`Reader.fetchall` takes `?` placeholders); the two spellings
that differ (prefix match, tag match) come from the reader. User text only ever arrives bound.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from recalld.storage.contract import Reader


@dataclass(frozen=True, slots=True)
class ListQuery:
    """What to list.

    Attributes:
        sources: Source prefixes (a folder lists everything under it).
        kinds: Documents: their kind (text, code, conversation); memories: their type.
        tags: Every tag must be present (on a document: on one of its chunks).
        since, until: Unix times; documents by when they were last stored, memories by their
            event time (or, without one, when they were stored).
        limit, offset: The page.
    """

    sources: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    since: float | None = None
    until: float | None = None
    limit: int = 50
    offset: int = 0


def _where(
    reader: Reader, query: ListQuery, *, kind: str, time: str, tag_scope: str
) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    if query.sources:
        sql, values = reader.prefix_match("d.source", query.sources)
        clauses.append(f"({sql})")
        params += values
    if query.kinds:
        clauses.append(f"{kind} IN ({', '.join('?' * len(query.kinds))})")
        params += list(query.kinds)
    for tag in query.tags:
        clauses.append(tag_scope.format(tag=reader.tag_match("c")))
        params.append(tag)
    if query.since is not None:
        clauses.append(f"{time} >= ?")
        params.append(query.since)
    if query.until is not None:
        clauses.append(f"{time} < ?")
        params.append(query.until)
    return " AND ".join(clauses) or "1 = 1", params


async def documents(reader: Reader, query: ListQuery) -> tuple[list[dict[str, Any]], int]:
    """A page of documents (memories excluded, skipped files only when `kinds` names
    `skipped`), in source order, and how many match."""
    where, params = _where(
        reader,
        query,
        kind="d.kind",
        time="d.updated_at",
        tag_scope="EXISTS (SELECT 1 FROM chunks c WHERE c.document_id = d.id AND {tag})",
    )
    where = f"d.kind != 'memory' AND {where}"
    if "skipped" not in query.kinds:  # files no chunker takes: only when asked for
        where = f"d.kind != 'skipped' AND {where}"
    total = await reader.fetchall(f"SELECT count(*) FROM documents d WHERE {where}", params)
    rows = await reader.fetchall(
        "SELECT d.id, d.source, d.kind, d.format, d.state, d.chunk_count, d.created_at, "
        f"d.updated_at, d.size FROM documents d WHERE {where} ORDER BY d.source LIMIT ? OFFSET ?",
        [*params, query.limit, query.offset],
    )
    items = [
        {
            "id": int(r[0]),
            "source": r[1],
            "kind": r[2],
            "format": r[3],
            "state": r[4],
            "chunks": int(r[5]),
            "created_at": r[6],
            "updated_at": r[7],
            "size": None if r[8] is None else int(r[8]),
        }
        for r in rows
    ]
    return items, int(total[0][0])


async def memories(reader: Reader, query: ListQuery) -> tuple[list[dict[str, Any]], int]:
    """A page of memories, newest first, and how many match."""
    when = "COALESCE(c.event_time, c.created_at)"
    where, params = _where(reader, query, kind="c.memory_type", time=when, tag_scope="{tag}")
    where = f"c.kind = 'memory' AND {where}"
    joined = "FROM chunks c JOIN documents d ON d.id = c.document_id"
    total = await reader.fetchall(f"SELECT count(*) {joined} WHERE {where}", params)
    rows = await reader.fetchall(
        "SELECT c.id, d.source, c.text, c.memory_type, c.tags, c.importance, c.event_time, "
        f"c.created_at, c.status {joined} WHERE {where} ORDER BY {when} DESC, c.id DESC "
        "LIMIT ? OFFSET ?",
        [*params, query.limit, query.offset],
    )
    items = [
        {
            "id": int(r[0]),
            "source": r[1],
            "text": r[2],
            "type": r[3],
            "tags": json.loads(r[4]),
            "importance": r[5],
            "event_time": r[6],
            "created_at": r[7],
            "status": r[8],
        }
        for r in rows
    ]
    return items, int(total[0][0])


async def source_counts(reader: Reader, folder: str) -> dict[str, int]:
    """Documents, chunks and recorded errors under `folder` (a path, without trailing slash)."""
    prefix = (folder.rstrip("/") or "") + "/"
    docs_where, docs_params = reader.prefix_match("d.source", (prefix,))
    errors_where, errors_params = reader.prefix_match("e.source", (prefix,))
    # Skipped files (kind `skipped`, no chunks) are counted apart: `Reader.skipped_files`.
    rows = await reader.fetchall(
        f"SELECT (SELECT count(*) FROM documents d WHERE {docs_where} AND d.kind != 'skipped'), "
        f"(SELECT COALESCE(sum(d.chunk_count), 0) FROM documents d WHERE {docs_where}), "
        f"(SELECT count(*) FROM errors e WHERE {errors_where})",
        [*docs_params, *docs_params, *errors_params],
    )
    documents_, chunks, errors = (int(v) for v in rows[0])
    return {"documents": documents_, "chunks": chunks, "errors": errors}
