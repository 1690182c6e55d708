"""Links, the statuses they imply, structural auto links, and memory history (migration m004),
on real SQLite files and PostgreSQL databases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recalld.embeddings.base import HashEmbedder
from recalld.errors import IngestError, NotFoundError
from recalld.storage import records
from recalld.storage.contract import Store
from recalld.storage.sqlite import schema
from recalld.storage.sqlite.connection import connect
from recalld.types import ChunkDraft, Filters
from tests.storage.conftest import EMBEDDER, put


async def ids_of(store: Store, source: str) -> list[int]:
    doc = await store.read(lambda c: c.document_by_source(source))
    assert doc is not None
    chunks = await store.read(lambda c: c.neighbours(doc.id, 0, 10**6))
    return [c.id for c in chunks]


async def status_of(store: Store, chunk_id: int) -> str:
    return (await store.read(lambda c: c.chunks_by_id([chunk_id])))[chunk_id].status


async def test_m004_adds_history_and_link_origin(tmp_path: Path) -> None:
    conn = connect(tmp_path / "m.db")
    # A store at version 2 (before this migration) is brought up to date.
    schema.migrate(conn, schema.MIGRATIONS[:2])
    assert schema.schema_version(conn) == 2
    assert schema.migrate(conn) == schema.SCHEMA_VERSION
    columns = [r[1] for r in conn.execute("PRAGMA table_info(links)")]
    assert "origin" in columns
    assert conn.execute("SELECT count(*) FROM chunk_history").fetchone()[0] == 0
    conn.close()


async def test_supersedes_and_contradicts_set_status_until_removed(store: Store) -> None:
    await put(store, "a", ["old fact", "new fact", "disputed", "dispute"])
    old, new, disputed, dispute = await ids_of(store, "a")
    await store.write(lambda c: c.add_links([(new, old, "supersedes", 1.0)]))
    await store.write(lambda c: c.add_links([(dispute, disputed, "contradicts", 1.0)]))
    assert await status_of(store, old) == "superseded"
    assert await status_of(store, disputed) == "contradicted"
    assert await status_of(store, new) == "active"
    [link] = await store.read(lambda c: c.links_of(old, direction="in"))
    assert link["src"] == new and link["relation"] == "supersedes" and link["origin"] == "user"
    assert await store.write(lambda c: c.remove_links(new, old)) == 1
    assert await status_of(store, old) == "active"


async def test_chunks_and_statuses_reads_some_whole_and_the_others_status(store: Store) -> None:
    await put(store, "a", ["old fact", "new fact", "other fact"])
    old, new, other = await ids_of(store, "a")
    await store.write(lambda c: c.add_links([(new, old, "supersedes", 1.0)]))
    whole, statuses = await store.read(
        lambda c: c.chunks_and_statuses([new, 10**9], [old, other, 10**9])
    )
    assert whole == await store.read(lambda c: c.chunks_by_id([new]))
    assert statuses == {old: "superseded", other: "active"}
    assert await store.read(lambda c: c.chunks_and_statuses([], [])) == ({}, {})


async def test_chunks_statuses_and_links_read_together_what_each_read_gives(store: Store) -> None:
    await put(store, "a", ["old fact", "new fact", "other fact", "far fact"])
    old, new, other, far = await ids_of(store, "a")
    await store.write(lambda c: c.add_links([(new, old, "supersedes", 1.0)]))
    await store.write(lambda c: c.add_links([(far, other, "temporal", 0.5)]))
    whole, statuses, links = await store.read(
        lambda c: c.chunks_statuses_and_links([new], [old, other], [new, old, other])
    )
    apart = await store.read(lambda c: c.chunks_and_statuses([new], [old, other]))
    assert (whole, statuses) == apart
    touching = await store.read(lambda c: c.links_touching([new, old, other]))
    assert sorted(links) == sorted(touching) and len(links) == 2
    assert await store.read(lambda c: c.chunks_statuses_and_links([], [], [])) == ({}, {}, [])


async def test_the_links_of_untimed_candidates_parents_come_with_theirs(store: Store) -> None:
    # Rounds r1 - r2 - r3 in time, under session s; fact f of r2, fact g of r1.
    await put(store, "a", ["r1", "r2", "r3", "s", "f", "g"])
    r1, r2, r3, s, f, g = await ids_of(store, "a")
    await store.write(
        lambda c: c.add_links(
            [(r1, r2, "temporal", 1.0), (r2, r3, "temporal", 1.0)]
            + [(r, s, "parent", 1.0) for r in (r1, r2, r3)]
            + [(f, r2, "parent", 1.0), (g, r1, "parent", 1.0)]
        )
    )

    async def read(ids: list[int]) -> list[tuple[int, int, str, float]]:
        _, _, links = await store.read(
            lambda c: c.chunks_statuses_and_links([], ids, ids, through_parents=True)
        )
        assert len(links) == len(set(links))  # each once
        return links

    # Facts f and g (no temporal link) bring their rounds' temporal links, not the rounds'
    # other links (their parent session's, which holds no place in time).
    both = await read([f, g, r3])
    own = await store.read(lambda c: c.links_touching([f, g, r3]))
    parents = await store.read(lambda c: c.links_touching([r1, r2]))
    assert sorted(both) == sorted({*own, *(link for link in parents if link[2] == "temporal")})
    assert (r1, r2, "temporal", 1.0) in both and (r1, s, "parent", 1.0) not in both
    assert records.untimed_parents(both, [f, g, r3]) == [r1, r2]
    # A parent that is a candidate brings nothing more: its links are the candidates' own.
    assert sorted(await read([f, g, r1, r2])) == sorted(
        await store.read(lambda c: c.links_touching([f, g, r1, r2]))
    )
    # Rounds alone, or no links at all: what links_touching gives.
    for ids in ([r1, r3], [s]):
        assert sorted(await read(ids)) == sorted(
            await store.read(lambda c, ids=ids: c.links_touching(ids))
        )


async def test_deleting_the_newer_chunk_reactivates_the_older(store: Store) -> None:
    await put(store, "old", ["Ana lives in Porto"])
    await put(store, "new", ["Ana moved to Lisbon"])
    [old] = await ids_of(store, "old")
    [new] = await ids_of(store, "new")
    await store.write(lambda c: c.add_links([(new, old, "supersedes", 1.0)]))
    assert await status_of(store, old) == "superseded"
    assert await store.write(lambda c: c.delete_document("new"))
    assert await status_of(store, old) == "active"
    assert await store.read(lambda c: c.links_of(old)) == []


async def test_links_to_missing_chunks_and_self_links_are_not_written(store: Store) -> None:
    await put(store, "a", ["one"])
    [one] = await ids_of(store, "a")
    written = await store.write(
        lambda c: c.add_links([(one, 999, "related", 1.0), (one, one, "related", 1.0)])
    )
    assert written == 0


async def test_parent_and_temporal_links_follow_the_document(store: Store) -> None:
    def draft(key: str, gran: str, parent: str | None = None) -> ChunkDraft:
        return ChunkDraft(
            text=f"text of {key}",
            kind="conversation",
            granularity=gran,  # type: ignore[arg-type]
            key=key,
            parent_key=parent,
            meta={"conversation_id": "c1"},
        )

    drafts = [
        draft("s", "session"),
        draft("r1", "round", "s"),
        draft("f1", "fact", "r1"),
        draft("r2", "round", "s"),
        draft("r3", "round", "s"),
    ]
    vectors = EMBEDDER.embed([d.text for d in drafts])
    chunks = [records.NewChunk(d, 3, vectors[i]) for i, d in enumerate(drafts)]
    doc = records.NewDocument("log", "conversation", "json", "h1")
    await store.write(lambda c: c.replace_document(doc, chunks))
    s, r1, f1, r2, r3 = await ids_of(store, "log")

    async def all_links() -> set[tuple[int, int, str]]:
        rows = await store.read(lambda c: c.fetchall("SELECT src, dst, relation FROM links"))
        return {(int(a), int(b), str(r)) for a, b, r in rows}

    assert await all_links() == {
        (r1, s, "parent"),
        (f1, r1, "parent"),
        (r2, s, "parent"),
        (r3, s, "parent"),
        (r1, r2, "temporal"),
        (r2, r3, "temporal"),
    }
    # The log grows by a round: the new round is linked, nothing else changes.
    drafts.append(draft("r4", "round", "s"))
    vectors = EMBEDDER.embed(["text of r4"])
    grown = [records.NewChunk(d, 3, None) for d in drafts[:-1]]
    grown.append(records.NewChunk(drafts[-1], 3, vectors[0]))
    doc = records.NewDocument("log", "conversation", "json", "h2")
    await store.write(lambda c: c.replace_document(doc, grown))
    *_, r4 = await ids_of(store, "log")
    found = await all_links()
    assert (r3, r4, "temporal") in found and (r4, s, "parent") in found and len(found) == 8


async def test_auto_links_from_the_ingest_resolve_keys_and_ids(store: Store) -> None:
    await put(store, "old", ["Ana lives in Porto"])
    [old] = await ids_of(store, "old")
    texts = ["Ana moved to Lisbon", "Ana moved to Lisbon!"]
    vectors = EMBEDDER.embed(texts)
    chunks = [
        records.NewChunk(
            ChunkDraft(text=texts[0], key="a"), 4, vectors[0], (("supersedes", old, 1.0),)
        ),
        records.NewChunk(
            ChunkDraft(text=texts[1], key="b"), 4, vectors[1], (("similar", "a", 0.97),)
        ),
    ]
    doc = records.NewDocument("new", "text", "markdown", "h")
    await store.write(lambda c: c.replace_document(doc, chunks))
    a, b = await ids_of(store, "new")
    assert await status_of(store, old) == "superseded"
    [similar] = await store.read(lambda c: c.links_of(b, direction="out"))
    assert (similar["dst"], similar["relation"], similar["weight"]) == (a, "similar", 0.97)
    assert similar["origin"] == "auto"


async def test_memory_edit_keeps_history_and_moves_the_vector(store: Store) -> None:
    embedder = HashEmbedder(64)

    draft = ChunkDraft(text="Ana lives in Porto", kind="memory", granularity="memory", key="memory")
    vec = embedder.embed([draft.text])[0]
    doc = records.NewDocument("memory:aaa", "memory", "memory", "aaa")
    await store.write(lambda c: c.replace_document(doc, [records.NewChunk(draft, 4, vec)]))
    [cid] = await ids_of(store, "memory:aaa")
    new_vec = embedder.embed(["Ana lives in Lisbon"])[0]
    edit = records.MemoryEdit(text="Ana lives in Lisbon", tags=("home",))

    async def update(conn):
        return await conn.update_memory(
            cid,
            edit,
            source="memory:bbb",
            content_hash="bbb",
            chunk_hash="x",
            token_count=4,
            vector=new_vec,
        )

    assert await store.write(update) == 2
    chunk = (await store.read(lambda c: c.chunks_by_id([cid])))[cid]
    assert chunk.text == "Ana lives in Lisbon" and chunk.tags == ("home",)
    assert chunk.source == "memory:bbb"
    [old] = await store.read(lambda c: c.history_of(cid))
    assert old["version"] == 1 and old["text"] == "Ana lives in Porto" and old["tags"] == []
    # Search finds the new text by keyword and by vector, not the old one.
    assert await store.read(lambda c: c.fts('"lisbon"', 5, Filters())) != []
    assert await store.read(lambda c: c.fts('"porto"', 5, Filters())) == []
    [(nearest, distance)] = await store.read(lambda c: c.knn(new_vec, 1, Filters()))
    assert nearest == cid and distance == pytest.approx(0.0, abs=1e-5)
    # Forgetting the memory takes its history along.
    assert await store.write(lambda c: c.delete_document("memory:bbb"))
    rows = await store.read(lambda c: c.fetchall("SELECT count(*) FROM chunk_history"))
    assert rows[0][0] == 0


async def test_only_memories_can_be_edited_and_texts_stay_unique(store: Store) -> None:
    await put(store, "file.md", ["a paragraph"])
    [cid] = await ids_of(store, "file.md")
    edit = records.MemoryEdit(text="x")

    def update(target: int, source: str):
        async def run(conn):
            return await conn.update_memory(
                target,
                edit,
                source=source,
                content_hash="h",
                chunk_hash="x",
                token_count=1,
                vector=None,
            )

        return run

    with pytest.raises(NotFoundError, match="no memory"):
        await store.write(update(cid, "memory:zzz"))
    draft = ChunkDraft(text="m", kind="memory", granularity="memory", key="memory")
    vec = EMBEDDER.embed(["m"])[0]
    doc = records.NewDocument("memory:m", "memory", "memory", "m")
    await store.write(lambda c: c.replace_document(doc, [records.NewChunk(draft, 1, vec)]))
    [mid] = await ids_of(store, "memory:m")
    with pytest.raises(IngestError, match="already holds"):
        await store.write(update(mid, "file.md"))
    assert json.loads("[]") == await store.read(lambda c: c.history_of(mid))


def test_the_cli_knows_the_same_relations() -> None:
    # The CLI keeps its own copy so that it need not import storage (start-up cost).
    from recalld.cli.memories import RELATIONS

    assert RELATIONS == records.RELATIONS
