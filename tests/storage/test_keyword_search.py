"""`Reader.keyword_search` answers as the single-purpose keyword operations do, on both
backends (SQLite: through FTS5 before its keyword mirror is built, then from the mirror)."""

import asyncio

from recalld.storage.contract import KeywordAnswer, Reader, Store
from recalld.storage.fts import match_expression, query_terms, quote_term
from recalld.storage.sqlite.store import SqliteStore
from recalld.types import NO_FILTERS, Filters

from .conftest import put

TEXTS = [
    "Alpha cells secrete glucagon when blood glucose falls.",
    "Beta cells secrete insulin; insulin lowers blood glucose.",
    "Glucose transport into muscle cells needs insulin signalling.",
    "Mitochondria produce ATP through oxidative phosphorylation in cells.",
    "Insulin insulin insulin: repeated words raise the term frequency.",
]
QUERIES = ["insulin glucose cells", "ATP mitochondria muscle", "nothing matches xyzzy", ""]
FILTERS = [NO_FILTERS, Filters(kinds=("memory",)), Filters(sources=("a.md",))]


async def answers(store: Store) -> list[KeywordAnswer]:
    """Every query, filter and depth through `keyword_search`, each checked against `fts`,
    `matched_terms`, `document_frequencies`, `chunk_total` and `keyword_scores`."""
    found: list[KeywordAnswer] = []

    async def check(r: Reader) -> None:
        every_id = [cid for ids in (await r.chunk_ids_by_kind()).values() for cid in ids]
        for query in QUERIES:
            terms = query_terms(query) if query else []
            expr, quoted = match_expression(terms), [quote_term(t) for t in terms]
            for filters in FILTERS:
                for depth in (1, 3):
                    answer = await r.keyword_search(terms, 3, filters, depth)
                    hits = await r.fts(expr, 3, filters)
                    assert answer.hits == hits, (query, filters)
                    assert answer.matched == [
                        await r.matched_terms(cid, quoted) for cid, _ in hits[:depth]
                    ]
                    if answer.frequencies is not None:
                        assert answer.frequencies == await r.document_frequencies(quoted)
                        assert answer.total == await r.chunk_total()
                    if answer.scores is not None:
                        ids = [*every_id, 10**9]
                        assert answer.scores(ids) == await r.keyword_scores(expr, ids)
                    found.append(answer)

    await store.read(check)
    return found


async def test_keyword_search_is_the_keyword_operations_in_one(store: Store):
    await put(store, "a.md", TEXTS[:3])
    await put(store, "b.md", TEXTS[3:], kind="memory")
    first = await answers(store)
    assert any(a.hits for a in first)
    if isinstance(store, SqliteStore):
        assert first[0].frequencies is None  # FTS5's: the mirror is not built yet
        # The first searches started the mirror's build; once built it answers everything.
        await asyncio.to_thread(store.keywords.wait_built)
        served = store.keywords.served
        mirrored = [a for a in await answers(store) if a.frequencies is not None]
        assert store.keywords.served > served
        # The empty query (no terms) is FTS5's: every other answer came from the mirror.
        assert len(mirrored) == (len(QUERIES) - 1) * len(FILTERS) * 2
        assert all(a.scores is not None for a in mirrored)
