"""Typed links between chunks (MemX's seven relations plus `parent`), and the statuses they imply.

A link `src -relation-> dst` reads "src <relation> dst": a fact `parent` its round, a round
`temporal` the next round, a new fact `supersedes` the older one. A chunk's `status` follows
from the links that point at it: `superseded` while any `supersedes` link does, else
`contradicted` while a `contradicts` link does, else `active`. Every function that adds or
removes such links (or the chunks at their ends) calls `refresh_status`, so the status cannot
drift from the graph.

Auto links (`origin = 'auto'`) are made by ingest; user links (`origin = 'user'`) over the API.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from functools import partial
from typing import Any

import aiosqlite

from recalld.storage.records import Link, link_dict, merged, untimed_parents
from recalld.storage.sqlite.on_thread import RawConnection, on_thread
from recalld.storage.sqlite.readers import filter_sql
from recalld.types import Filters


async def _fetchall(conn: aiosqlite.Connection, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    return list(await conn.execute_fetchall(sql, params))


async def add(conn: aiosqlite.Connection, links: Sequence[Link], origin: str = "user") -> int:
    """Insert links (an existing one gets the new weight); both ends must exist.

    Returns:
        How many links were written.
    """
    if not links:
        return 0
    now = time.time()
    before = conn.total_changes
    # The EXISTS guard drops links to chunks deleted since they were found (foreign-key
    # failures would abort the whole statement).
    await conn.executemany(
        "INSERT INTO links (src, dst, relation, weight, created_at, origin) "
        "SELECT ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM chunks WHERE id = ?) "
        "AND EXISTS (SELECT 1 FROM chunks WHERE id = ?) "
        "ON CONFLICT (src, dst, relation) DO UPDATE SET weight = excluded.weight",
        [(s, d, r, w, now, origin, s, d) for s, d, r, w in links if s != d],
    )
    written = int(conn.total_changes - before)
    if any(r in ("supersedes", "contradicts") for _, _, r, _ in links):
        await refresh_status(
            conn, [d for _, d, r, _ in links if r in ("supersedes", "contradicts")]
        )
    return written


async def remove(
    conn: aiosqlite.Connection, src: int, dst: int, relation: str | None = None
) -> int:
    """Remove the links from `src` to `dst` (of one relation, or all). Returns how many."""
    sql = "DELETE FROM links WHERE src = ? AND dst = ?"
    params: list[Any] = [src, dst]
    if relation is not None:
        sql += " AND relation = ?"
        params.append(relation)
    cursor = await conn.execute(sql, params)
    removed = int(cursor.rowcount)
    await refresh_status(conn, [dst])
    return removed


async def of(
    conn: aiosqlite.Connection, chunk_id: int, relation: str | None = None, direction: str = "both"
) -> list[dict[str, Any]]:
    """The links of one chunk: `out` (it is src), `in` (it is dst) or `both`."""
    ends = {"out": ["src"], "in": ["dst"], "both": ["src", "dst"]}[direction]
    found: list[dict[str, Any]] = []
    for end in ends:
        sql = f"SELECT src, dst, relation, weight, origin, created_at FROM links WHERE {end} = ?"
        params: list[Any] = [chunk_id]
        if relation is not None:
            sql += " AND relation = ?"
            params.append(relation)
        found += [link_dict(r) for r in await _fetchall(conn, sql + " ORDER BY created_at", params)]
    return found


async def touching(conn: aiosqlite.Connection, chunk_ids: Sequence[int]) -> list[Link]:
    """Every link with either end in `chunk_ids`, for spreading activation."""
    if not chunk_ids:
        return []
    return await on_thread(conn, partial(touching_now, chunk_ids=chunk_ids))


def touching_now(
    raw: RawConnection, chunk_ids: Sequence[int], relation: str | None = None
) -> list[Link]:
    """`touching` in the calling thread, the connection's own (`on_thread`); only the links
    of `relation` when given."""
    if not chunk_ids:
        return []
    ids = json.dumps(list(chunk_ids))
    only = " AND relation = ?" if relation else ""
    rows = raw.execute(
        "SELECT src, dst, relation, weight FROM links "
        f"WHERE src IN (SELECT value FROM json_each(?)){only} "
        "UNION SELECT src, dst, relation, weight FROM links "
        f"WHERE dst IN (SELECT value FROM json_each(?)){only}",
        (ids, relation, ids, relation) if relation else (ids, ids),
    )
    return [(int(r[0]), int(r[1]), str(r[2]), float(r[3])) for r in rows]


def with_parents_now(raw: RawConnection, links: list[Link], chunk_ids: Sequence[int]) -> list[Link]:
    """`links` (every link touching `chunk_ids`) and, each once, every `temporal` link touching
    their `records.untimed_parents` (what places those chunks in time), in the calling thread:
    neighbour support through parents reads them with its candidates (no statement when there
    are none: documents, rounds alone)."""
    parents = untimed_parents(links, chunk_ids)
    return merged(links, touching_now(raw, parents, "temporal")) if parents else links


async def refresh_status(conn: aiosqlite.Connection, chunk_ids: Iterable[int]) -> None:
    """Set each chunk's status from the `supersedes` / `contradicts` links pointing at it.

    Only statuses the links own (`active`, `superseded`, `contradicted`) are changed.
    """
    ids = json.dumps(sorted({int(c) for c in chunk_ids}))
    if ids == "[]":
        return
    await conn.execute(
        "UPDATE chunks SET status = CASE "
        "WHEN EXISTS (SELECT 1 FROM links l WHERE l.dst = chunks.id AND l.relation = 'supersedes')"
        " THEN 'superseded' "
        "WHEN EXISTS (SELECT 1 FROM links l WHERE l.dst = chunks.id AND l.relation = 'contradicts')"
        " THEN 'contradicted' ELSE 'active' END "
        "WHERE id IN (SELECT value FROM json_each(?)) "
        "AND status IN ('active', 'superseded', 'contradicted')",
        (ids,),
    )


async def status_targets(conn: aiosqlite.Connection, chunk_ids: Sequence[int]) -> list[int]:
    """The chunks that `chunk_ids` supersede or contradict (to refresh after deleting them)."""
    if not chunk_ids:
        return []
    rows = await _fetchall(
        conn,
        "SELECT DISTINCT dst FROM links WHERE relation IN ('supersedes', 'contradicts') "
        "AND src IN (SELECT value FROM json_each(?))",
        (json.dumps(list(chunk_ids)),),
    )
    return [int(r[0]) for r in rows]


async def rebuild_structure(
    conn: aiosqlite.Connection, document_id: int, *, fresh: bool = False
) -> None:
    """Re-make a document's auto `parent` and `temporal` links from its chunks (`fresh`: the
    document had no chunks before this transaction, so it has no links to remove).

    `parent`: each chunk to its parent (fact -> round -> session). `temporal`: each round to
    the next round of the same conversation, in document order.
    """
    await on_thread(conn, partial(rebuild_structure_rows, document_id=document_id, fresh=fresh))


def rebuild_structure_rows(raw: RawConnection, document_id: int, *, fresh: bool = False) -> None:
    """`rebuild_structure` on the connection's own thread (`on_thread`), within a larger
    write."""
    now = time.time()
    if not fresh:
        raw.execute(
            "DELETE FROM links WHERE origin = 'auto' AND relation IN ('parent', 'temporal') "
            "AND src IN (SELECT id FROM chunks WHERE document_id = ?)",
            (document_id,),
        )
    # Both kinds in one statement, parents first as when they were two.
    raw.execute(
        "INSERT OR IGNORE INTO links (src, dst, relation, weight, created_at, origin) "
        "SELECT id, parent_id, 'parent', 1.0, ?, 'auto' FROM chunks "
        "WHERE document_id = ? AND parent_id IS NOT NULL "
        "UNION ALL SELECT id, nxt, 'temporal', 1.0, ?, 'auto' FROM ("
        "  SELECT id, LEAD(id) OVER (PARTITION BY json_extract(meta, '$.conversation_id') "
        "  ORDER BY position) AS nxt FROM chunks WHERE document_id = ? AND granularity = 'round'"
        ") WHERE nxt IS NOT NULL",
        (now, document_id, now, document_id),
    )


async def matching(
    conn: aiosqlite.Connection, chunk_ids: Sequence[int], filters: Filters
) -> set[int]:
    """Which of `chunk_ids` pass a search's filters."""
    where, params = filter_sql(filters)
    rows = await _fetchall(
        conn,
        "SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id "
        f"WHERE c.id IN (SELECT value FROM json_each(?)) AND {where}",
        [json.dumps(list(chunk_ids)), *params],
    )
    return {int(r[0]) for r in rows}
