"""Score completion: every candidate of the union gets its real score from both routes."""

from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from recalld.api import AsyncMemory
from recalld.config import load_settings
from recalld.retrieval import completion
from recalld.storage.fts import match_expression, query_terms
from recalld.types import Filters
from tests.helpers.postgres import VECTOR_INDEX

# Twenty notes sharing a few words in different mixes, so with five candidates per route each
# route returns some chunks the other does not.
NOTES = [
    f"note {i}: {' '.join(words)}"
    for i, words in enumerate(
        [
            ("peanut", "allergy", "school"),
            ("peanut", "butter", "recipe"),
            ("allergy", "season", "pollen"),
            ("school", "trip", "museum"),
            ("nut", "free", "lunch", "box"),
            ("epipen", "injector", "backpack"),
            ("allergic", "reaction", "hospital"),
            ("butter", "croissant", "bakery"),
            ("pollen", "count", "spring"),
            ("museum", "ticket", "price"),
            ("lunch", "menu", "canteen"),
            ("hospital", "visit", "tuesday"),
            ("peanut", "oil", "frying"),
            ("allergy", "test", "clinic"),
            ("school", "nurse", "medicine"),
            ("reaction", "time", "driving"),
            ("backpack", "zip", "broken"),
            ("spring", "garden", "tulips"),
            ("clinic", "opening", "hours"),
            ("medicine", "cabinet", "bathroom"),
        ]
    )
]
QUERY = "peanut allergy at school, where is the injector"


@pytest.fixture(params=["sqlite", "postgresql"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    env = {"RECALLD_HOME": str(tmp_path), "RECALLD_EMBED__MODEL": "hash:64"}
    if request.param == "postgresql":
        env["RECALLD_STORE__PATH"] = request.getfixturevalue("pg_url")
        env["RECALLD_STORE__VECTOR_INDEX"] = VECTOR_INDEX
    return env


@pytest.fixture
async def memory(env: dict[str, str]) -> AsyncIterator[AsyncMemory]:
    settings = load_settings(None, env).settings
    async with await AsyncMemory.open(settings) as opened:
        for i, note in enumerate(NOTES):
            await opened.add_text(note, source=f"n{i}", name="n.txt")
        yield opened


async def test_every_hit_has_both_routes_scores_and_they_are_the_real_ones(memory: AsyncMemory):
    search = memory.searcher.search
    result = await search(QUERY, limit=5, candidates=5, complete_scores=True, gate=False)
    # The reference: each route alone over every chunk, so nothing is missing.
    every = {"limit": 20, "candidates": 20, "gate": False, "dedup": False}
    vector = {
        h.chunk.id: h.explain["routes"]["vector"]["similarity"]
        for h in (await search(QUERY, mode="vector", **every)).hits
    }
    keyword = {
        h.chunk.id: h.explain["routes"]["bm25"]["score"]
        for h in (await search(QUERY, mode="bm25", **every)).hits
    }
    completed = {"vector": 0, "bm25": 0}
    for hit in result.hits:
        routes = hit.explain["routes"]
        assert set(routes) == {"vector", "bm25"}, routes
        assert routes["vector"]["similarity"] == pytest.approx(vector[hit.chunk.id], abs=2e-4)
        assert routes["bm25"]["score"] == pytest.approx(keyword.get(hit.chunk.id, 0.0), abs=2e-4)
        for route, entry in routes.items():
            if entry.get("completed"):
                completed[route] += 1
                assert "rank" not in entry
            else:
                assert entry["rank"] <= 5
    # Each route missed something the other found (otherwise this test proves nothing).
    assert completed["vector"] >= 1 and completed["bm25"] >= 1


async def test_completion_is_on_by_default_and_changes_only_hybrid(memory: AsyncMemory):
    completed = await memory.searcher.search(QUERY, limit=5, candidates=5, gate=False)
    assert all(len(h.explain["routes"]) == 2 for h in completed.hits)
    plain = await memory.searcher.search(
        QUERY, limit=5, candidates=5, gate=False, complete_scores=False
    )
    assert any(len(h.explain["routes"]) == 1 for h in plain.hits)
    assert not any(e.get("completed") for h in plain.hits for e in h.explain["routes"].values())
    alone = await memory.searcher.search(QUERY, mode="bm25", limit=5, complete_scores=True)
    assert all(set(h.explain["routes"]) == {"bm25"} for h in alone.hits)
    for fusion in ("score", "rrf"):
        fused = await memory.searcher.search(
            QUERY, limit=5, candidates=5, complete_scores=True, fusion=fusion, gate=False
        )
        assert fused.hits and all(len(h.explain["routes"]) == 2 for h in fused.hits)


async def test_a_chunk_only_the_vector_route_found_gets_exactly_its_keyword_route_score(
    memory: AsyncMemory,
):
    store = memory.searcher.store
    expression = match_expression(query_terms(QUERY))
    # The keyword route over every chunk, and the same route cut to its best three.
    every = dict(await store.read(lambda c: c.fts(expression, len(NOTES), Filters())))
    top = dict(await store.read(lambda c: c.fts(expression, 3, Filters())))
    ids = [
        cid
        for of_kind in (await store.read(lambda c: c.chunk_ids_by_kind())).values()
        for cid in of_kind
    ]
    vector_only = {cid: 0.5 for cid in ids if cid not in top}
    assert any(cid in every for cid in vector_only)  # some of them do match a term
    completed = await completion.complete(store, None, expression, vector_only, top)
    for cid in vector_only:
        assert completed.keyword[cid] == every.get(cid, 0.0), cid  # bit for bit, not approx
    found = await store.read(lambda c: c.keyword_scores(expression, [*vector_only, 10**9]))
    assert found == {cid: score for cid, score in every.items() if cid in vector_only}


def test_cosines_are_exact_and_safe_for_zero_vectors():
    query = np.array([3.0, 4.0], dtype=np.float32)
    got = completion.cosines(
        query,
        {1: np.array([3.0, 4.0], dtype=np.float32), 2: np.array([-4.0, 3.0], dtype=np.float32)}
        | {3: np.zeros(2, dtype=np.float32), 4: np.array([6.0, 8.0], dtype=np.float32)},
    )
    assert got == pytest.approx({1: 1.0, 2: 0.0, 3: 0.0, 4: 1.0})
