"""Facts with their source turn: a fact hit carries the turn it was drawn from."""

import dataclasses
from pathlib import Path

import pytest

from recalld.api import AsyncMemory
from recalld.retrieval import fact_source
from recalld.types import Filters
from tests.helpers.conversations import ana_and_ben, memory_with

SAMPLE = ana_and_ben("conv-f")
FACTS = Filters(granularities=("fact",))


@pytest.fixture(params=["sqlite", "postgresql"])
async def memory(request: pytest.FixtureRequest, tmp_path: Path):
    pg_url = request.getfixturevalue("pg_url") if request.param == "postgresql" else None
    async with memory_with(tmp_path, SAMPLE, "locomo:f", pg_url) as opened:
        yield opened


async def test_a_fact_hit_carries_its_source_turn_when_switched_on(memory: AsyncMemory):
    found = await memory.searcher.search("cello lessons", filters=FACTS, fact_source=True)
    hit = found.hits[0]
    assert hit.chunk.granularity == "fact" and "cello" in hit.chunk.text
    assert hit.context == "Ben: Lovely! I started cello lessons."
    assert hit.explain["source_turn"] == {"round": hit.chunk.parent_id, "turn": "D1:2"}
    # Off by default: the fact comes alone.
    alone = await memory.searcher.search("cello lessons", filters=FACTS)
    assert alone.hits[0].context is None and "source_turn" not in alone.hits[0].explain
    # Packing counts the turn: a budget that holds the fact but not the turn drops it.
    tight = await memory.searcher.search(
        "cello lessons", filters=FACTS, fact_source=True, budget_tokens=12, limit=1
    )
    assert tight.packing is not None
    assert tight.packing["used_tokens"] <= 12


async def test_every_fact_resolves_to_a_turn_of_its_speaker_sharing_its_words(
    memory: AsyncMemory,
):
    found = await memory.searcher.search("beagle puppy cello shoe teacher", filters=FACTS)
    facts = [h.chunk for h in found.hits]
    assert len(facts) >= 3
    parents = await memory.store.read(lambda c: c.chunks_by_id([f.parent_id for f in facts]))
    turns = {t["dia_id"]: t for t in SAMPLE["conversation"]["session_1"]}
    for fact in facts:
        turn, speaker, text = fact_source.source_turn(fact, parents[fact.parent_id])
        assert [speaker] == fact.meta["speakers"] and turns[turn]["text"] == text
    # A statement sharing no word with the round's turns resolves to nothing.
    unrelated = dataclasses.replace(facts[0], text="Someone sings opera.")
    assert fact_source.source_turn(unrelated, parents[facts[0].parent_id]) is None
