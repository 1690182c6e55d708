"""PostgreSQL's per-generation cache of keyword document counts (`storage.pg.term_stats`),
against the real server: a search that sees a new generation while another is still counting
must not take that other search's answer away (seen as a TypeError during an online reindex)."""

import asyncio

from recalld.storage.pg import term_stats
from recalld.storage.pg.access import PgReader
from recalld.storage.pg.term_stats import TermStats
from recalld.types import NO_FILTERS
from tests.storage.test_pg_bulk import TEXTS, open_, put


async def test_a_new_generation_while_the_total_is_counted_still_answers(pg_url: str):
    store = await open_(pg_url)
    try:
        await put(store, "a.md", TEXTS)
        generation = [0]
        stats = TermStats(lambda: generation[0])

        async def total(reader: PgReader) -> int:
            return await stats.chunk_total(reader.conn)

        async def frequencies(reader: PgReader) -> list[int]:
            return await stats.frequencies(reader.conn, ["alpha", "delta"])

        counting = asyncio.create_task(store.read(total))
        for _ in range(10_000):  # until the first search is counting
            if stats._total is not None:
                break
            await asyncio.sleep(0)
        assert not stats._total.done()
        generation[0] += 1  # a commit lands, and a second search starts meanwhile:
        stats._current()  # what its first look at the cache does
        assert await store.read(frequencies) == [1, 1]
        assert await counting == len(TEXTS)
        assert await store.read(total) == len(TEXTS)  # counted again for the new generation
    finally:
        await store.close()


async def test_a_keyword_search_that_counts_its_own_terms_scores_as_the_cached_one(pg_url: str):
    # Without filters and with no term counted yet, `fts` counts the terms in its own pass
    # over the matches and hands the counts to the cache; the next search reads them from it.
    texts = ["alpha beta beta", "beta gamma", "alpha alpha delta", "gamma the end"]
    store = await open_(pg_url)
    try:
        await put(store, "a.md", texts)
        stats = TermStats(lambda: 0)
        expression = '"alpha" OR "beta" OR "gamma" OR "the" OR "absent"'
        terms = ["alpha", "beta", "gamma", "the", "absent"]

        async def search(reader: PgReader) -> list[tuple[int, float]]:
            reader.conn.term_stats = stats
            return await reader.fts(expression, 10, NO_FILTERS)

        counted = await store.read(search)
        assert {t: f.result() for t, f in stats._counts.items()} == {
            "alpha": 2,
            "beta": 2,
            "gamma": 2,
            "the": 1,
            "absent": 0,
        }
        cached = await store.read(search)
        assert cached == counted
        assert len(counted) == 4
        fresh = await store.read(lambda r: term_stats.count(r.conn, terms))
        assert fresh == [2, 2, 2, 1, 0]
    finally:
        await store.close()
