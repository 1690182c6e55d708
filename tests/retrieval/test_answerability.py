"""Answerability: a question about someone the matching turns do not belong to is rejected."""

from pathlib import Path

import pytest

from recalld.api import AsyncMemory
from recalld.retrieval import answerability
from tests.helpers.conversations import ana_and_ben, memory_with


@pytest.fixture
async def memory(tmp_path: Path):
    async with memory_with(tmp_path, ana_and_ben("conv-a"), "locomo:a") as opened:
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
