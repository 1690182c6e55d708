"""PostgreSQL's bulk path: chunks and vectors go in by COPY, and `Store.bulk_load` on an empty
store builds the HNSW and keyword (GIN) indexes once at the end. Against the real server, no
mocks."""

import psycopg
import pytest

from recalld.embeddings.base import HashEmbedder
from recalld.storage import records
from recalld.storage.contract import Store
from recalld.storage.pg import schema
from recalld.storage.registry import open_store
from recalld.types import NO_FILTERS, ChunkDraft
from tests.helpers.postgres import VECTOR_INDEX

EMBEDDER = HashEmbedder(64)
HNSW = VECTOR_INDEX == "hnsw"  # elsewhere the store scans exactly and nothing is deferred


def rows(url: str, sql: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql.encode()).fetchall()


def has_index(url: str, name: str = "chunks_vec_hnsw") -> bool:
    return rows(url, f"SELECT to_regclass('{name}') IS NOT NULL") == [(True,)]


def has_keyword_index(url: str) -> bool:
    return has_index(url, "chunks_tsv")


def document(source: str, texts: list[str]) -> tuple[records.NewDocument, list[records.NewChunk]]:
    # The first chunk is the child of the last: its parent comes later in the same COPY.
    vectors = EMBEDDER.embed(texts)
    last = f"k{len(texts) - 1}"
    chunks = [
        records.NewChunk(
            ChunkDraft(text=t, key=f"k{i}", parent_key=last if i == 0 else None),
            len(t.split()),
            vectors[i],
        )
        for i, t in enumerate(texts)
    ]
    return records.NewDocument(source, "text", "markdown", "h-" + source), chunks


async def put(store: Store, source: str, texts: list[str]) -> int:
    doc, chunks = document(source, texts)
    return await store.write(lambda c: c.replace_document(doc, chunks))


async def open_(url: str) -> Store:
    return await open_store(
        url, model_id=EMBEDDER.model_id, dimension=64, vector_index=VECTOR_INDEX
    )


TEXTS = ["alpha beta gamma", "delta epsilon", "zeta eta theta", "iota kappa lambda"]


async def test_bulk_load_builds_the_index_at_the_end_and_readers_stay_exact(pg_url: str):
    store = await open_(pg_url)
    try:
        async with store.bulk_load():
            await put(store, "a.md", TEXTS)
            await put(store, "b.md", ["mu nu xi", "omicron pi rho"])
            # Inside the block the indexes wait; readers still find the exact neighbours and
            # the keyword matches.
            assert has_index(pg_url) is not HNSW
            assert not has_keyword_index(pg_url)
            [(found, _)] = await store.read(lambda r: r.fts('"epsilon"', 5, NO_FILTERS))
            assert rows(pg_url, f"SELECT text FROM chunks WHERE id = {found}") == [
                ("delta epsilon",)
            ]
            query = EMBEDDER.embed(["zeta eta theta"])[0]
            [(best, distance)] = await store.read(lambda r: r.knn(query, 1, NO_FILTERS))
            assert rows(pg_url, f"SELECT text FROM chunks WHERE id = {best}") == [
                ("zeta eta theta",)
            ]
            assert distance == pytest.approx(0.0, abs=1e-3)
        assert has_index(pg_url) is HNSW
        assert has_keyword_index(pg_url)
        hits = await store.read(lambda r: r.knn(query, 1, NO_FILTERS))
        assert hits[0][0] == best
        assert await store.read(lambda r: r.fts('"epsilon"', 5, NO_FILTERS)) == [(found, _)]
    finally:
        await store.close()
    # Parents written in the COPY (forward reference) and their structure links.
    [(child, parent)] = rows(
        pg_url,
        "SELECT id, parent_id FROM chunks WHERE parent_id IS NOT NULL "
        "AND key = 'k0' AND document_id = "
        "(SELECT id FROM documents WHERE source = 'a.md')",
    )
    assert rows(pg_url, f"SELECT key FROM chunks WHERE id = {parent}") == [("k3",)]
    assert rows(pg_url, f"SELECT relation FROM links WHERE src = {child}") == [("parent",)]
    assert rows(pg_url, "SELECT state, chunk_count FROM documents ORDER BY source") == [
        ("complete", 4),
        ("complete", 2),
    ]


async def test_rewriting_a_document_in_bulk_keeps_one_copy(pg_url: str):
    store = await open_(pg_url)
    try:
        async with store.bulk_load():
            first = await put(store, "a.md", TEXTS)
            again = await put(store, "a.md", TEXTS)
        assert again == first
        # The unchanged chunks (no new vector) keep their rows; the rest are replaced.
        doc, chunks = document("a.md", TEXTS)
        kept = [records.NewChunk(c.draft, c.token_count, None) for c in chunks[:2]]
        await store.write(lambda c: c.replace_document(doc, [*kept, *chunks[2:]]))
    finally:
        await store.close()
    assert rows(pg_url, "SELECT count(*), count(DISTINCT key) FROM chunks") == [(4, 4)]
    assert rows(pg_url, "SELECT count(*) FROM chunks_vec") == [(4,)]
    assert rows(pg_url, "SELECT count(*) FROM links WHERE relation = 'parent'") == [(1,)]
    assert rows(pg_url, "SELECT count(*) FROM chunks WHERE parent_id IS NOT NULL") == [(1,)]


async def test_a_failed_batch_loses_nothing_committed_and_leaves_the_index(pg_url: str):
    store = await open_(pg_url)
    try:
        with pytest.raises(RuntimeError, match="mid-batch"):
            async with store.bulk_load():
                await put(store, "a.md", TEXTS)
                doc, chunks = document("b.md", ["mu nu xi", "omicron pi rho"])

                async def dies_midway(writer) -> None:
                    await writer.replace_document(doc, chunks)
                    raise RuntimeError("killed mid-batch")

                await store.write(dies_midway)
        assert has_index(pg_url) is HNSW
        assert has_keyword_index(pg_url)
    finally:
        await store.close()
    assert rows(pg_url, "SELECT source FROM documents") == [("a.md",)]
    assert rows(pg_url, "SELECT count(*) FROM chunks") == [(4,)]
    assert rows(pg_url, "SELECT count(*) FROM chunks_vec") == [(4,)]


async def test_a_store_already_holding_vectors_keeps_its_index_throughout(pg_url: str):
    store = await open_(pg_url)
    try:
        await put(store, "a.md", TEXTS)
        async with store.bulk_load():
            await put(store, "b.md", ["mu nu xi"])
            assert has_index(pg_url) is HNSW
            assert has_keyword_index(pg_url)
    finally:
        await store.close()


async def test_an_index_left_dropped_by_a_dead_bulk_load_is_built_on_open(pg_url: str):
    store = await open_(pg_url)
    try:
        # What a process killed inside `bulk_load` leaves: the index dropped, rows committed.
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
            assert await schema.defer_hnsw_index(conn) is HNSW
            assert await schema.defer_index(conn, schema.KEYWORD_INDEX)
        await put(store, "a.md", TEXTS)
    finally:
        await store.close()
    assert not has_index(pg_url)
    assert not has_keyword_index(pg_url)
    store = await open_(pg_url)
    try:
        assert has_index(pg_url) is HNSW
        assert has_keyword_index(pg_url)
        query = EMBEDDER.embed(["iota kappa lambda"])[0]
        [(_, distance)] = await store.read(lambda r: r.knn(query, 1, NO_FILTERS))
        assert distance == pytest.approx(0.0, abs=1e-3)
    finally:
        await store.close()
