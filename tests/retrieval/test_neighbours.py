"""Neighbour support: a round is pulled up toward its best adjacent round
(`search.neighbour_support`), so an answer that opens the round after its question comes back."""

from pathlib import Path

import pytest

from recalld.api import AsyncMemory
from recalld.errors import QueryError
from recalld.retrieval import neighbours
from recalld.types import Filters
from tests.helpers.conversations import ana_and_ben_sessions, memory_with

ROUNDS = Filters(granularities=("round",))
FACTS = Filters(granularities=("fact",))
QUERY = "which instrument is Ana learning"


def question_then_answer() -> list[dict[str, str]]:
    """Ben asks at the end of the first round; Ana's answer opens the second."""
    return [
        {"speaker": "Ana", "text": "I spent the weekend repainting the garden fence."},
        {"speaker": "Ben", "text": "Nice. Which instrument are you learning these days?"},
        {"speaker": "Ana", "text": "The violin, since March."},
        {"speaker": "Ben", "text": "Cool, my cousin plays the drums."},
        {"speaker": "Ana", "text": "Is Ana learning to cook yet?"},
        {"speaker": "Ben", "text": "The weather was awful this week."},
    ]


@pytest.fixture(params=["sqlite", "postgresql"])
async def memory(request: pytest.FixtureRequest, tmp_path: Path):
    pg_url = request.getfixturevalue("pg_url") if request.param == "postgresql" else None
    sample = ana_and_ben_sessions("conv-n", question_then_answer())
    async with memory_with(tmp_path, sample, "locomo:n", pg_url) as opened:
        yield opened


def test_a_round_is_pulled_part_of_the_way_to_its_best_neighbour():
    # 1 - 2 - 3 are rounds in time order; 4 is a document chunk.
    order = [1, 4, 3, 2]
    scores = {1: 1.0, 4: 0.6, 3: 0.5, 2: 0.2}
    around = neighbours.adjacency([(1, 2, "temporal", 1.0), (2, 3, "temporal", 1.0)], order)
    assert around == {1: {2}, 2: {1, 3}, 3: {2}}
    ranked, new, lifts = neighbours.pull(order, scores, around, weight=0.5)
    # 2 takes half its gap to 1 (its best neighbour, not 3); 3's neighbour scored lower
    # before any lift, so 3 keeps its score; the best round and the document are untouched.
    assert new[2] == pytest.approx(0.6) and lifts[2] == neighbours.Lift(1, pytest.approx(0.4))
    assert new[3] == 0.5 and new[1] == 1.0 and new[4] == 0.6
    assert set(lifts) == {2}
    assert ranked == [1, 2, 4, 3]  # a tie at 0.6 goes to the lower id
    # Never past the neighbour that lifted it, whatever the weight; 0 changes nothing.
    assert neighbours.pull(order, scores, around, weight=1.0)[1][2] == pytest.approx(1.0)
    assert neighbours.pull(order, scores, around, weight=0.0)[0] == sorted(
        order, key=lambda c: -scores[c]
    )


def test_only_temporal_links_between_candidates_count():
    links = [(1, 2, "parent", 1.0), (1, 9, "temporal", 1.0), (3, 1, "temporal", 1.0)]
    assert neighbours.adjacency(links, [1, 2, 3]) == {1: {3}, 3: {1}}


def test_the_lift_does_not_depend_on_the_scale_or_offset_of_the_scores():
    order = [1, 2, 3]
    around = {1: {2}, 2: {1, 3}, 3: {2}}
    scores = {1: 0.9, 2: 0.1, 3: 0.4}
    shifted = {c: 10.0 * s - 3.0 for c, s in scores.items()}
    assert (
        neighbours.pull(order, scores, around, 0.5)[0]
        == neighbours.pull(order, shifted, around, 0.5)[0]
    )


async def test_the_answer_round_comes_back_beside_its_question(memory: AsyncMemory):
    plain = await memory.searcher.search(QUERY, filters=ROUNDS, gate=False, neighbour_support=0)
    texts = [h.chunk.text for h in plain.hits]
    question = next(i for i, t in enumerate(texts) if "Which instrument" in t)
    answer = next(i for i, t in enumerate(texts) if "violin" in t)
    assert question == 0 and answer > 1  # off: another round sits between them
    assert all("neighbours" not in h.explain for h in plain.hits)

    lifted = await memory.searcher.search(QUERY, filters=ROUNDS, gate=False)  # on by default
    assert "Which instrument" in lifted.hits[0].chunk.text
    assert "violin" in lifted.hits[1].chunk.text
    note = lifted.hits[1].explain["neighbours"]
    assert note["neighbour"] == lifted.hits[0].chunk.id and note["support"] > 0
    assert lifted.hits[1].score <= lifted.hits[0].score


async def test_the_weight_is_checked(memory: AsyncMemory):
    with pytest.raises(QueryError):
        await memory.searcher.search(QUERY, neighbour_support=1.5)


async def test_links_read_with_the_candidates_lift_as_links_read_apart(
    memory: AsyncMemory, monkeypatch: pytest.MonkeyPatch
):
    async def lifted() -> list[tuple[int, float, dict]]:
        found = await memory.searcher.search(QUERY, filters=ROUNDS, gate=False, limit=4)
        return [(h.chunk.id, h.score, h.explain) for h in found.hits]

    together = await lifted()  # the links come with the first load
    assert any("neighbours" in e for _, _, e in together)
    monkeypatch.setattr(neighbours.NeighbourSupport, "reads_links", lambda self, query: False)
    assert await lifted() == together  # the stage reads them itself


def test_a_fact_takes_its_rounds_place_in_time():
    # Rounds 10 - 11 - 12 in time order (12 not a candidate); facts 20 (of 10) and 21 (of 11);
    # 30 is a session (parent of the rounds, no temporal link of its own).
    links = [
        (10, 11, "temporal", 1.0),
        (11, 12, "temporal", 1.0),
        (20, 10, "parent", 1.0),
        (21, 11, "parent", 1.0),
        (10, 30, "parent", 1.0),
        (11, 30, "parent", 1.0),
    ]
    order = [20, 30, 11, 21]
    assert neighbours.places(links, order) == {20: 10, 11: 11, 21: 11}
    scores = {20: 1.0, 30: 0.8, 11: 0.2, 21: 0.4}
    place = neighbours.places(links, order)
    ranked, new, lifts = neighbours.pull_by_place(order, scores, links, place, weight=0.5)
    # Place 10's best (fact 20) lifts both candidates at the adjacent place 11, the round
    # and its fact, half way; nothing lifts place 10, and the session has no place.
    assert new[21] == pytest.approx(0.7) and lifts[21] == neighbours.Lift(20, pytest.approx(0.3))
    assert new[11] == pytest.approx(0.6) and lifts[11].neighbour == 20
    assert new[20] == 1.0 and new[30] == 0.8 and set(lifts) == {11, 21}
    assert ranked == [20, 30, 21, 11]
    # Rounds alone: the places are the rounds, and the pull is the rounds' own.
    rounds = [11, 10]
    alone = neighbours.pull_by_place(
        rounds, scores | {10: 0.9}, links, neighbours.places(links, rounds), 0.5
    )
    assert alone == neighbours.pull(
        rounds, scores | {10: 0.9}, neighbours.adjacency(links, rounds), 0.5
    )


async def test_the_answers_fact_comes_back_through_its_round(memory: AsyncMemory):
    def position(hits: list, words: str) -> int:
        return next(
            i for i, h in enumerate(hits) if h.chunk.granularity == "fact" and words in h.chunk.text
        )

    plain = (
        await memory.searcher.search(QUERY, gate=False, limit=50, neighbour_through_parent=False)
    ).hits
    assert "neighbours" not in plain[position(plain, "violin")].explain

    through = (await memory.searcher.search(QUERY, gate=False, limit=50)).hits  # on by default
    answer = through[position(through, "violin")]
    question_round = next(h for h in through if "Which instrument" in h.chunk.text)
    assert answer.explain["neighbours"]["neighbour"] == question_round.chunk.id
    assert position(through, "violin") < position(plain, "violin")
    assert answer.score <= question_round.score


async def test_the_parents_links_come_with_the_candidates(
    memory: AsyncMemory, monkeypatch: pytest.MonkeyPatch
):
    async def lifted() -> list[tuple[int, float, dict]]:
        found = await memory.searcher.search(QUERY, filters=FACTS, gate=False)
        return [(h.chunk.id, h.score, h.explain) for h in found.hits]

    # Facts alone: their rounds are not candidates, and their links place the facts in time.
    # Every link the stage follows comes with the first load: no read of links after it.
    async def reader_class(conn: object) -> type:
        return type(conn)

    reader = await memory.store.read(reader_class)
    reads: list[list[int]] = []
    touching = reader.links_touching

    async def counted(self, chunk_ids):  # a count of the real read, which it still makes
        reads.append(list(chunk_ids))
        return await touching(self, chunk_ids)

    monkeypatch.setattr(reader, "links_touching", counted)
    together = await lifted()
    assert any("neighbours" in e for _, _, e in together) and reads == []
    # Read apart (the stage's own reads), the lifts are the same.
    monkeypatch.setattr(
        neighbours.NeighbourSupport, "reads_parents_links", lambda self, query: False
    )
    assert await lifted() == together and reads
