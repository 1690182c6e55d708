"""Read queries: vector KNN, FTS5 BM25, chunk and document lookups.

Each function takes a reader connection from the pool. Filters become fixed SQL fragments with
bound parameters; user text only ever reaches SQLite as a bound value.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from functools import partial
from typing import Any

import aiosqlite
import numpy as np
import numpy.typing as npt

from recalld.storage import records, shared_sql
from recalld.storage.records import (
    CHUNK_COLUMNS,
    CHUNK_STATUS_COLUMNS,
    DOCUMENT_COLUMNS,
    row_to_chunk,
    row_to_document,
)
from recalld.storage.sqlite import vectors
from recalld.storage.sqlite.on_thread import RawConnection, on_thread
from recalld.types import Chunk, Document, Filters


async def fetchall(conn: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    """Run a query and return every row, in one trip to the connection's thread (a cursor
    opened, fetched and closed from here takes three, each ~0.1 ms on an idle machine and
    up to milliseconds on a busy one)."""
    return list(await conn.execute_fetchall(sql, params))


def filter_sql(filters: Filters) -> tuple[str, list[Any]]:
    """SQL conditions on `c` (chunks) and `d` (documents) for `filters`, with their parameters."""
    clauses: list[str] = []
    params: list[Any] = []
    if filters.sources:
        # A prefix match by range keeps the documents.source index usable and needs no escaping.
        parts = []
        for prefix in filters.sources:
            parts.append("(d.source >= ? AND d.source < ?)")
            params += [prefix, prefix + "\U0010ffff"]
        clauses.append("(" + " OR ".join(parts) + ")")
    for column, values in (("c.kind", filters.kinds), ("c.granularity", filters.granularities)):
        if values:
            clauses.append(f"{column} IN ({', '.join('?' * len(values))})")
            params += list(values)
    for tag in filters.tags:
        clauses.append("EXISTS (SELECT 1 FROM json_each(c.tags) WHERE json_each.value = ?)")
        params.append(tag)
    if filters.since is not None:
        clauses.append("c.event_time >= ?")
        params.append(filters.since)
    if filters.until is not None:
        clauses.append("c.event_time < ?")
        params.append(filters.until)
    if filters.project is not None:
        # This project's documents and those of no project (issue 21), never another's.
        clauses.append(
            "NOT EXISTS (SELECT 1 FROM document_projects p "
            "WHERE p.source = d.source AND p.project <> ?)"
        )
        params.append(filters.project)
    return " AND ".join(clauses) or "1", params


async def knn(
    conn: aiosqlite.Connection,
    index: vectors.VectorIndex | None,
    vector: npt.NDArray[np.float32],
    k: int,
    filters: Filters,
) -> list[tuple[int, float]]:
    """The `k` nearest chunks by cosine distance, as `(chunk_id, distance)`, nearest first.

    `index` is the store's in-memory vector index (None: search SQLite only; the writer
    connection never searches through it, as loading it takes the write lock a write holds).

    In a store of `vectors.Tuning.exact_below` chunks or more, searches without filters or
    with kind / granularity filters run the approximate cascade of `storage.sqlite.vectors`
    (Recall@10 against exact search >= 0.99, issue 7). Otherwise, without filters or with only
    one kind / granularity, the filter runs inside sqlite-vec's exact KNN; other filters scan
    exactly the matching chunks, which is both correct and no slower than the full brute-force
    KNN.
    """
    blob = np.ascontiguousarray(vector, dtype=np.float32).tobytes()
    simple = Filters(kinds=filters.kinds, granularities=filters.granularities)
    if index is not None and filters == simple:
        found = await vectors.search(conn, index, vector, k, filters.kinds, filters.granularities)
        if found is not None:
            return found
    if filters == simple and len(filters.kinds) <= 1 and len(filters.granularities) <= 1:
        sql = "SELECT chunk_id, distance FROM chunks_vec WHERE embedding MATCH ? AND k = ?"
        params: list[Any] = [blob, k]
        if filters.kinds:
            sql += " AND kind = ?"
            params.append(filters.kinds[0])
        if filters.granularities:
            sql += " AND granularity = ?"
            params.append(filters.granularities[0])
        rows = await fetchall(conn, sql + " ORDER BY distance", params)
    else:
        where, params = filter_sql(filters)
        rows = await fetchall(
            conn,
            "SELECT c.id, vec_distance_cosine(v.embedding, ?) AS distance "
            "FROM chunks c JOIN documents d ON d.id = c.document_id "
            f"JOIN chunks_vec v ON v.chunk_id = c.id WHERE {where} "
            "ORDER BY distance LIMIT ?",
            [blob, *params, k],
        )
    return [(int(r[0]), float(r[1])) for r in rows]


async def fts(
    conn: aiosqlite.Connection, expression: str, k: int, filters: Filters
) -> list[tuple[int, float]]:
    """The `k` best BM25 matches as `(chunk_id, score)`, best first; score is -bm25 (higher
    is better)."""
    if not expression:
        return []
    if filters.is_empty():
        rows = await fetchall(
            conn,
            "SELECT rowid, rank FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY rank LIMIT ?",
            (expression, k),
        )
    else:
        where, params = filter_sql(filters)
        rows = await fetchall(
            conn,
            "SELECT f.rowid, f.rank FROM chunks_fts f JOIN chunks c ON c.id = f.rowid "
            f"JOIN documents d ON d.id = c.document_id WHERE chunks_fts MATCH ? AND {where} "
            "ORDER BY f.rank LIMIT ?",
            [expression, *params, k],
        )
    return [(int(r[0]), -float(r[1])) for r in rows]


async def keyword_scores(
    conn: aiosqlite.Connection, expression: str, ids: Sequence[int]
) -> dict[int, float]:
    """`contract.Reader.keyword_scores` on FTS5 (-bm25, from the whole table's statistics).

    `+rowid` keeps the id list away from FTS5: given `rowid IN` as a constraint it runs the
    match again per id, recomputing the terms' IDFs each time. As a plain filter the match
    runs once and only the listed rows are scored (`rank` is read after the filter), where
    scoring every match and dropping the rest in Python cost ~4x as much (SciFact, 50 ids).
    """
    if not expression or not ids:
        return {}
    rows = await fetchall(
        conn,
        "SELECT rowid, rank FROM chunks_fts WHERE chunks_fts MATCH ? "
        "AND +rowid IN (SELECT value FROM json_each(?))",
        (expression, json.dumps([int(i) for i in ids])),
    )
    return {int(r[0]): -float(r[1]) for r in rows}


async def latest_event_time(conn: aiosqlite.Connection, filters: Filters) -> float | None:
    """The latest chunk event time among chunks matching `filters` (time bounds ignored):
    "now" for the relative time expressions of a question about that scope."""
    scope = dataclasses.replace(filters, since=None, until=None)
    if scope.is_empty():
        rows = await fetchall(conn, "SELECT max(event_time) FROM chunks")
    else:
        where, params = filter_sql(scope)
        rows = await fetchall(
            conn,
            "SELECT max(c.event_time) FROM chunks c JOIN documents d ON d.id = c.document_id "
            f"WHERE {where}",
            params,
        )
    return None if not rows or rows[0][0] is None else float(rows[0][0])


async def granularity_vectors(
    conn: aiosqlite.Connection, granularity: str, document_id: int | None, at_most: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]] | None:
    """The stored vectors of one granularity outside a document as `(ids, matrix)`, when there
    are at most `at_most` chunks of it (None: more; use `knn`)."""
    rows = await fetchall(conn, "SELECT count(*) FROM chunks WHERE granularity = ?", (granularity,))
    if int(rows[0][0]) > at_most:
        return None
    rows = await fetchall(
        conn,
        "SELECT c.id, f.embedding FROM chunks c JOIN vector_floats f ON f.chunk_id = c.id "
        "WHERE c.granularity = ? AND c.document_id IS NOT ?",
        (granularity, document_id),
    )
    ids = np.array([int(r[0]) for r in rows], dtype=np.int64)
    matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32)
    return ids, matrix.reshape(len(rows), -1) if rows else matrix.reshape(0, 0)


async def document_frequency(conn: aiosqlite.Connection, expression: str) -> int:
    """How many chunks match an FTS5 expression (one quoted term gives its document frequency)."""
    return (await document_frequencies(conn, [expression]))[0]


# Terms per statement in the batched lookups below (far under SQLite's column limit of 2000).
_TERMS_PER_QUERY = 200


async def document_frequencies(conn: aiosqlite.Connection, expressions: Sequence[str]) -> list[int]:
    """`document_frequency` of each expression, in one statement per 200 (one round trip to
    the connection's thread instead of one per term: ~0.1 ms each on a busy machine)."""
    found: list[int] = []
    for start in range(0, len(expressions), _TERMS_PER_QUERY):
        part = expressions[start : start + _TERMS_PER_QUERY]
        counts = ", ".join(
            ["(SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?)"] * len(part)
        )
        rows = await fetchall(conn, f"SELECT {counts}", list(part))
        found += [int(v) for v in rows[0]]
    return found


async def matched_terms(
    conn: aiosqlite.Connection, chunk_id: int, expressions: Sequence[str]
) -> list[bool]:
    """Which FTS5 expressions (one quoted term each) match one chunk, in one statement per 200."""
    found: list[bool] = []
    for start in range(0, len(expressions), _TERMS_PER_QUERY):
        part = expressions[start : start + _TERMS_PER_QUERY]
        tests = ", ".join(
            ["EXISTS (SELECT 1 FROM chunks_fts WHERE chunks_fts MATCH ? AND rowid = ?)"] * len(part)
        )
        rows = await fetchall(conn, f"SELECT {tests}", [v for e in part for v in (e, chunk_id)])
        found += [bool(v) for v in rows[0]]
    return found


async def meta_value(conn: aiosqlite.Connection, key: str) -> str | None:
    """One value of the store's `meta` table, or None."""
    rows = await fetchall(conn, "SELECT value FROM meta WHERE key = ?", (key,))
    return str(rows[0][0]) if rows else None


async def chunk_ids_by_kind(conn: aiosqlite.Connection) -> dict[str, list[int]]:
    """Every chunk id, by kind, in id order (self-calibration samples from these)."""
    out: dict[str, list[int]] = {}
    for kind, cid in await fetchall(conn, "SELECT kind, id FROM chunks ORDER BY id"):
        out.setdefault(str(kind), []).append(int(cid))
    return out


async def chunk_total(conn: aiosqlite.Connection) -> int:
    """The number of chunks."""
    rows = await fetchall(conn, "SELECT count(*) FROM chunks")
    return int(rows[0][0])


async def chunks_by_id(conn: aiosqlite.Connection, ids: Sequence[int]) -> dict[int, Chunk]:
    """Chunks with their source, by id; missing ids are left out."""
    if not ids:
        return {}
    rows = await fetchall(
        conn,
        f"SELECT {CHUNK_COLUMNS} FROM chunks c JOIN documents d ON d.id = c.document_id "
        "WHERE c.id IN (SELECT value FROM json_each(?))",
        (json.dumps(list(ids)),),
    )
    return {int(r[0]): row_to_chunk(r) for r in rows}


async def chunks_and_statuses(
    conn: aiosqlite.Connection, ids: Sequence[int], status_ids: Sequence[int]
) -> tuple[dict[int, Chunk], dict[int, str]]:
    """The chunks of `ids` and only the status of each of `status_ids`, in one statement;
    missing ids are left out of both."""
    return await on_thread(conn, partial(chunks_and_statuses_now, ids=ids, status_ids=status_ids))


def chunks_and_statuses_now(
    raw: RawConnection, ids: Sequence[int], status_ids: Sequence[int]
) -> tuple[dict[int, Chunk], dict[int, str]]:
    """`chunks_and_statuses` in the calling thread, the connection's own (`on_thread`)."""
    if not ids and not status_ids:
        return {}, {}
    rows = raw.execute(
        f"SELECT {CHUNK_COLUMNS} FROM chunks c JOIN documents d ON d.id = c.document_id "
        "WHERE c.id IN (SELECT value FROM json_each(?)) UNION ALL "
        f"SELECT {CHUNK_STATUS_COLUMNS} FROM chunks c JOIN documents d ON d.id = c.document_id "
        "WHERE c.id IN (SELECT value FROM json_each(?))",
        (json.dumps(list(ids)), json.dumps(list(status_ids))),
    )
    return records.chunks_and_statuses(rows.fetchall())


async def vectors_by_id(
    conn: aiosqlite.Connection, ids: Sequence[int], dimension: int
) -> dict[int, npt.NDArray[np.float32]]:
    """Stored vectors by chunk id.

    Read from `vector_floats`, the cascade's plain copy of `chunks_vec` (the same bytes,
    written in the same transactions; `check` verifies the mirror): its primary key makes this
    a few point lookups, where vec0 answers `chunk_id IN (...)` by scanning its whole table
    (SciFact, 14k chunks, 34 ids: 0.2 ms against 32 ms; 100k chunks, 50 ids: 0.5 ms against
    ~200 ms).
    """
    if not ids:
        return {}
    return await on_thread(conn, partial(vectors_by_id_now, ids=ids, dimension=dimension))


def vectors_by_id_now(
    raw: RawConnection, ids: Sequence[int], dimension: int
) -> dict[int, npt.NDArray[np.float32]]:
    """`vectors_by_id` in the calling thread, on a reader's own connection `raw` (in its
    thread: storage/sqlite/routes.py)."""
    if not ids:
        return {}
    rows = raw.execute(
        "SELECT chunk_id, embedding FROM vector_floats WHERE chunk_id IN "
        "(SELECT value FROM json_each(?))",
        (json.dumps([int(i) for i in ids]),),
    )
    return {int(r[0]): np.frombuffer(r[1], dtype=np.float32, count=dimension) for r in rows}


async def child_facts(
    conn: aiosqlite.Connection, chunk_ids: Sequence[int], dimension: int
) -> list[tuple[int, int, npt.NDArray[np.float32]]]:
    """Each fact below `chunk_ids` with its parent and its stored vector (`Reader.child_facts`),
    in one statement where fact matching made three reads (every link of the candidates,
    temporal ones too, then the facts' granularity, then their vectors)."""
    if not chunk_ids:
        return []
    rows = await fetchall(conn, _CHILD_FACTS_SQL, (json.dumps([int(i) for i in chunk_ids]),))
    return [
        (int(r[0]), int(r[1]), np.frombuffer(r[2], dtype=np.float32, count=dimension)) for r in rows
    ]


_CHILD_FACTS_SQL = (
    "SELECT l.src, l.dst, v.embedding FROM links l "
    "JOIN chunks c ON c.id = l.src JOIN documents d ON d.id = c.document_id "
    "JOIN vector_floats v ON v.chunk_id = l.src "
    "WHERE l.dst IN (SELECT value FROM json_each(?1)) AND l.relation = 'parent' "
    "AND c.granularity = 'fact' AND l.src NOT IN (SELECT value FROM json_each(?1))"
)


async def neighbours(
    conn: aiosqlite.Connection, document_id: int, position: int, window: int
) -> list[Chunk]:
    """The chunks within `window` positions of `position` in a document, in order."""
    rows = await fetchall(
        conn,
        f"SELECT {CHUNK_COLUMNS} FROM chunks c JOIN documents d ON d.id = c.document_id "
        "WHERE c.document_id = ? AND c.position BETWEEN ? AND ? ORDER BY c.position",
        (document_id, position - window, position + window),
    )
    return [row_to_chunk(r) for r in rows]


async def document_by_source(conn: aiosqlite.Connection, source: str) -> Document | None:
    """The document stored for `source`, if any."""
    rows = await fetchall(
        conn, f"SELECT {DOCUMENT_COLUMNS} FROM documents WHERE source = ?", (source,)
    )
    return row_to_document(rows[0]) if rows else None


async def documents_by_source(
    conn: aiosqlite.Connection, sources: Sequence[str]
) -> dict[str, Document]:
    """The documents stored for `sources`, by source."""
    if not sources:
        return {}
    rows = await fetchall(
        conn,
        f"SELECT {DOCUMENT_COLUMNS} FROM documents "
        "WHERE source IN (SELECT value FROM json_each(?))",
        (json.dumps(list(sources)),),
    )
    found = (row_to_document(row) for row in rows)
    return {doc.source: doc for doc in found}


async def chunk_keys(conn: aiosqlite.Connection, document_id: int) -> dict[str, str]:
    """`{key: content_hash}` of a document's stored chunks, to skip re-embedding unchanged ones."""
    rows = await fetchall(
        conn, "SELECT key, content_hash FROM chunks WHERE document_id = ?", (document_id,)
    )
    return {str(r[0]): str(r[1]) for r in rows}


async def documents(
    conn: aiosqlite.Connection, prefix: str = "", limit: int = 1000
) -> list[Document]:
    """Documents whose source starts with `prefix`, in source order."""
    rows = await fetchall(
        conn,
        f"SELECT {DOCUMENT_COLUMNS} FROM documents WHERE source >= ? AND source < ? "
        "ORDER BY source LIMIT ?",
        (prefix, prefix + "\U0010ffff", limit),
    )
    return [row_to_document(r) for r in rows]


async def counts(conn: aiosqlite.Connection) -> dict[str, int]:
    """Row counts for `status`."""
    rows = await fetchall(conn, shared_sql.STATUS_COUNTS)
    return shared_sql.status_counts(rows[0])


async def redacted_chunks(conn: aiosqlite.Connection) -> int:
    """For `status`: how many chunks hold a `[REDACTED:<type>]` marker."""
    # The FTS index finds the few chunks with the marker's word; their meta confirms it.
    rows = await fetchall(
        conn,
        "SELECT count(*) FROM chunks WHERE id IN "
        "(SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH 'redacted') "
        "AND meta LIKE '%\"redacted\"%'",
    )
    return int(rows[0][0])


async def skipped_files(conn: aiosqlite.Connection, prefix: str = "") -> dict[str, int]:
    """Files no chunker takes under `prefix`, by type: documents of kind `skipped`, whose
    content hash is `skipped:<type>`."""
    rows = await fetchall(
        conn,
        "SELECT content_hash, count(*) FROM documents WHERE kind = 'skipped' "
        "AND source >= ? AND source < ? GROUP BY content_hash",
        (prefix, prefix + "\U0010ffff"),
    )
    return {str(r[0]).partition(":")[2]: int(r[1]) for r in rows}


async def errors(conn: aiosqlite.Connection, limit: int = 100) -> list[dict[str, Any]]:
    """The most recent ingest errors."""
    rows = await fetchall(
        conn,
        "SELECT id, source, error_type, message, at FROM errors ORDER BY id DESC LIMIT ?",
        (limit,),
    )
    return [{"id": r[0], "source": r[1], "type": r[2], "message": r[3], "at": r[4]} for r in rows]
