"""Answerability: a question about someone the matching turns do not belong to is rejected."""

import json
from pathlib import Path

import pytest

from recalld.api import AsyncMemory
from recalld.config import load_settings
from recalld.retrieval import answerability

SAMPLE = {
    "sample_id": "conv-a",
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


@pytest.fixture
async def memory(tmp_path: Path):
    env = {"RECALLD_HOME": str(tmp_path), "RECALLD_EMBED__MODEL": "hash:64"}
    settings = load_settings(None, env).settings
    async with await AsyncMemory.open(settings) as opened:
        await opened.ingestor.ingest_bytes("locomo:a", "locomo.json", json.dumps(SAMPLE).encode())
        yield opened


async def test_questions_about_the_wrong_person_are_rejected_when_switched_on(
    memory: AsyncMemory,
):
    search = memory.searcher.search
    right = await search("What puppy did Ana adopt?", answerability_threshold=0.5)
    wrong = await search("What puppy did Ben adopt?", answerability_threshold=0.5)
    assert not right.rejected and right.hits
    assert right.explain["answerability"]["ownership"] == 1.0
    assert right.explain["answerability"]["people"] == ["Ana"]
    assert wrong.rejected and not wrong.hits and wrong.tier == "low"
    assert wrong.explain["answerability"]["ownership"] == 0.0
    # Off by default: the figures are explained, nothing is rejected.
    default = await search("What puppy did Ben adopt?")
    assert not default.rejected and default.hits
    assert default.explain["answerability"]["ownership"] == 0.0
    # A query that names nobody says nothing about ownership.
    nobody = await search("beagle puppy", answerability_threshold=0.5)
    assert nobody.explain["answerability"]["ownership"] is None and not nobody.rejected


def test_stem_and_named_people():
    assert answerability.stem("volunteering") == answerability.stem("volunteer")
    assert answerability.stem("Maria's") == "maria"
    assert answerability.named_people("What is Melanie's job?", ["Caroline", "Melanie"]) == (
        "Melanie",
    )
    assert answerability.named_people("What is the plan?", ["Caroline"]) == ()
    assert not answerability.rejects(answerability.Answerability(0.0, ("A",), 3), 0.0)
    assert answerability.rejects(answerability.Answerability(0.0, ("A",), 3), 0.2)
    assert not answerability.rejects(answerability.Answerability(None, (), 3), 0.2)
