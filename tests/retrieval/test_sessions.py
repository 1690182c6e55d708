"""Session-first scoring: turn-level hits give bounded support to their session, returned
in their place (`search.session_first`, off by default)."""

from pathlib import Path
from typing import Any

import pytest

from recalld.api import AsyncMemory
from recalld.retrieval import sessions
from recalld.types import Filters
from tests.helpers.conversations import ana_and_ben, memory_with

ROUNDS = Filters(granularities=("round",))


def two_sessions() -> dict[str, Any]:
    """Ana and Ben's first session (a beagle, a cello) and a second about a garden."""
    sample = ana_and_ben("conv-s")
    sample["conversation"]["session_2_date_time"] = "3:10 pm on 20 May, 2023"
    sample["conversation"]["session_2"] = [
        {"speaker": "Ana", "dia_id": "D2:1", "text": "My tomatoes finally turned red."},
        {"speaker": "Ben", "dia_id": "D2:2", "text": "Our garden only grows weeds."},
    ]
    return sample


@pytest.fixture(params=["sqlite", "postgresql"])
async def memory(request: pytest.FixtureRequest, tmp_path: Path):
    pg_url = request.getfixturevalue("pg_url") if request.param == "postgresql" else None
    async with memory_with(tmp_path, two_sessions(), "locomo:s", pg_url) as opened:
        yield opened


def test_support_is_bounded_and_turns_give_way_to_their_session():
    # 1 and 2 are turns of session 10; 3 a turn of session 20; 4 a document chunk.
    order = [1, 3, 2, 4, 10]
    scores = {1: 0.9, 3: 0.8, 2: 0.5, 4: 0.3, 10: 0.2}
    owner = {1: 10, 2: 10, 3: 20}
    ranked, new, support = sessions.aggregate(order, scores, owner, cap=0.12, weight=0.6)
    # Session 10: own 0.2 + min(0.12, 0.6 x 0.9); session 20 was not recalled: 0 + 0.12.
    assert new[10] == pytest.approx(0.32) and new[20] == pytest.approx(0.12)
    assert ranked == [10, 4, 20]
    assert support[10] == sessions.Support(own=0.2, support=0.12, turns=2, best_turn=1)
    assert support[20].own == 0.0 and support[20].turns == 1
    # Cap and weight 1: sessions rank by their best turn alone.
    ranked, new, _ = sessions.aggregate(order, scores, owner, cap=1.0, weight=1.0)
    assert ranked == [10, 20, 4] and new[10] == pytest.approx(1.1)


async def test_rounds_match_and_their_session_is_returned(memory: AsyncMemory):
    found = await memory.searcher.search(
        "cello lessons", filters=ROUNDS, session_first=True, session_support_cap=1.0
    )
    top = found.hits[0]
    assert top.chunk.granularity == "session" and "cello" in top.chunk.text
    assert all(h.chunk.granularity == "session" for h in found.hits)
    assert len({h.chunk.id for h in found.hits}) == len(found.hits)
    note = top.explain["sessions"]
    # Sessions were filtered out of recall: the score is the best round's, as support.
    assert note["own"] == 0.0 and note["supporting_turns"] >= 1
    assert top.score == pytest.approx(note["support"])
    assert found.explain["session_first"] is True
    # Off by default: the rounds themselves come back.
    plain = await memory.searcher.search("cello lessons", filters=ROUNDS)
    assert plain.hits[0].chunk.granularity == "round" and "sessions" not in plain.hits[0].explain
    assert "session_first" not in plain.explain
