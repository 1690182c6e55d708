"""Browsing the store (`recalld list`): documents, memories and per-source counts, a page at a
time. The SQL runs on both backends (`PgConn` takes `?` placeholders); the few spellings that
differ (prefix match, tag match) are chosen here. User text only ever arrives bound.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from recalld.storage.backend import is_postgres
from recalld.storage.readers import fetchall


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


def _prefix(conn: Any, column: str, prefixes: tuple[str, ...]) -> tuple[str, list[Any]]:
    if is_postgres(conn):
        return " OR ".join([f"starts_with({column}, ?)"] * len(prefixes)), list(prefixes)
    # A range keeps the index on `source` usable and needs no LIKE escaping.
    params: list[Any] = []
    for prefix in prefixes:
        params += [prefix, prefix + "\U0010ffff"]
    return " OR ".join([f"({column} >= ? AND {column} < ?)"] * len(prefixes)), params


def _tag(conn: Any, chunk: str) -> str:
    if is_postgres(conn):
        return f"{chunk}.tags::jsonb @> jsonb_build_array(?::text)"
    return f"EXISTS (SELECT 1 FROM json_each({chunk}.tags) j WHERE j.value = ?)"


def _where(
    conn: Any, query: ListQuery, *, kind: str, time: str, tag_scope: str
) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    if query.sources:
        sql, values = _prefix(conn, "d.source", query.sources)
        clauses.append(f"({sql})")
        params += values
    if query.kinds:
        clauses.append(f"{kind} IN ({', '.join('?' * len(query.kinds))})")
        params += list(query.kinds)
    for tag in query.tags:
        clauses.append(tag_scope.format(tag=_tag(conn, "c")))
        params.append(tag)
    if query.since is not None:
        clauses.append(f"{time} >= ?")
        params.append(query.since)
    if query.until is not None:
        clauses.append(f"{time} < ?")
        params.append(query.until)
    return " AND ".join(clauses) or "1 = 1", params


async def documents(conn: Any, query: ListQuery) -> tuple[list[dict[str, Any]], int]:
    """A page of documents (memories excluded, skipped files only when `kinds` names
    `skipped`), in source order, and how many match."""
    where, params = _where(
        conn,
        query,
        kind="d.kind",
        time="d.updated_at",
        tag_scope="EXISTS (SELECT 1 FROM chunks c WHERE c.document_id = d.id AND {tag})",
    )
    where = f"d.kind != 'memory' AND {where}"
    if "skipped" not in query.kinds:  # files no chunker takes: only when asked for
        where = f"d.kind != 'skipped' AND {where}"
    total = await fetchall(conn, f"SELECT count(*) FROM documents d WHERE {where}", params)
    rows = await fetchall(
        conn,
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


async def memories(conn: Any, query: ListQuery) -> tuple[list[dict[str, Any]], int]:
    """A page of memories, newest first, and how many match."""
    when = "COALESCE(c.event_time, c.created_at)"
    where, params = _where(conn, query, kind="c.memory_type", time=when, tag_scope="{tag}")
    where = f"c.kind = 'memory' AND {where}"
    joined = "FROM chunks c JOIN documents d ON d.id = c.document_id"
    total = await fetchall(conn, f"SELECT count(*) {joined} WHERE {where}", params)
    rows = await fetchall(
        conn,
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


async def source_counts(conn: Any, folder: str) -> dict[str, int]:
    """Documents, chunks and recorded errors under `folder` (a path, without trailing slash)."""
    prefix = (folder.rstrip("/") or "") + "/"
    docs_where, docs_params = _prefix(conn, "d.source", (prefix,))
    errors_where, errors_params = _prefix(conn, "e.source", (prefix,))
    rows = await fetchall(
        conn,
        # Skipped files (kind `skipped`, no chunks) are counted apart: `readers.skipped_files`.
        f"SELECT (SELECT count(*) FROM documents d WHERE {docs_where} AND d.kind != 'skipped'), "
        f"(SELECT COALESCE(sum(d.chunk_count), 0) FROM documents d WHERE {docs_where}), "
        f"(SELECT count(*) FROM errors e WHERE {errors_where})",
        [*docs_params, *docs_params, *errors_params],
    )
    documents_, chunks, errors = (int(v) for v in rows[0])
    return {"documents": documents_, "chunks": chunks, "errors": errors}
