"""Token-budget packing on plain hits, with a word-count tokenizer."""

import random

import pytest

from recalld.retrieval.packing import pack
from recalld.types import Chunk, Hit
from tests.helpers.records import stored_chunk


def words(text: str) -> int:
    return len(text.split())


def chunk(cid: int, text: str, granularity: str = "fact", parent: int | None = None) -> Chunk:
    return stored_chunk(
        id=cid,
        document_id=1,
        source="s",
        position=cid,
        kind="conversation",
        granularity=granularity,
        key=str(cid),
        parent_id=parent,
        text=text,
        token_count=words(text),
    )


def hits(*chunks: Chunk) -> list[Hit]:
    return [Hit(chunk=c, score=1.0 / (i + 1)) for i, c in enumerate(chunks)]


ROUND = chunk(10, "Anna: I went hiking by the lake. Ben: was it cold?", "round")
SESSION = chunk(20, " ".join(["word"] * 200), "session")


def test_fact_hits_get_their_round_when_it_fits():
    found = hits(chunk(1, "Anna went hiking.", parent=10), chunk(2, "Ben asked.", parent=10))
    kept, report = pack(found, 30, words, {10: ROUND})
    assert [h.chunk.id for h in kept] == [1, 2]
    assert kept[0].context == ROUND.text
    assert kept[0].explain["expanded"] == {"parent": 10}
    # The second fact shares the parent: it is not repeated, only pointed at.
    assert kept[1].context is None and kept[1].explain["tokens"]["context_with"] == 1
    assert report["used_tokens"] == 3 + 2 + words(ROUND.text) <= 30
    assert report["dropped"] == [] and report["context_dropped"] == []


def test_context_is_dropped_before_hits_are():
    found = hits(chunk(1, "Anna went hiking.", parent=20), chunk(2, "Ben asked twice.", parent=20))
    kept, report = pack(found, 10, words, {20: SESSION})
    assert [h.chunk.id for h in kept] == [1, 2] and kept[0].context is None
    assert report["context_dropped"] == [{"id": 1, "parent": 20, "tokens": 200}]
    assert report["used_tokens"] == 6


def test_hits_over_budget_are_dropped_and_smaller_ones_still_fit():
    found = hits(chunk(1, "a b c d e"), chunk(2, " ".join("x" * 20)), chunk(3, "f g"))
    kept, report = pack(found, 8, words, {})
    assert [h.chunk.id for h in kept] == [1, 3]
    assert report["dropped"] == [{"id": 2, "tokens": 20}]
    assert report["used_tokens"] == 7


def test_a_parent_already_in_the_results_is_not_attached():
    found = hits(chunk(1, "Anna went hiking.", parent=10), ROUND)
    kept, _ = pack(found, 100, words, {10: ROUND})
    assert kept[0].context is None


def test_expanded_context_is_counted_and_shed_when_needed():
    found = hits(chunk(1, "a b c", "chunk"))
    found[0].context = "one two three four five six"
    found[0].explain["expanded"] = {"neighbours": [2]}
    kept, report = pack(found, 5, words, {})
    assert kept[0].context is None and "expanded" not in kept[0].explain
    assert report["context_dropped"][0]["reason"] == "expanded"


def test_a_failing_counter_falls_back_to_the_stored_count():
    def broken(text: str) -> int:
        raise RuntimeError("no tokenizer")

    kept, report = pack(hits(chunk(1, "a b c")), 10, broken, {})
    assert report["used_tokens"] == 3 and len(kept) == 1


@pytest.mark.parametrize("seed", range(20))
def test_never_exceeds_the_budget(seed: int):
    rng = random.Random(seed)
    parents = {
        100 + i: chunk(100 + i, " ".join(["p"] * rng.randint(1, 60)), "round") for i in range(5)
    }
    found = hits(
        *(
            chunk(
                i,
                " ".join(["t"] * rng.randint(1, 40)),
                rng.choice(["fact", "round"]),
                rng.choice([None, *parents]),
            )
            for i in range(1, 15)
        )
    )
    budget = rng.randint(1, 300)
    kept, report = pack(found, budget, words, parents)
    total = sum(words(h.chunk.text) + (words(h.context) if h.context else 0) for h in kept)
    assert total == report["used_tokens"] <= budget
    assert len(kept) + len(report["dropped"]) == len(found)
