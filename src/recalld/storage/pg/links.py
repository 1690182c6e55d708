"""Typed links and the statuses they imply, on PostgreSQL (`contract.Reader` / `Writer` link
operations, called by `pg.access`).

Id lists travel as one `bigint[]` parameter (`= ANY(%s)`) where SQLite uses `json_each`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from recalld.storage.pg.handle import PgConn
from recalld.storage.pg.readers import filter_sql
from recalld.storage.records import Link, link_dict, merged, untimed_parents
from recalld.types import Filters


async def add(conn: PgConn, links: Sequence[Link], origin: str = "user") -> int:
    """Insert links (an existing one gets the new weight); both ends must exist.

    Returns:
        How many links were written.
    """
    # One statement for all links. PostgreSQL refuses to upsert the same row twice in one
    # statement, so repeats are merged first (the last weight wins, as on SQLite).
    merged = {(s, d, r): w for s, d, r, w in links if s != d}
    if not merged:
        return 0
    keys = list(merged)
    written = await conn.run(
        "INSERT INTO links (src, dst, relation, weight, created_at, origin) "
        "SELECT t.s, t.d, t.r, t.w, %s, %s "
        "FROM unnest(%s::bigint[], %s::bigint[], %s::text[], %s::float8[]) AS t(s, d, r, w) "
        "WHERE EXISTS (SELECT 1 FROM chunks WHERE id = t.s) "
        "AND EXISTS (SELECT 1 FROM chunks WHERE id = t.d) "
        "ON CONFLICT (src, dst, relation) DO UPDATE SET weight = excluded.weight",
        [
            time.time(),
            origin,
            [k[0] for k in keys],
            [k[1] for k in keys],
            [k[2] for k in keys],
            [float(merged[k]) for k in keys],
        ],
    )
    targets = [d for _, d, r, _ in links if r in ("supersedes", "contradicts")]
    if targets:
        await refresh_status(conn, targets)
    return max(written, 0)


async def remove(conn: PgConn, src: int, dst: int, relation: str | None = None) -> int:
    """Remove the links from `src` to `dst` (of one relation, or all). Returns how many."""
    sql = "DELETE FROM links WHERE src = %s AND dst = %s"
    params: list[Any] = [src, dst]
    if relation is not None:
        sql += " AND relation = %s"
        params.append(relation)
    removed = await conn.run(sql, params)
    await refresh_status(conn, [dst])
    return max(removed, 0)


async def of(
    conn: PgConn, chunk_id: int, relation: str | None = None, direction: str = "both"
) -> list[dict[str, Any]]:
    """The links of one chunk: `out` (it is src), `in` (it is dst) or `both`."""
    ends = {"out": ["src"], "in": ["dst"], "both": ["src", "dst"]}[direction]
    found: list[dict[str, Any]] = []
    for end in ends:
        sql = f"SELECT src, dst, relation, weight, origin, created_at FROM links WHERE {end} = %s"
        params: list[Any] = [chunk_id]
        if relation is not None:
            sql += " AND relation = %s"
            params.append(relation)
        found += [link_dict(r) for r in await conn.fetch(sql + " ORDER BY created_at", params)]
    return found


async def touching(
    conn: PgConn, chunk_ids: Sequence[int], relation: str | None = None
) -> list[Link]:
    """Every link with either end in `chunk_ids`, for spreading activation; only the links of
    `relation` when given."""
    if not chunk_ids:
        return []
    ids = [int(c) for c in chunk_ids]
    only = " AND relation = %s" if relation else ""
    rows = await conn.fetch(
        f"SELECT src, dst, relation, weight FROM links WHERE src = ANY(%s){only} "
        f"UNION SELECT src, dst, relation, weight FROM links WHERE dst = ANY(%s){only}",
        [ids, relation, ids, relation] if relation else [ids, ids],
    )
    return [(int(r[0]), int(r[1]), str(r[2]), float(r[3])) for r in rows]


async def with_parents(conn: PgConn, links: list[Link], chunk_ids: Sequence[int]) -> list[Link]:
    """`links` (every link touching `chunk_ids`) and, each once, every `temporal` link touching
    their `records.untimed_parents` (no statement when there are none: documents, rounds
    alone)."""
    parents = untimed_parents(links, chunk_ids)
    return merged(links, await touching(conn, parents, "temporal")) if parents else links


async def refresh_status(conn: PgConn, chunk_ids: Iterable[int]) -> None:
    """Set each chunk's status from the `supersedes` / `contradicts` links pointing at it."""
    ids = sorted({int(c) for c in chunk_ids})
    if not ids:
        return
    await conn.run(
        "UPDATE chunks SET status = CASE "
        "WHEN EXISTS (SELECT 1 FROM links l WHERE l.dst = chunks.id AND l.relation = 'supersedes')"
        " THEN 'superseded' "
        "WHEN EXISTS (SELECT 1 FROM links l WHERE l.dst = chunks.id AND l.relation = 'contradicts')"
        " THEN 'contradicted' ELSE 'active' END "
        "WHERE id = ANY(%s) AND status IN ('active', 'superseded', 'contradicted')",
        [ids],
    )


async def status_targets(conn: PgConn, chunk_ids: Sequence[int]) -> list[int]:
    """The chunks that `chunk_ids` supersede or contradict (to refresh after deleting them)."""
    if not chunk_ids:
        return []
    rows = await conn.fetch(
        "SELECT DISTINCT dst FROM links WHERE relation IN ('supersedes', 'contradicts') "
        "AND src = ANY(%s)",
        [[int(c) for c in chunk_ids]],
    )
    return [int(r[0]) for r in rows]


async def rebuild_structure(conn: PgConn, document_id: int, *, fresh: bool = False) -> None:
    """Re-make a document's auto `parent` and `temporal` links from its chunks (`fresh`: the
    document had no chunks before this transaction, so it has no links to remove)."""
    now = time.time()
    if not fresh:
        await conn.run(
            "DELETE FROM links WHERE origin = 'auto' AND relation IN ('parent', 'temporal') "
            "AND src IN (SELECT id FROM chunks WHERE document_id = %s)",
            [document_id],
        )
    # Both kinds in one statement. `meta -> 'conversation_id'` keeps the JSON type, as
    # SQLite's json_extract does.
    await conn.run(
        "INSERT INTO links (src, dst, relation, weight, created_at, origin) "
        "SELECT id, parent_id, 'parent', 1.0, %s, 'auto' FROM chunks "
        "WHERE document_id = %s AND parent_id IS NOT NULL "
        "UNION ALL SELECT id, nxt, 'temporal', 1.0, %s, 'auto' FROM ("
        "  SELECT id, LEAD(id) OVER (PARTITION BY meta::jsonb -> 'conversation_id' "
        "  ORDER BY position) AS nxt FROM chunks WHERE document_id = %s AND granularity = 'round'"
        ") AS rounds WHERE nxt IS NOT NULL ON CONFLICT DO NOTHING",
        [now, document_id, now, document_id],
    )


async def matching(conn: PgConn, chunk_ids: Sequence[int], filters: Filters) -> set[int]:
    """Which of `chunk_ids` pass a search's filters."""
    where, params = filter_sql(filters)
    rows = await conn.fetch(
        "SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id "
        f"WHERE c.id = ANY(%s) AND {where}",
        [[int(c) for c in chunk_ids], *params],
    )
    return {int(r[0]) for r in rows}
