"""Facts match for their unit (`search.match_facts`): a search filtered past facts compares the
query with each candidate round's facts too, and keeps the better similarity."""

from pathlib import Path

import pytest

from recalld.api import AsyncMemory
from recalld.retrieval import completion
from recalld.types import Filters
from tests.helpers.conversations import ana_and_ben, memory_with

ROUNDS = Filters(granularities=("round",))
QUERY = "Ana adopted a beagle puppy"


@pytest.fixture(params=["sqlite", "postgresql"])
async def memory(request: pytest.FixtureRequest, tmp_path: Path):
    pg_url = request.getfixturevalue("pg_url") if request.param == "postgresql" else None
    async with memory_with(tmp_path, ana_and_ben("conv-f"), "locomo:f", pg_url) as opened:
        yield opened


async def _units(memory: AsyncMemory, granularity: str) -> dict[int, int | None]:
    """Chunk id to parent id, for every chunk of one granularity."""
    found = await memory.searcher.search(
        "beagle cello", filters=Filters(granularities=(granularity,)), gate=False, limit=50
    )
    return {h.chunk.id: h.chunk.parent_id for h in found.hits}


async def test_each_round_gets_its_best_fact(memory: AsyncMemory):
    rounds = await _units(memory, "round")
    facts = await _units(memory, "fact")
    assert rounds and facts
    store = memory.searcher.store
    vector = await memory.searcher.embed_query(QUERY)
    best = await completion.best_facts(store, vector, sorted(rounds))
    vectors = await store.read(lambda c: c.vectors_by_id(sorted(facts), store.dimension))
    cosine = completion.cosines(vector, vectors)
    for round_id in rounds:
        own = [f for f, parent in facts.items() if parent == round_id]
        if not own:
            assert round_id not in best
            continue
        fact, value = best[round_id]
        assert facts[fact] == round_id and value == pytest.approx(max(cosine[f] for f in own))


async def test_only_a_search_filtered_past_facts_reads_them(memory: AsyncMemory):
    searcher = memory.searcher
    matched = await searcher.search(QUERY, filters=ROUNDS, gate=False)  # on by default
    notes = [h.explain["routes"]["vector"].get("fact") for h in matched.hits]
    assert any(notes), "a fact matched better than its round"
    for hit, note in zip(matched.hits, notes, strict=True):
        if note is not None:
            # The fact's similarity replaced the round's own on the vector side of the fusion.
            assert note["similarity"] > hit.explain["routes"]["vector"]["similarity"]
    plain = await searcher.search(QUERY, filters=ROUNDS, gate=False, match_facts=False)
    assert all("fact" not in h.explain["routes"].get("vector", {}) for h in plain.hits)
    # Facts in the search: they are candidates themselves, and nothing is read for them.
    unfiltered = await searcher.search(QUERY, gate=False, match_facts=True)
    assert all("fact" not in h.explain["routes"].get("vector", {}) for h in unfiltered.hits)
