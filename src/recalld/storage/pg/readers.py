"""Read queries on PostgreSQL: the `contract.Reader` operations `pg.access` calls.

Keyword recall receives the FTS5 expression the retrieval layer built (`storage.fts`: quoted
terms joined by OR) and turns each quoted term back into a `tsquery` phrase (`recalld_term`:
English stems or the literal tokens, see `pg.schema`). User text only ever reaches SQL as a
bound value.

Scores differ from SQLite's on purpose but mean the same thing: the SQLite route returns
-bm25 (higher is better); here each matching term adds its BM25 IDF times `ts_rank` of the
term (term frequency, normalised by 1 + log of the chunk's length), which ranks like BM25 —
rare terms and repeated terms count more — on a different scale. Fusion only uses the ranks
(RRF) or min-max normalised scores, so the scale does not matter.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from recalld.storage import records, shared_sql
from recalld.storage.pg import term_stats
from recalld.storage.pg.handle import PgConn
from recalld.storage.records import (
    CHUNK_COLUMNS,
    CHUNK_STATUS_COLUMNS,
    DOCUMENT_COLUMNS,
    row_to_chunk,
    row_to_document,
)
from recalld.types import Chunk, Document, Filters

_QUOTED = re.compile(r'"((?:[^"]|"")*)"')
# HNSW candidate list: at least pgvector's default, and never fewer than the rows asked for.
_EF_SEARCH_MIN = 100


_ITERATIVE_SCAN = "strict_order"


def read_settings(timeout_ms: int) -> bytes:
    """The statement that opens each of a read's queries: read only, the query time limit and
    the HNSW scan settings `knn` wants for up to `_EF_SEARCH_MIN` rows. `PgConn` sends it with
    the query in one round trip (psycopg's pipeline), where both share one implicit
    transaction, so the settings hold for that query and end with it and no COMMIT is sent.
    A read's queries see a fresh snapshot each, as they did in its READ COMMITTED transaction.
    JIT compilation is off: a server built with it first compiles each query the planner costs
    above `jit_above_cost` (an exact vector scan of a big store), which costs short queries more
    than it saves them (not measured: the bundled server has no JIT).
    """
    return (
        f"SELECT set_config('transaction_read_only', 'on', true), "
        "set_config('jit', 'off', true), "
        f"set_config('statement_timeout', '{int(timeout_ms)}', true), "
        f"set_config('hnsw.ef_search', '{_EF_SEARCH_MIN}', true), "
        f"set_config('hnsw.iterative_scan', '{_ITERATIVE_SCAN}', true)"
    ).encode()


def terms_of(expression: str) -> list[str]:
    """The terms of an FTS5 expression built by `storage.fts.match_expression`."""
    return [m.group(1).replace('""', '"') for m in _QUOTED.finditer(expression)]


def filter_sql(filters: Filters) -> tuple[str, list[Any]]:
    """SQL conditions on `c` (chunks) and `d` (documents) for `filters`, with parameters."""
    clauses: list[str] = []
    params: list[Any] = []
    if filters.sources:
        clauses.append(
            "(" + " OR ".join(["starts_with(d.source, %s)"] * len(filters.sources)) + ")"
        )
        params += list(filters.sources)
    for column, values in (("c.kind", filters.kinds), ("c.granularity", filters.granularities)):
        if values:
            clauses.append(f"{column} = ANY(%s)")
            params.append(list(values))
    for tag in filters.tags:
        clauses.append("c.tags::jsonb @> jsonb_build_array(%s::text)")
        params.append(tag)
    if filters.since is not None:
        clauses.append("c.event_time >= %s")
        params.append(filters.since)
    if filters.until is not None:
        clauses.append("c.event_time < %s")
        params.append(filters.until)
    if filters.project is not None:
        clauses.append(
            "NOT EXISTS (SELECT 1 FROM document_projects p "
            "WHERE p.scope = d.scope AND p.source = d.source AND p.project <> %s)"
        )
        params.append(filters.project)
    return " AND ".join(clauses) or "true", params


async def fetchall(conn: PgConn, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    """Run a query (`?` placeholders, as on SQLite) and return every row."""
    return await conn.fetchall(sql, params)


async def knn(
    conn: PgConn, vector: npt.NDArray[np.float32], k: int, filters: Filters
) -> list[tuple[int, float]]:
    """The `k` nearest chunks by cosine distance, as `(chunk_id, distance)`, nearest first.

    Without filters, or with kind / granularity filters, the HNSW index answers (with an
    iterative scan, so filtered searches still find `k`); other filters scan exactly the
    matching chunks, as on SQLite.
    """
    query = np.ascontiguousarray(vector, dtype=np.float32)
    simple = Filters(kinds=filters.kinds, granularities=filters.granularities)
    if filters == simple:
        settings = None
        if not conn.hnsw_set or k > _EF_SEARCH_MIN:
            ef_search = str(min(1000, max(_EF_SEARCH_MIN, k)))
            settings = {"hnsw.ef_search": ef_search, "hnsw.iterative_scan": _ITERATIVE_SCAN}
        where, params = filter_sql(filters)
        rows = await conn.fetch(
            "SELECT v.chunk_id, v.embedding <=> %s AS distance FROM chunks_vec v "
            f"WHERE {where.replace('c.', 'v.')} ORDER BY v.embedding <=> %s LIMIT %s",
            [query, *params, query, k],
            settings=settings,
        )
        return [(int(r[0]), float(r[1])) for r in rows]
    return await exact_knn(conn, vector, k, filters)


# The query's distinct terms with their BM25 IDF, for `fts` and `keyword_scores` alike, from
# each term's document frequency and the chunk total (`term_stats`: counted once per store
# generation). MATERIALIZED: each term's tsquery is built once, not once per row, and the GIN
# index then answers `tsv @@ q` for each term.
_WEIGHTED_TERMS = (
    "WITH terms AS MATERIALIZED (SELECT DISTINCT ON (q) q, n FROM (SELECT recalld_term(t) AS q, n "
    "  FROM unnest(%s::text[], %s::bigint[]) AS u(t, n)) x WHERE numnode(q) > 0 ORDER BY q, n), "
    "weighted AS MATERIALIZED (SELECT q, "
    "  ln(1 + (greatest(%s::bigint, n) - n + 0.5) / (n + 0.5)) AS idf FROM terms) "
)


async def _term_weights(conn: PgConn, terms: list[str]) -> list[Any]:
    """The parameters of `_WEIGHTED_TERMS`: the terms, their document frequencies, the total."""
    stats = conn.term_stats
    if stats is None:
        return [terms, await term_stats.count(conn, terms), await term_stats.total(conn)]
    return [terms, await stats.frequencies(conn, terms), await stats.chunk_total(conn)]


# Which of the checked terms each of the best `depth` hits contains (`matched_terms`' query,
# for the row `top.id`), evaluated in the keyword query itself: no round trip of its own.
_MATCHED = (
    "CASE WHEN top.rank <= %s THEN ARRAY(SELECT coalesce(x.tsv @@ recalld_term(u.t), false) "
    "FROM unnest(%s::text[]) WITH ORDINALITY AS u(t, n) LEFT JOIN chunks x ON x.id = top.id "
    "ORDER BY u.n) END"
)


def _ranked(hits: str) -> str:
    """`hits` (a query of `(id, score)`, best first, `k` rows) with each row's rank and, for the
    best `depth`, its matched terms (`_MATCHED`): rows `(id, score, matched or NULL)`."""
    return (
        f"SELECT top.id, top.score, {_MATCHED} FROM (SELECT id, score, "
        f"row_number() OVER (ORDER BY score DESC, id) AS rank FROM ({hits}) s) top"
    )


# `fts` without filters when no term is counted yet: one pass over the (term, chunk) matches
# gives both each term's document frequency (the IDF's, and `term_stats`' to keep) and the
# scores. The sums add each chunk's terms in the same order as `_WEIGHTED_TERMS`' join (terms
# sorted by tsquery), so scores are the same floats. Rows of kind 0 are hits `(0, id, score,
# matched)`, kind 1 the counts `(1, term's position, count, NULL)`.
_COUNTED_FTS = (
    "WITH terms AS MATERIALIZED (SELECT DISTINCT ON (q) q FROM (SELECT recalld_term(t) AS q "
    "  FROM unnest(%s::text[]) AS u(t)) x WHERE numnode(q) > 0 ORDER BY q), "
    "matches AS MATERIALIZED (SELECT w.q, c.id, ts_rank(c.tsv, w.q, 1) AS r "
    "  FROM terms w JOIN chunks c ON c.tsv @@ w.q), "
    "counted AS MATERIALIZED (SELECT q, count(*) AS n FROM matches GROUP BY q), "
    "weighted AS MATERIALIZED (SELECT q, "
    "  ln(1 + (greatest(%s::bigint, n) - n + 0.5) / (n + 0.5)) AS idf FROM counted) "
    "SELECT 0, ranked.* FROM ("
    + _ranked(
        "SELECT m.id, sum(w.idf * m.r) AS score FROM matches m JOIN weighted w ON w.q = m.q "
        "GROUP BY m.id ORDER BY score DESC, m.id LIMIT %s"
    )
    + ") ranked "
    "UNION ALL SELECT 1, u.n, coalesce(c.n, 0), NULL FROM unnest(%s::text[]) "
    "WITH ORDINALITY AS u(t, n) LEFT JOIN counted c ON c.q = recalld_term(u.t)"
)

# Hits `(id, score, matched terms or None)`, best first.
Ranked = list[tuple[int, float, list[bool] | None]]
# `_MATCHED`'s parameters: how many of the best hits to check, and the terms to check.
_Checks = tuple[int, list[str]]


async def _counted_fts(
    conn: PgConn, stats: term_stats.TermStats, terms: list[str], k: int, checks: _Checks
) -> Ranked | None:
    """`fts` without filters that counts the terms in its own pass (`_COUNTED_FTS`) and gives
    the counts to `stats`; None when another search counts (or counted) one of them."""
    mine = stats.unclaimed(terms)
    if mine is None:
        return None
    claimed = list(mine)
    try:
        total = await stats.chunk_total(conn)
        rows = await conn.fetch(_COUNTED_FTS, [claimed, total, *checks, k, claimed])
    except BaseException as exc:
        stats.abandon(mine, exc)
        raise
    found = dict.fromkeys(range(1, len(claimed) + 1), 0)
    found.update((int(r[1]), int(r[2])) for r in rows if r[0] == 1)
    stats.settle(mine, list(found.values()))
    hits = [(int(r[1]), float(r[2]), r[3]) for r in rows if r[0] == 0]
    return sorted(hits, key=lambda hit: (-hit[1], hit[0]))  # UNION ALL promises no order


async def _ranked_fts(
    conn: PgConn, expression: str, k: int, filters: Filters, checks: _Checks
) -> Ranked:
    terms = terms_of(expression)
    if not terms:
        return []
    if conn.term_stats is not None and filters.is_empty():
        hits = await _counted_fts(conn, conn.term_stats, terms, k, checks)
        if hits is not None:
            return hits
    where, params = filter_sql(filters)
    join = "" if filters.is_empty() else "JOIN documents d ON d.id = c.document_id"
    query = _ranked(
        "SELECT c.id, sum(w.idf * ts_rank(c.tsv, w.q, 1)) AS score "
        f"FROM weighted w JOIN chunks c ON c.tsv @@ w.q {join} WHERE {where} "
        "GROUP BY c.id ORDER BY score DESC, c.id LIMIT %s"
    )
    rows = await conn.fetch(
        _WEIGHTED_TERMS + query + " ORDER BY top.rank",
        [*await _term_weights(conn, terms), *checks, *params, k],
    )
    return [(int(r[0]), float(r[1]), r[2]) for r in rows]


async def fts(conn: PgConn, expression: str, k: int, filters: Filters) -> list[tuple[int, float]]:
    """The `k` best keyword matches as `(chunk_id, score)`, best first (see module docstring)."""
    return [
        (cid, score) for cid, score, _ in await _ranked_fts(conn, expression, k, filters, (0, []))
    ]


async def keyword_search(
    conn: PgConn,
    expression: str,
    k: int,
    filters: Filters,
    expressions: Sequence[str],
    depth: int,
) -> tuple[list[tuple[int, float]], list[list[bool]]]:
    """`fts`, and `matched_terms(hit, expressions)` of its best `depth` hits, in one query."""
    checked = [" ".join(terms_of(e)) for e in expressions]
    ranked = await _ranked_fts(conn, expression, k, filters, (depth, checked))
    matched = [[bool(m) for m in found or []] for _, _, found in ranked[:depth]]
    return [(cid, score) for cid, score, _ in ranked], matched


async def keyword_scores(conn: PgConn, expression: str, ids: Sequence[int]) -> dict[int, float]:
    """The keyword score `fts` would give each chunk in `ids` that matches `expression`."""
    terms = terms_of(expression)
    if not terms or not ids:
        return {}
    rows = await conn.fetch(
        _WEIGHTED_TERMS + "SELECT c.id, sum(w.idf * ts_rank(c.tsv, w.q, 1)) AS score "
        "FROM weighted w JOIN chunks c ON c.tsv @@ w.q WHERE c.id = ANY(%s) GROUP BY c.id",
        [*await _term_weights(conn, terms), list(ids)],
    )
    return {int(r[0]): float(r[1]) for r in rows}


async def latest_event_time(conn: PgConn, filters: Filters) -> float | None:
    """The latest chunk event time among chunks matching `filters` (time bounds ignored)."""
    scope = dataclasses.replace(filters, since=None, until=None)
    where, params = filter_sql(scope)
    rows = await conn.fetch(
        "SELECT max(c.event_time) FROM chunks c JOIN documents d ON d.id = c.document_id "
        f"WHERE {where}",
        params,
    )
    return None if not rows or rows[0][0] is None else float(rows[0][0])


async def granularity_vectors(
    conn: PgConn, granularity: str, document_id: int | None, at_most: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]] | None:
    """The stored vectors of one granularity outside a document as `(ids, matrix)`, when there
    are at most `at_most` chunks of it (None: more; use `knn`)."""
    rows = await conn.fetch("SELECT count(*) FROM chunks WHERE granularity = %s", [granularity])
    if int(rows[0][0]) > at_most:
        return None
    rows = await conn.fetch(
        "SELECT c.id, v.embedding::real[] FROM chunks c JOIN chunks_vec v ON v.chunk_id = c.id "
        "WHERE c.granularity = %s AND c.document_id IS DISTINCT FROM %s::bigint",
        [granularity, document_id],
    )
    ids = np.array([int(r[0]) for r in rows], dtype=np.int64)
    if not rows:
        return ids, np.zeros((0, 0), dtype=np.float32)
    return ids, np.asarray([r[1] for r in rows], dtype=np.float32)


async def document_frequency(conn: PgConn, expression: str) -> int:
    """How many chunks match an expression (one quoted term gives its document frequency)."""
    terms = terms_of(expression)
    if not terms:
        return 0
    query = " || ".join(["recalld_term(%s)"] * len(terms))
    rows = await conn.fetch(f"SELECT count(*) FROM chunks WHERE tsv @@ ({query})", terms)
    return int(rows[0][0])


async def document_frequencies(conn: PgConn, expressions: Sequence[str]) -> list[int]:
    """`document_frequency` of each expression: from the store's term statistics when each is
    one term (the retrieval layer's case), else in one statement (one count per column)."""
    split = [terms_of(e) for e in expressions]
    if conn.term_stats is not None and all(len(t) == 1 for t in split):
        return await conn.term_stats.frequencies(conn, [t[0] for t in split])
    counts: list[str] = []
    params: list[str] = []
    for terms in split:
        if terms:
            query = " || ".join(["recalld_term(%s)"] * len(terms))
            counts.append(f"(SELECT count(*) FROM chunks WHERE tsv @@ ({query}))")
            params += terms
        else:
            counts.append("0")
    if not counts:
        return []
    rows = await conn.fetch(f"SELECT {', '.join(counts)}", params)
    return [int(n) for n in rows[0]]


async def matched_terms(conn: PgConn, chunk_id: int, expressions: Sequence[str]) -> list[bool]:
    """Which expressions (one quoted term each) match one chunk."""
    if not expressions:
        return []
    terms = [" ".join(terms_of(e)) for e in expressions]
    rows = await conn.fetch(
        "SELECT coalesce(c.tsv @@ recalld_term(t.t), false) FROM unnest(%s::text[]) "
        "WITH ORDINALITY t(t, n) LEFT JOIN chunks c ON c.id = %s ORDER BY t.n",
        [terms, chunk_id],
    )
    return [bool(r[0]) for r in rows]


async def meta_value(conn: PgConn, key: str) -> str | None:
    """One value of the store's `meta` table, or None."""
    rows = await conn.fetch("SELECT value FROM meta WHERE key = %s", [key])
    return str(rows[0][0]) if rows else None


async def chunk_ids_by_kind(conn: PgConn) -> dict[str, list[int]]:
    """Every chunk id, by kind, in id order."""
    out: dict[str, list[int]] = {}
    for kind, cid in await conn.fetch("SELECT kind, id FROM chunks ORDER BY id"):
        out.setdefault(str(kind), []).append(int(cid))
    return out


async def chunk_total(conn: PgConn) -> int:
    """The number of chunks."""
    rows = await conn.fetch("SELECT count(*) FROM chunks")
    return int(rows[0][0])


async def chunks_by_id(conn: PgConn, ids: Sequence[int]) -> dict[int, Chunk]:
    """Chunks with their source, by id; missing ids are left out."""
    if not ids:
        return {}
    rows = await conn.fetch(
        f"SELECT {CHUNK_COLUMNS} FROM chunks c JOIN documents d ON d.id = c.document_id "
        "WHERE c.id = ANY(%s)",
        [list(ids)],
    )
    return {int(r[0]): row_to_chunk(r) for r in rows}


async def chunks_and_statuses(
    conn: PgConn, ids: Sequence[int], status_ids: Sequence[int]
) -> tuple[dict[int, Chunk], dict[int, str]]:
    """The chunks of `ids` and only the status of each of `status_ids`, in one query;
    missing ids are left out of both."""
    if not ids and not status_ids:
        return {}, {}
    rows = await conn.fetch(
        f"SELECT {CHUNK_COLUMNS} FROM chunks c JOIN documents d ON d.id = c.document_id "
        "WHERE c.id = ANY(%s) UNION ALL "
        f"SELECT {CHUNK_STATUS_COLUMNS} FROM chunks c JOIN documents d ON d.id = c.document_id "
        "WHERE c.id = ANY(%s)",
        [list(ids), list(status_ids)],
    )
    return records.chunks_and_statuses(rows)


async def vectors_by_id(
    conn: PgConn, ids: Sequence[int], dimension: int
) -> dict[int, npt.NDArray[np.float32]]:
    """Stored vectors by chunk id."""
    if not ids:
        return {}
    rows = await conn.fetch_binary(
        "SELECT chunk_id, embedding FROM chunks_vec WHERE chunk_id = ANY(%s)", [list(ids)]
    )
    return {int(r[0]): r[1][:dimension] for r in rows}


async def child_facts(
    conn: PgConn, chunk_ids: Sequence[int], dimension: int
) -> list[tuple[int, int, npt.NDArray[np.float32]]]:
    """Each fact below `chunk_ids` with its parent and its stored vector (`Reader.child_facts`),
    in one query."""
    if not chunk_ids:
        return []
    ids = [int(c) for c in chunk_ids]
    rows = await conn.fetch_binary(
        "SELECT l.src, l.dst, v.embedding FROM links l "
        "JOIN chunks c ON c.id = l.src JOIN documents d ON d.id = c.document_id "
        "JOIN chunks_vec v ON v.chunk_id = l.src "
        "WHERE l.dst = ANY(%s) AND l.relation = 'parent' AND c.granularity = 'fact' "
        "AND NOT (l.src = ANY(%s))",
        [ids, ids],
    )
    return [(int(r[0]), int(r[1]), r[2][:dimension]) for r in rows]


async def neighbours(conn: PgConn, document_id: int, position: int, window: int) -> list[Chunk]:
    """The chunks within `window` positions of `position` in a document, in order."""
    rows = await conn.fetch(
        f"SELECT {CHUNK_COLUMNS} FROM chunks c JOIN documents d ON d.id = c.document_id "
        "WHERE c.document_id = %s AND c.position BETWEEN %s AND %s ORDER BY c.position",
        [document_id, position - window, position + window],
    )
    return [row_to_chunk(r) for r in rows]


async def document_by_source(conn: PgConn, source: str) -> Document | None:
    """The document stored for `source` (in this store's scope), if any."""
    rows = await conn.fetch(
        f"SELECT {DOCUMENT_COLUMNS} FROM documents WHERE source = %s AND scope = %s",
        [source, conn.writer.scope],
    )
    return row_to_document(rows[0]) if rows else None


async def documents_by_source(conn: PgConn, sources: Sequence[str]) -> dict[str, Document]:
    """The documents stored for `sources` (in this store's scope), by source."""
    if not sources:
        return {}
    rows = await conn.fetch(
        f"SELECT {DOCUMENT_COLUMNS} FROM documents WHERE source = ANY(%s) AND scope = %s",
        [list(sources), conn.writer.scope],
    )
    found = (row_to_document(row) for row in rows)
    return {doc.source: doc for doc in found}


async def chunk_keys(conn: PgConn, document_id: int) -> dict[str, str]:
    """`{key: content_hash}` of a document's stored chunks."""
    rows = await conn.fetch(
        "SELECT key, content_hash FROM chunks WHERE document_id = %s", [document_id]
    )
    return {str(r[0]): str(r[1]) for r in rows}


async def documents(conn: PgConn, prefix: str = "", limit: int = 1000) -> list[Document]:
    """Documents whose source starts with `prefix`, in source (code point) order."""
    rows = await conn.fetch(
        f"SELECT {DOCUMENT_COLUMNS} FROM documents WHERE starts_with(source, %s) "
        'AND scope = %s ORDER BY source COLLATE "C" LIMIT %s',
        [prefix, conn.writer.scope, limit],
    )
    return [row_to_document(r) for r in rows]


async def counts(conn: PgConn) -> dict[str, int]:
    """Row counts for `status`."""
    rows = await conn.fetchall(shared_sql.STATUS_COUNTS)
    return shared_sql.status_counts(rows[0])


async def redacted_chunks(conn: PgConn) -> int:
    """For `status`: how many chunks hold a `[REDACTED:<type>]` marker."""
    rows = await conn.fetch(
        "SELECT count(*) FROM chunks WHERE tsv @@ to_tsquery('simple', 'redacted') "
        "AND meta LIKE %s",
        ['%"redacted"%'],
    )
    return int(rows[0][0])


async def skipped_files(conn: PgConn, prefix: str = "") -> dict[str, int]:
    """Files no chunker takes under `prefix`, by type."""
    rows = await conn.fetch(
        "SELECT content_hash, count(*) FROM documents WHERE kind = 'skipped' "
        "AND source >= %s AND source < %s GROUP BY content_hash",
        [prefix, prefix + "\U0010ffff"],
    )
    return {str(r[0]).partition(":")[2]: int(r[1]) for r in rows}


async def errors(conn: PgConn, limit: int = 100) -> list[dict[str, Any]]:
    """The most recent ingest errors."""
    rows = await conn.fetch(
        "SELECT id, source, error_type, message, at FROM errors ORDER BY id DESC LIMIT %s",
        [limit],
    )
    return [
        {"id": int(r[0]), "source": r[1], "type": r[2], "message": r[3], "at": r[4]} for r in rows
    ]


async def exact_knn(
    conn: PgConn, vector: npt.NDArray[np.float32], k: int, filters: Filters
) -> list[tuple[int, float]]:
    """`knn` by a full scan, never the HNSW index (`+ 0` keeps the planner off it): filtered
    searches other than kind / granularity, and the scale benchmark's ground truth."""
    query = np.ascontiguousarray(vector, dtype=np.float32)
    where, params = filter_sql(filters)
    rows = await conn.fetch(
        "SELECT c.id, (v.embedding <=> %s) + 0 AS distance "
        "FROM chunks c JOIN documents d ON d.id = c.document_id "
        f"JOIN chunks_vec v ON v.chunk_id = c.id WHERE {where} "
        "ORDER BY distance LIMIT %s",
        [query, *params, k],
    )
    return [(int(r[0]), float(r[1])) for r in rows]
