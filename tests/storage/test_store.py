import asyncio
from pathlib import Path

import pytest

from recalld.errors import QueryError
from recalld.storage import records
from recalld.storage.contract import Store
from recalld.storage.fts import match_expression, query_terms
from recalld.storage.registry import open_store
from recalld.types import NO_FILTERS, ChunkDraft, Filters
from tests.helpers.postgres import VECTOR_INDEX

from .conftest import EMBEDDER, new_chunks, put


async def fts(store: Store, query: str, filters: Filters = NO_FILTERS):
    expr = match_expression(query_terms(query))
    return await store.read(lambda c: c.fts(expr, 10, filters))


async def texts_of(store: Store, ids) -> list[str]:
    chunks = await store.read(lambda c: c.chunks_by_id(list(ids)))
    return [chunks[i].text for i in ids]


async def test_replace_document_is_atomic_and_keeps_parity(store: Store):
    await put(store, "a.md", ["alpha one", "alpha two", "alpha three"])
    await put(store, "a.md", ["beta one"], digest="h2")
    counts = await store.read(lambda r: r.counts())
    assert counts["documents"] == 1 and counts["chunks"] == 1 and counts["partial_documents"] == 0
    assert await fts(store, "alpha") == []
    assert len(await fts(store, "beta")) == 1
    vec_rows = await store.read(lambda c: c.fetchall("SELECT count(*) FROM chunks_vec"))
    assert vec_rows[0][0] == 1


async def test_failed_replacement_leaves_the_old_document(store: Store):
    await put(store, "a.md", ["alpha one"])
    bad = [records.NewChunk(ChunkDraft(text="gamma", key="k"), 1, EMBEDDER.embed(["g"])[0][:10])]
    doc = records.NewDocument("a.md", "text", "markdown", "h3")
    with pytest.raises(Exception, match=r"(?i)dimension"):
        await store.write(lambda c: c.replace_document(doc, bad))
    assert len(await fts(store, "alpha")) == 1
    assert await fts(store, "gamma") == []
    assert (await store.read(lambda c: c.document_by_source("a.md"))).content_hash == "h"


async def test_documents_by_source_answers_as_document_by_source_does(store: Store):
    await put(store, "a.md", ["alpha one"])
    await put(store, "b.md", ["beta two"])
    sources = ["b.md", "missing.md", "a.md", "a.md"]
    found = await store.read(lambda c: c.documents_by_source(sources))
    assert set(found) == {"a.md", "b.md"}
    for source in ("a.md", "b.md"):
        assert found[source] == await store.read(lambda c, s=source: c.document_by_source(s))
    assert await store.read(lambda c: c.documents_by_source([])) == {}


async def test_unchanged_chunks_keep_their_rows_and_counters(store: Store):
    await put(store, "log.jsonl", ["round one", "round two"])
    [first] = await fts(store, "one")
    await store.write(lambda c: c.count_use([first[0]], retrieval=True))
    grown = new_chunks(["round one", "round two", "round three"])
    keep = [records.NewChunk(c.draft, c.token_count, None) for c in grown[:2]] + grown[2:]
    doc = records.NewDocument("log.jsonl", "conversation", "jsonl", "h2")
    await store.write(lambda c: c.replace_document(doc, keep))
    [again] = await fts(store, "one")
    assert again[0] == first[0]
    chunk = (await store.read(lambda c: c.chunks_by_id([first[0]])))[first[0]]
    assert chunk.retrieval_count == 1 and chunk.access_count == 0
    assert (await store.read(lambda r: r.counts()))["chunks"] == 3


async def test_replace_documents_writes_each_in_order_and_clears_their_errors(store: Store):
    # A document with stale chunks between two new ones: the batched path stops there, that
    # one's old chunk goes, and the rest follow; links of a later document are kept too.
    await put(store, "b.md", ["bee kept", "bee stale"])
    [(target, _)] = await fts(store, "kept")
    for source in ("a.md", "b.md", "c.md", "other.md"):
        await store.write(lambda c, s=source: c.record_error(s, "IngestError", "broken"))
    [a] = new_chunks(["alpha"])
    kept, fresh = new_chunks(["bee kept", "bee fresh"])
    b = [records.NewChunk(kept.draft, kept.token_count, None), fresh]
    [c] = new_chunks(["gamma"])
    c = records.NewChunk(c.draft, c.token_count, c.vector, (("similar", target, 0.95),))
    docs = [
        (records.NewDocument(name, "text", "markdown", "h2"), chunks)
        for name, chunks in (("a.md", [a]), ("b.md", b), ("c.md", [c]))
    ]
    ids = await store.write(lambda w: w.replace_documents(docs))
    found = await store.read(lambda r: r.documents_by_source(["a.md", "b.md", "c.md"]))
    assert ids == [found[s].id for s in ("a.md", "b.md", "c.md")]
    assert [found[s].chunk_count for s in ("a.md", "b.md", "c.md")] == [1, 2, 1]
    assert await fts(store, "stale") == []
    [(kept_id, _)] = await fts(store, "kept")
    assert kept_id == target  # its row (and counters) stay
    [(gamma, _)] = await fts(store, "gamma")
    [link] = await store.read(lambda r: r.links_of(gamma, direction="out"))
    assert (link["dst"], link["relation"], link["origin"]) == (target, "similar", "auto")
    assert [e["source"] for e in await store.read(lambda r: r.errors())] == ["other.md"]
    assert await store.write(lambda w: w.replace_documents([])) == []


async def test_parents_are_linked_by_key(store: Store):
    vecs = EMBEDDER.embed(["s", "r", "f"])
    chunks = [
        records.NewChunk(
            ChunkDraft(text="fact", key="f", parent_key="r", granularity="fact"), 1, vecs[2]
        ),
        records.NewChunk(ChunkDraft(text="session", key="s", granularity="session"), 1, vecs[0]),
        records.NewChunk(
            ChunkDraft(text="round", key="r", parent_key="s", granularity="round"), 1, vecs[1]
        ),
    ]
    doc = records.NewDocument("c.json", "conversation", "locomo", "h")
    await store.write(lambda c: c.replace_document(doc, chunks))
    rows = await store.read(
        lambda c: c.fetchall(
            "SELECT key, (SELECT key FROM chunks p WHERE p.id = c.parent_id) FROM chunks c"
        )
    )
    assert dict((r[0], r[1]) for r in rows) == {"f": "r", "s": None, "r": "s"}


async def test_identifiers_are_findable(store: Store):
    await put(
        store,
        "log.txt",
        [
            "got ERR_CONN_RESET from upstream",
            "rename snake_case_names to camel",
            "café crème brûlée",
        ],
    )
    assert await texts_of(store, [i for i, _ in await fts(store, "ERR_CONN_RESET")]) == [
        "got ERR_CONN_RESET from upstream"
    ]
    assert len(await fts(store, "conn reset")) == 1
    assert len(await fts(store, "snake_case_names")) == 1
    assert len(await fts(store, "name")) == 1  # Porter: names -> name
    assert len(await fts(store, "cafe creme")) == 1  # diacritics removed


@pytest.mark.parametrize(
    "query",
    [
        '"unbalanced',
        "NEAR(alpha beta)",
        "alpha*",
        "text:alpha",
        "(alpha OR",
        "AND OR NOT",
        "^alpha",
        "alpha -beta",
        "a'b''c",
        "NOT alpha",
        "{text}: alpha",
        "alpha + beta",
        "'; DROP TABLE",
    ],
)
async def test_hostile_queries_return_results_not_errors(store: Store, query: str):
    await put(store, "a.md", ["alpha beta gamma", "near and not or text"])
    await fts(store, query)  # must not raise


async def test_filters(store: Store):
    await put(store, "/notes/a.md", ["shared word apple"], kind="text")
    await put(store, "/notes/b.md", ["shared word banana"], tags=("fruit",), event_time=100.0)
    await put(store, "/code/c.py", ["shared word cherry"], event_time=200.0)
    all_ids = await fts(store, "shared")
    assert len(all_ids) == 3
    assert len(await fts(store, "shared", Filters(sources=("/notes/",)))) == 2
    assert len(await fts(store, "shared", Filters(tags=("fruit",)))) == 1
    assert len(await fts(store, "shared", Filters(since=150.0))) == 1
    assert len(await fts(store, "shared", Filters(until=150.0))) == 1
    vector = EMBEDDER.embed(["shared word"])[0]
    near = await store.read(lambda c: c.knn(vector, 10, Filters(sources=("/code/",))))
    assert len(near) == 1
    near = await store.read(lambda c: c.knn(vector, 10, Filters(kinds=("text",))))
    assert len(near) == 3


async def test_latest_event_time_follows_the_scope_not_the_time_bounds(store: Store):
    assert await store.read(lambda c: c.latest_event_time(NO_FILTERS)) is None
    await put(store, "/notes/b.md", ["banana"], tags=("fruit",), event_time=100.0)
    await put(store, "/code/c.py", ["cherry"], event_time=200.0)

    async def latest(filters: Filters) -> float | None:
        return await store.read(lambda c: c.latest_event_time(filters))

    assert await latest(NO_FILTERS) == 200.0
    assert await latest(Filters(sources=("/notes/",))) == 100.0
    assert await latest(Filters(tags=("fruit",), until=50.0)) == 100.0  # bounds ignored
    assert await latest(Filters(tags=("vegetable",))) is None


async def test_delete_and_move(store: Store):
    await put(store, "old.md", ["movable text"])
    assert await store.write(lambda c: c.move_document("old.md", "new.md"))
    assert (await store.read(lambda c: c.document_by_source("new.md"))) is not None
    assert await store.write(lambda c: c.delete_document("new.md"))
    assert not await store.write(lambda c: c.delete_document("new.md"))
    assert (await store.read(lambda r: r.counts()))["chunks"] == 0
    assert await fts(store, "movable") == []


async def test_readers_are_not_blocked_by_a_long_write(store: Store):
    await put(store, "a.md", ["alpha"])
    release = asyncio.Event()

    async def slow_write(conn):
        await conn.execute(
            "INSERT INTO errors (source, error_type, message, at) VALUES ('x', 'E', 'm', 0)"
        )
        await release.wait()

    task = asyncio.create_task(store.write(slow_write))
    await asyncio.sleep(0.05)
    assert len(await asyncio.wait_for(fts(store, "alpha"), 2)) == 1
    # Uncommitted writes are invisible to readers.
    assert (await store.read(lambda r: r.counts()))["errors"] == 0
    release.set()
    await task
    assert (await store.read(lambda r: r.counts()))["errors"] == 1


async def test_query_time_limit(location: Path | str):
    s = await open_store(
        location,
        model_id=EMBEDDER.model_id,
        dimension=64,
        query_timeout_ms=50,
        vector_index=VECTOR_INDEX,
    )
    slow = "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT count(*) FROM n"
    with pytest.raises(QueryError, match="longer than"):
        await s.read(lambda c: c.fetchall(slow))
    await s.close()


async def test_a_cancelled_write_finishes_and_the_writer_stays_usable(store: Store):
    inside, release = asyncio.Event(), asyncio.Event()
    doc = records.NewDocument("slow.md", "text", "markdown", "h")
    chunks = new_chunks(["slow write"])

    async def slow(conn):
        doc_id = await conn.replace_document(doc, chunks)
        inside.set()
        await release.wait()
        return doc_id

    caller = asyncio.create_task(store.write(slow))
    await inside.wait()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    release.set()
    # The next write waits for the first to COMMIT instead of failing inside its
    # transaction, and both documents are whole.
    await put(store, "after.md", ["after the cancel"])
    counts = await store.read(lambda r: r.counts())
    assert counts["documents"] == 2 and counts["partial_documents"] == 0


async def test_counter_writes_leave_the_generation_alone(store: Store):
    await put(store, "g.md", ["alpha one"])
    [(top, _)] = await fts(store, "alpha")

    def commits() -> int:
        # PostgreSQL's generation also moves with the clock (other daemons' commits).
        return int(store._commits) if store.backend == "postgresql" else store.generation

    generation = commits()
    await store.write(lambda c: c.count_use([top], retrieval=True), counters_only=True)
    assert commits() == generation  # term frequencies cannot have changed
    chunk = (await store.read(lambda c: c.chunks_by_id([top])))[top]
    assert chunk.retrieval_count == 1
    await put(store, "h.md", ["alpha two"])
    assert commits() > generation


async def test_redacted_chunks_and_skipped_files_are_counted(store: Store):
    """`status` and `sources list` read these on both backends (issue 16)."""
    await put(store, "/p/a.md", ["key [REDACTED:aws_access_key] here", "nothing"])
    marked = new_chunks(["token [REDACTED:github_token]"], meta={"redacted": [{"type": "x"}]})
    doc = records.NewDocument("/p/b.md", "text", "markdown", "h")
    await store.write(lambda c: c.replace_document(doc, marked))
    # The word alone (a document about redaction) is not a redaction.
    await put(store, "/p/c.md", ["the report was redacted before release"])
    for source, file_type in (("/p/x.gz", ".gz"), ("/p/y.gz", ".gz"), ("/q/tool", "binary")):
        skipped = records.NewDocument(source, "skipped", file_type, f"skipped:{file_type}")
        await store.write(lambda c, d=skipped: c.replace_document(d, []))
    assert await store.read(lambda r: r.redacted_chunks()) == 1
    assert await store.read(lambda r: r.skipped_files()) == {".gz": 2, "binary": 1}
    assert await store.read(lambda c: c.skipped_files("/p/")) == {".gz": 2}


async def test_term_lookups_answer_each_term_in_one_statement(store: Store):
    await put(store, "t.md", ["alpha beta", "alpha gamma", "ERR_CONN_RESET here", "delta"])
    quoted = ['"alpha"', '"beta"', '"err_conn_reset"', '"missing"', '"AND"']
    # More terms than one statement holds: the lookups split and keep the order.
    many = quoted * 90
    want = [2, 1, 1, 0, 0]
    assert await store.read(lambda c: c.document_frequencies(many)) == want * 90
    assert await store.read(lambda c: c.document_frequency('"alpha"')) == 2
    [(top, _)] = await fts(store, "err conn reset")
    matched = await store.read(lambda c: c.matched_terms(top, many))
    assert matched == [False, False, True, False, False] * 90
    assert await store.read(lambda c: c.matched_terms(top, [])) == []
