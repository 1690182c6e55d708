"""The ablation benchmark's reset of use counters, on both backends (plain SQL of its own)."""

from bench.ablation import reset_usage
from recalld.storage.contract import Store
from recalld.types import NO_FILTERS
from tests.storage.conftest import location, put, store  # noqa: F401 - the stores of tests/storage


async def test_reset_usage_clears_counters_and_back_dates(store: Store):  # noqa: F811
    await put(store, "/a.md", ["one", "two"])
    ids = [cid for cid, _ in await store.read(lambda c: c.fts('"one"', 5, NO_FILTERS))]
    await store.write(lambda c: c.count_use(ids, retrieval=True))
    await store.write(lambda c: c.count_use(ids, retrieval=False))
    [chunk] = (await store.read(lambda c: c.chunks_by_id(ids))).values()
    assert chunk.retrieval_count == chunk.access_count == 1
    await reset_usage(store, created_at=1000.0)
    doc_id = chunk.document_id
    for row in await store.read(lambda c: c.neighbours(doc_id, 0, 9)):
        assert (row.retrieval_count, row.access_count, row.created_at) == (0, 0, 1000.0)
        assert row.last_retrieved_at is None and row.last_accessed_at is None
    await reset_usage(store)  # without a date, creation times stay
    [chunk] = (await store.read(lambda c: c.chunks_by_id(ids))).values()
    assert chunk.created_at == 1000.0
