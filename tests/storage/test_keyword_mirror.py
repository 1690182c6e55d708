"""The in-memory keyword mirror (storage/sqlite/keywords.py) answers as FTS5 does: the same
ids, the same scores to the bit, after writes too, on real SQLite files."""

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from recalld.storage.fts import match_expression, query_terms, quote_term
from recalld.storage.sqlite import keywords, readers
from recalld.storage.sqlite.keywords import expression_terms
from recalld.storage.sqlite.store import SqliteStore
from recalld.types import NO_FILTERS, Filters

from .conftest import EMBEDDER, put

TEXTS = [
    "Alpha cells secrete glucagon when blood glucose falls.",
    "Beta cells secrete insulin; insulin lowers blood glucose.",
    "Glucose transport into muscle cells needs insulin signalling.",
    "The snake_case_name ERR_CONN_RESET appears in the network logs.",
    "Café owners don't like résumé spam in their inbox.",
    "Insulin insulin insulin: repeated words raise the term frequency.",
    "Mitochondria produce ATP through oxidative phosphorylation in cells.",
    "Identical text for a tie.",
    "Identical text for a tie.",
    "It is what it is.",
]
QUERIES = [
    "insulin glucose cells",
    "What do beta cells secrete when blood glucose rises?",
    "ATP mitochondria oxidative phosphorylation muscle",
    "identical tie text",
    "cafe resume",
    "what is it",  # stopwords only: they are kept
    "nothing matches xyzzy",
    "secreting secreted secretes",  # one stem, three phrases
]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    s = await SqliteStore.open(tmp_path / "t.db", model_id=EMBEDDER.model_id, dimension=64)
    yield s
    await s.close()


async def mirrored(store: SqliteStore) -> None:
    """Wait until the mirror reflects the store (a lookup starts its rebuild)."""
    for _ in range(500):
        served = store.keywords.served
        await store.read(lambda r: r.document_frequencies(['"x"']))
        if store.keywords.served > served:
            return
        await asyncio.to_thread(store.keywords.wait_built)
        await asyncio.sleep(0.01)
    raise AssertionError("the keyword mirror never caught up")


async def both(store: SqliteStore, query: str, filters: Filters = NO_FILTERS, k: int = 20):
    """(FTS5's answer, the reader's answer) for one query."""
    expr = match_expression(query_terms(query))

    async def pair(r):
        return await readers.fts(r.conn, expr, k, filters), await r.fts(expr, k, filters)

    return await store.read(pair)


async def test_the_mirror_ranks_and_scores_as_fts5(store: SqliteStore):
    await put(store, "a.md", TEXTS)
    await mirrored(store)
    served = store.keywords.served
    for query in QUERIES:
        fts5, mirror = await both(store, query)
        assert mirror == fts5, query
    assert store.keywords.served >= served + len(QUERIES)
    fts5, mirror = await both(store, "identical tie text")
    assert len({score for _, score in mirror[:2]}) == 1 and mirror[0][0] < mirror[1][0]


async def test_term_lookups_agree_with_fts5(store: SqliteStore):
    await put(store, "a.md", TEXTS)
    await mirrored(store)
    ids = [cid for cid, _ in (await both(store, "cells insulin"))[0]]
    for query in QUERIES:
        terms = query_terms(query)
        expr = match_expression(terms)
        quoted = [quote_term(t) for t in terms]

        async def compare(r, expr=expr, quoted=quoted) -> None:
            served = store.keywords.served
            assert await r.keyword_scores(expr, [*ids, 999, ids[0]]) == (
                await readers.keyword_scores(r.conn, expr, [*ids, 999, ids[0]])
            )
            assert await r.document_frequencies(quoted) == (
                await readers.document_frequencies(r.conn, quoted)
            )
            for cid in ids:
                assert await r.matched_terms(cid, quoted) == (
                    await readers.matched_terms(r.conn, cid, quoted)
                )
            assert store.keywords.served > served

        await store.read(compare)


async def test_one_keyword_search_agrees_with_fts5(store: SqliteStore):
    await put(store, "a.md", TEXTS[:5])
    await put(store, "b.md", TEXTS[5:], kind="memory")
    await mirrored(store)
    total = await store.read(lambda r: r.chunk_total())
    for filters in (NO_FILTERS, Filters(kinds=("memory",))):
        for query in QUERIES:
            terms = query_terms(query)
            expr, quoted = match_expression(terms), [quote_term(t) for t in terms]

            async def compare(r, terms=terms, expr=expr, quoted=quoted, filters=filters) -> None:
                served = store.keywords.served
                answer = await r.keyword_search(terms, 4, filters, 2)
                assert store.keywords.served == served + 1
                hits = await readers.fts(r.conn, expr, 4, filters)
                assert answer.hits == hits
                assert answer.frequencies == await readers.document_frequencies(r.conn, quoted)
                assert answer.total == total
                assert answer.matched == [
                    await readers.matched_terms(r.conn, cid, quoted) for cid, _ in hits[:2]
                ]
                ids = list(range(1, total + 2))
                assert answer.scores is not None
                assert answer.scores(ids) == await readers.keyword_scores(r.conn, expr, ids)

            await store.read(compare)


async def test_filters_phrases_and_other_syntax(store: SqliteStore):
    await put(store, "a.md", TEXTS[:5])
    await put(store, "b.md", TEXTS[5:], kind="memory")
    await mirrored(store)
    for filters in (Filters(sources=("b.md",)), Filters(kinds=("memory",))):
        for query in QUERIES:
            fts5, mirror = await both(store, query, filters)
            assert mirror == fts5, (query, filters)
    # Several tokens in one term (a phrase) and raw FTS5 syntax are answered by FTS5.
    assert expression_terms('"a" OR "b"') == ["a", "b"]
    assert expression_terms('"a" AND "b"') is None
    for query in ("don't spam", "ERR_CONN_RESET logs"):
        served = store.keywords.served
        fts5, mirror = await both(store, query)
        assert mirror == fts5 and mirror
        assert store.keywords.served == served


async def test_the_mirror_follows_writes(store: SqliteStore):
    await put(store, "a.md", TEXTS[:3])
    await mirrored(store)
    assert (await both(store, "mitochondria"))[1] == []
    await put(store, "b.md", TEXTS[6:7])
    # Right after the write the mirror is stale: FTS5 answers, never the old snapshot.
    fts5, mirror = await both(store, "mitochondria cells")
    assert mirror == fts5 and len(mirror) == 4
    await mirrored(store)
    fts5, mirror = await both(store, "mitochondria cells")
    assert mirror == fts5 and len(mirror) == 4
    await store.write(lambda w: w.delete_document("a.md"))
    fts5, mirror = await both(store, "mitochondria cells")
    assert mirror == fts5 and len(mirror) == 1
    await mirrored(store)
    assert (await both(store, "mitochondria cells"))[1] == fts5


async def test_an_empty_store(store: SqliteStore):
    await mirrored(store)
    for query in QUERIES:
        assert await both(store, query) == ([], [])
    quoted = ['"insulin"', '"cells"']
    assert await store.read(lambda r: r.document_frequencies(quoted)) == [0, 0]
    assert await store.read(lambda r: r.matched_terms(1, quoted)) == [False, False]
    assert await store.read(lambda r: r.keyword_scores('"insulin"', [1, 2])) == {}


async def test_a_store_above_the_size_limit_is_searched_through_fts5(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(keywords, "MAX_OCCURRENCES", 20)
    await put(store, "a.md", TEXTS)
    for _ in range(2):
        for query in QUERIES:
            fts5, mirror = await both(store, query)
            assert mirror == fts5
        await asyncio.to_thread(store.keywords.wait_built)
    assert store.keywords.served == 0 and store.keywords.missed > 0


async def test_a_store_holding_exactly_the_size_limit_is_mirrored(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
):
    await put(store, "a.md", TEXTS)
    # The limit counts the index's tokens (FTS5's averages record), inclusive.
    reader = keywords._open_readonly(store.path)
    try:
        _, _, tokens = keywords._key(reader.execute(keywords._KEY_SQL).fetchall())
    finally:
        reader.close()
    assert tokens > 20
    monkeypatch.setattr(keywords, "MAX_OCCURRENCES", tokens)
    await mirrored(store)
    for query in QUERIES:
        fts5, mirror = await both(store, query)
        assert mirror == fts5, query


def test_the_size_limit_admits_a_million_synthetic_chunks():
    # `bench scale`'s 1M store holds ~80M tokens (issue 20): its mirror is built.
    assert keywords.MAX_OCCURRENCES >= 80_000_000


async def test_tokenising_and_scoring_never_run_on_the_event_loop(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
):
    await put(store, "a.md", TEXTS[:5])
    await put(store, "b.md", TEXTS[5:], kind="memory")
    await mirrored(store)
    threads: dict[str, set[int]] = {}

    def recording(name: str, method):
        def record(*args, **kwargs):
            threads.setdefault(name, set()).add(threading.get_ident())
            return method(*args, **kwargs)

        return record

    monkeypatch.setattr(keywords.Tokens, "of", recording("tokenise", keywords.Tokens.of))
    for name in ("scores", "frequency", "contains"):
        method = getattr(keywords.Snapshot, name)
        monkeypatch.setattr(keywords.Snapshot, name, recording(name, method))
    served = store.keywords.served
    terms = query_terms("fresh insulin glucose cells")  # "fresh": not yet tokenised
    expr, quoted = match_expression(terms), [quote_term(t) for t in terms]

    async def every_lookup(r) -> None:
        assert await r.fts(expr, 5, NO_FILTERS)
        assert await r.fts(expr, 5, Filters(kinds=("memory",)))
        assert await r.keyword_scores(expr, [1, 2, 3])
        assert await r.document_frequencies(quoted)
        assert await r.matched_terms(2, quoted)
        assert (await r.keyword_search(terms, 5, NO_FILTERS, 2)).matched
        assert (await r.keyword_search(terms, 5, Filters(kinds=("memory",)), 2)).matched

    await store.read(every_lookup)
    assert store.keywords.served == served + 7
    assert set(threads) == {"tokenise", "scores", "frequency", "contains"}
    loop_thread = threading.get_ident()
    assert all(loop_thread not in seen for seen in threads.values()), threads
