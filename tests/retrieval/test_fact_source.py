"""Facts with their source turn: a fact hit carries the turn it was drawn from."""

import dataclasses
import json
from pathlib import Path

import pytest

from recalld.api import AsyncMemory
from recalld.config import load_settings
from recalld.retrieval import fact_source
from recalld.types import Filters
from tests.helpers.postgres import VECTOR_INDEX

SAMPLE = {
    "sample_id": "conv-f",
    "conversation": {
        "speaker_a": "Ana",
        "speaker_b": "Ben",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a beagle puppy last week."},
            {"speaker": "Ben", "dia_id": "D1:2", "text": "Lovely! I started cello lessons."},
            {"speaker": "Ana", "dia_id": "D1:3", "text": "The beagle chews every shoe I own."},
            {"speaker": "Ben", "dia_id": "D1:4", "text": "My cello teacher is very strict."},
        ],
    },
}
FACTS = Filters(granularities=("fact",))


@pytest.fixture(params=["sqlite", "postgresql"])
async def memory(request: pytest.FixtureRequest, tmp_path: Path):
    env = {"RECALLD_HOME": str(tmp_path), "RECALLD_EMBED__MODEL": "hash:64"}
    if request.param == "postgresql":
        env["RECALLD_STORE__PATH"] = request.getfixturevalue("pg_url")
        env["RECALLD_STORE__VECTOR_INDEX"] = VECTOR_INDEX
    settings = load_settings(None, env).settings
    async with await AsyncMemory.open(settings) as opened:
        await opened.ingestor.ingest_bytes("locomo:f", "locomo.json", json.dumps(SAMPLE).encode())
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
