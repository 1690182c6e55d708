"""Which project each document came from (issue 21).

A project is a folder: the git root of where the user works, or the folder itself. A memory
remembered with `--project`, a captured agent session and a file inside a git repository are
recorded here by their document's source; everything else belongs to no project ("global").
Searches with `Filters.project` keep that project's documents and the global ones, never
another project's (`readers.filter_sql`). Rows are keyed by source rather than document id,
so a document replaced by a re-ingest keeps its project.
"""

from __future__ import annotations

import aiosqlite

from recalld.storage.records import CHUNK_COLUMNS, row_to_chunk
from recalld.storage.sqlite.readers import fetchall, filter_sql
from recalld.types import Chunk, Filters

M005_SQL = """
CREATE TABLE document_projects (
    source TEXT PRIMARY KEY,
    project TEXT NOT NULL
);
CREATE INDEX document_projects_project ON document_projects(project);
"""


async def set_project(conn: aiosqlite.Connection, source: str, project: str | None) -> None:
    """Record `source`'s project (None: it belongs to no project)."""
    if project is None:
        await conn.execute("DELETE FROM document_projects WHERE source = ?", (source,))
        return
    await conn.execute(
        "INSERT INTO document_projects (source, project) VALUES (?, ?) "
        "ON CONFLICT (source) DO UPDATE SET project = excluded.project",
        (source, project),
    )


async def project_of(conn: aiosqlite.Connection, source: str) -> str | None:
    """The project recorded for `source`, if any."""
    rows = await fetchall(conn, "SELECT project FROM document_projects WHERE source = ?", (source,))
    return str(rows[0][0]) if rows else None


async def sources_of(conn: aiosqlite.Connection, project: str) -> set[str]:
    """The sources recorded under `project`."""
    rows = await fetchall(
        conn, "SELECT source FROM document_projects WHERE project = ?", (project,)
    )
    return {str(r[0]) for r in rows}


async def projects_of(conn: aiosqlite.Connection, sources: list[str]) -> dict[str, str]:
    """The projects recorded for those of `sources` that have one."""
    if not sources:
        return {}
    marks = ", ".join("?" * len(sources))
    rows = await fetchall(
        conn, f"SELECT source, project FROM document_projects WHERE source IN ({marks})", sources
    )
    return {str(r[0]): str(r[1]) for r in rows}


async def recent_chunks(conn: aiosqlite.Connection, filters: Filters, limit: int) -> list[Chunk]:
    """The newest chunks (by event time) of complete documents matching `filters`."""
    where, params = filter_sql(filters)
    rows = await fetchall(
        conn,
        f"SELECT {CHUNK_COLUMNS} FROM chunks c JOIN documents d ON d.id = c.document_id "
        f"WHERE d.state = 'complete' AND {where} "
        "ORDER BY c.event_time IS NULL, c.event_time DESC, c.id DESC LIMIT ?",
        [*params, limit],
    )
    return [row_to_chunk(r) for r in rows]
