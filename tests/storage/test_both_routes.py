"""Both routes of a hybrid search in one read (storage/sqlite/routes.py): the answers `knn`,
`keyword_search` and `vectors_by_id` give apart, or None where the read cannot give them."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from recalld.storage import records
from recalld.storage.contract import BothRoutes, KeywordAnswer, Store
from recalld.storage.registry import open_store
from recalld.storage.sqlite import vectors
from recalld.types import NO_FILTERS, ChunkDraft, Filters
from tests.storage.test_vectors import DIM, TIGHT, clustered, knn, put

WORDS = ["peanut", "allergy", "school", "museum", "pollen", "butter", "clinic", "lunch"]
TERMS = ["peanut", "school", "clinic"]


async def put_texts(store: Store, vecs: np.ndarray) -> None:
    """Documents of 50 chunks, each chunk a few of WORDS; every third a conversation."""
    for d in range(0, len(vecs), 50):
        kind, gran = ("conversation", "round") if d % 150 == 0 else ("text", "chunk")
        chunks = [
            records.NewChunk(
                ChunkDraft(
                    text=" ".join(WORDS[(i * j) % len(WORDS)] for j in range(1, 4)),
                    kind=kind,  # type: ignore[arg-type]
                    granularity=gran,  # type: ignore[arg-type]
                    key=f"k{i}",
                ),
                3,
                v,
            )
            for i, v in enumerate(vecs[d : d + 50], start=d)
        ]
        doc = records.NewDocument(f"doc{d}.md", kind, "markdown", f"h{d}")
        await store.write(lambda c, doc=doc, chunks=chunks: c.replace_document(doc, chunks))


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await open_store(tmp_path / "r.db", model_id="test-384", dimension=DIM)
    await put_texts(s, clustered(1500))
    assert await s.keywords.load() is not None  # the keyword mirror answers
    yield s
    await s.close()


def use(store: Store, route: str) -> None:
    store.vectors.tuning = dataclasses.replace(
        vectors.Tuning(), exact_below=0 if route == "cascade" else 20_000
    )


async def both(store: Store, q: np.ndarray, filters: Filters = NO_FILTERS) -> BothRoutes:
    return await store.read(lambda c: c.both_routes(q, TERMS, 20, filters, 3, True))


async def apart(store: Store, q: np.ndarray, filters: Filters = NO_FILTERS):
    hits = await knn(store, q, 20, filters)
    answer: KeywordAnswer = await store.read(lambda c: c.keyword_search(TERMS, 20, filters, 3))
    ids = [cid for cid, _ in answer.hits]
    stored = await store.read(lambda c: c.vectors_by_id(ids, DIM))
    return hits, answer, stored


@pytest.mark.parametrize("route", ["cascade", "exact"])
async def test_both_routes_answer_as_each_route_apart(store: Store, route: str) -> None:
    use(store, route)
    q = clustered(1500)[7]
    await knn(store, q)  # loads the mirror: before it, `knn` answers (None here)
    found = await both(store, q)
    hits, answer, stored = await apart(store, q)
    assert found.vector == hits  # the same ids and distances, bit for bit
    assert found.keyword is not None and answer.scores is not None
    assert found.keyword.hits == answer.hits and found.keyword.matched == answer.matched
    assert found.keyword.frequencies == answer.frequencies
    assert found.keyword.total == answer.total
    assert found.keyword.scores is not None
    some = [cid for cid, _ in hits]
    assert found.keyword.scores(some) == answer.scores(some)
    # The vectors of the keyword hits the vector route did not return: completion's.
    keyword_only = {c: v for c, v in stored.items() if c not in {cid for cid, _ in hits}}
    assert found.keyword_vectors is not None
    assert found.keyword_vectors.keys() == keyword_only.keys()
    assert all(np.array_equal(found.keyword_vectors[c], v) for c, v in keyword_only.items())


async def test_what_the_read_cannot_answer_is_left_to_the_routes_apart(store: Store) -> None:
    use(store, "cascade")
    q = clustered(1500)[3]
    assert (await both(store, q)).vector is None  # the mirror is not loaded yet
    await knn(store, q)
    rounds = Filters(granularities=("round",))
    found = await both(store, q, rounds)
    assert found.vector == await knn(store, q, 20, rounds)  # the cascade filters by itself
    assert found.keyword is None  # the keyword mirror answers unfiltered queries only
    sources = Filters(sources=("doc0",))
    found = await both(store, q, sources)
    assert found.vector is None and found.keyword is None
    no_vectors = await store.read(lambda c: c.both_routes(q, TERMS, 20, NO_FILTERS, 3, False))
    assert no_vectors.keyword is not None and no_vectors.keyword_vectors is None


async def test_another_process_writing_leaves_the_vector_route_to_knn(
    store: Store, tmp_path: Path
) -> None:
    store.vectors.tuning = TIGHT
    data = clustered(1600)
    await knn(store, data[0])
    other = await open_store(tmp_path / "r.db", model_id="test-384", dimension=DIM)
    try:
        await put(other, "foreign.md", data[1500:1600])
    finally:
        await other.close()
    found = await both(store, data[1550])
    assert found.vector is None  # the mirror was behind: dropped, and `knn` reloads it
    assert found.keyword_vectors is None  # chosen beside stale vector hits: read apart
    assert not store.vectors.loaded
    hits = await knn(store, data[1550], 1)
    assert store.vectors.live == 1600 and hits[0][1] == pytest.approx(0.0, abs=1e-5)
