"""Which project each document came from, on PostgreSQL (called by `pg.access`)."""

from __future__ import annotations

from recalld.storage.pg.handle import PgConn
from recalld.storage.pg.readers import filter_sql
from recalld.storage.records import CHUNK_COLUMNS, row_to_chunk
from recalld.types import Chunk, Filters


async def set_project(conn: PgConn, source: str, project: str | None) -> None:
    """Record `source`'s project (None: it belongs to no project)."""
    if project is None:
        await conn.run("DELETE FROM document_projects WHERE source = %s", [source])
        return
    await conn.run(
        "INSERT INTO document_projects (source, project) VALUES (%s, %s) "
        "ON CONFLICT (scope, source) DO UPDATE SET project = excluded.project",
        [source, project],
    )


async def project_of(conn: PgConn, source: str) -> str | None:
    """The project recorded for `source`, if any."""
    rows = await conn.fetch("SELECT project FROM document_projects WHERE source = %s", [source])
    return str(rows[0][0]) if rows else None


async def sources_of(conn: PgConn, project: str) -> set[str]:
    """The sources recorded under `project`."""
    rows = await conn.fetch("SELECT source FROM document_projects WHERE project = %s", [project])
    return {str(r[0]) for r in rows}


async def projects_of(conn: PgConn, sources: list[str]) -> dict[str, str]:
    """The projects recorded for those of `sources` that have one."""
    if not sources:
        return {}
    rows = await conn.fetch(
        "SELECT source, project FROM document_projects WHERE source = ANY(%s)", [sources]
    )
    return {str(r[0]): str(r[1]) for r in rows}


async def recent_chunks(conn: PgConn, filters: Filters, limit: int) -> list[Chunk]:
    """The newest chunks (by event time) of complete documents matching `filters`."""
    where, params = filter_sql(filters)
    rows = await conn.fetch(
        f"SELECT {CHUNK_COLUMNS} FROM chunks c JOIN documents d ON d.id = c.document_id "
        f"WHERE d.state = 'complete' AND {where} "
        "ORDER BY c.event_time DESC NULLS LAST, c.id DESC LIMIT %s",
        [*params, limit],
    )
    return [row_to_chunk(r) for r in rows]
