"""Projects (issue 21, migration m005 / pg_m003): a search scoped to a project keeps its
documents and those of no project, never another project's; on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

from recalld.storage.contract import Store
from recalld.storage.sqlite import schema
from recalld.storage.sqlite.connection import connect
from recalld.types import Filters
from tests.storage.conftest import EMBEDDER, put


async def test_m005_adds_the_projects_table(tmp_path: Path) -> None:
    conn = connect(tmp_path / "m.db")
    schema.migrate(conn, schema.MIGRATIONS[:4])
    assert schema.migrate(conn) == schema.SCHEMA_VERSION
    assert conn.execute("SELECT count(*) FROM document_projects").fetchone()[0] == 0
    conn.close()


async def test_project_filter_keeps_own_and_global(store: Store) -> None:
    await put(store, "/a/notes.md", ["otter habitat notes for project a"])
    await put(store, "/b/notes.md", ["otter habitat notes for project b"], digest="h2")
    await put(store, "memory:global", ["otter habitat notes for everyone"], digest="h3")
    await store.write(lambda r: r.set_project(source="/a/notes.md", project="/a"))
    await store.write(lambda r: r.set_project(source="/b/notes.md", project="/b"))
    assert await store.read(lambda r: r.project_of(source="/a/notes.md")) == "/a"
    assert await store.read(lambda r: r.sources_of(project="/b")) == {"/b/notes.md"}
    owners = await store.read(
        lambda r: r.projects_of(sources=["/a/notes.md", "memory:global", "/nope"])
    )
    assert owners == {"/a/notes.md": "/a"}
    assert await store.read(lambda r: r.projects_of(sources=[])) == {}

    def sources(found: list[tuple[int, float]], chunks: dict[int, object]) -> set[str]:
        return {chunks[i].source for i, _ in found}  # type: ignore[attr-defined]

    scoped = Filters(project="/a")
    vector = EMBEDDER.embed(["otter habitat"])[0]
    knn = await store.read(lambda c: c.knn(vector, 10, scoped))
    chunks = await store.read(lambda c: c.chunks_by_id([i for i, _ in knn]))
    assert sources(knn, chunks) == {"/a/notes.md", "memory:global"}
    fts = await store.read(lambda c: c.fts('"otter"', 10, scoped))
    chunks = await store.read(lambda c: c.chunks_by_id([i for i, _ in fts]))
    assert sources(fts, chunks) == {"/a/notes.md", "memory:global"}
    recent = await store.read(lambda c: c.recent_chunks(Filters(project="/b"), 10))
    assert {c.source for c in recent} == {"/b/notes.md", "memory:global"}
    everything = await store.read(lambda c: c.recent_chunks(Filters(), 10))
    assert len(everything) == 3

    # No project any more: the document becomes global.
    await store.write(lambda r: r.set_project(source="/b/notes.md", project=None))
    recent = await store.read(lambda c: c.recent_chunks(scoped, 10))
    assert {c.source for c in recent} == {"/a/notes.md", "/b/notes.md", "memory:global"}
