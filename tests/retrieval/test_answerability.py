"""Answerability: a question about someone the matching turns do not belong to is rejected."""

from pathlib import Path
from typing import Any

import pytest

from recalld.api import AsyncMemory
from recalld.retrieval import answerability
from recalld.types import Chunk, Filters
from tests.helpers.conversations import ana_and_ben, memory_with
from tests.helpers.records import stored_chunk


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


def asked_and_answered(sample_id: str) -> dict[str, Any]:
    """Ben asks Ana about her puppy and she replies; Ben tells her about his kitten and she
    only says "Cute!"."""
    turns = [
        ("Ben", "Which puppy did you adopt from the shelter?"),
        ("Ana", "A beagle, three months old and very loud."),
        ("Ben", "I adopted a kitten from the shelter too."),
        ("Ana", "Cute!"),
    ]
    return {
        "sample_id": sample_id,
        "conversation": {
            "speaker_a": "Ben",
            "speaker_b": "Ana",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": s, "dia_id": f"D1:{n}", "text": t}
                for n, (s, t) in enumerate(turns, start=1)
            ],
        },
    }


async def test_a_question_belongs_to_the_one_who_answers_it_in_the_next_turn(tmp_path: Path):
    rounds = Filters(granularities=("round",))
    async with memory_with(tmp_path, asked_and_answered("conv-q"), "locomo:q") as memory:
        search = memory.searcher.search
        # The words are in Ben's question; Ana's reply holds the answer: the round is hers.
        hers = await search("What puppy did Ana adopt?", filters=rounds, answerability_k=1)
        assert hers.explain["answerability"]["ownership"] == 1.0
        assert hers.hits[0].chunk.meta["turn_ids"] == ["D1:1", "D1:2"]
        # A statement is its speaker's alone, whoever speaks next.
        his = await search(
            "What kitten did Ana adopt?",
            filters=rounds,
            answerability_k=1,
            answerability_threshold=0.5,
        )
        assert his.explain["answerability"]["ownership"] == 0.0 and his.rejected


def test_belongs_reads_the_reply_only_after_a_question():
    turns = [("Ben Lee", "Which puppy did you adopt?"), ("Ana", "A beagle.")]
    assert answerability.belongs(turns, 0, {"ana"}) and answerability.belongs(turns, 1, {"ana"})
    assert answerability.belongs(turns, 0, {"ben"}) and not answerability.belongs(turns, 1, {"ben"})
    told = [("Ben", "I adopted a kitten."), ("Ana", "Cute!")]
    assert not answerability.belongs(told, 0, {"ana"})
    # The last turn has no reply.
    assert not answerability.belongs([("Ben", "Who adopted one?")], 0, {"ana"})


def round_chunk(cid: int, lines: list[tuple[str, str]]) -> Chunk:
    """A round of "Speaker: text" lines (its turn ids D1:1, D1:2, ...)."""
    text = "\n".join(f"{who}: {said}" for who, said in lines)
    return stored_chunk(
        id=cid,
        document_id=1,
        source="locomo:w",
        position=cid,
        kind="conversation",
        granularity="round",
        text=text,
        token_count=len(text.split()),
        meta={
            "speakers": sorted({who for who, _ in lines}),
            "turn_ids": [f"D{cid}:{n}" for n in range(1, len(lines) + 1)],
        },
    )


def test_a_hit_weighs_the_words_its_best_turn_shares_with_the_query():
    # First hit: Ben's turn shares one word ("shelter"); second: Ana's turn shares three.
    one_word = round_chunk(1, [("Ben", "The shelter was closed."), ("Ana", "Oh no.")])
    three_words = round_chunk(
        2, [("Ana", "I adopted a beagle puppy at the shelter."), ("Ben", "Lovely.")]
    )
    found = answerability.measure_chunks("Ana adopted beagle shelter", [one_word, three_words], k=2)
    # Rank 1 weighs 1 x 1 word, rank 2 weighs 1/2 x 3 words: Ana owns 1.5 of 2.5.
    assert found.ownership == pytest.approx(1.5 / 2.5)
    assert found.people == ("Ana",)
