"""Answerability calibrated per store: the threshold is learned from the store's own turns."""

import json
import random
from pathlib import Path

import pytest

from recalld.api import AsyncMemory
from recalld.cli.admin import answerability_line
from recalld.retrieval import answerability_tune, selftune
from recalld.types import Chunk, Filters
from tests.helpers.conversations import ana_and_ben_sessions, memory_with

TOPICS = [
    ("planted", "tomatoes", "basil", "garden"),
    ("painted", "sunsets", "watercolor", "canvas"),
    ("adopted", "beagle", "puppy", "shelter"),
    ("repaired", "bicycle", "chain", "garage"),
    ("baked", "sourdough", "loaves", "bakery"),
    ("climbed", "granite", "boulders", "canyon"),
    ("knitted", "woolen", "scarves", "winter"),
    ("recorded", "violin", "sonatas", "studio"),
    ("photographed", "herons", "marshes", "dawn"),
    ("brewed", "ginger", "kombucha", "kitchen"),
    ("sailed", "catamaran", "harbor", "regatta"),
    ("studied", "volcanoes", "craters", "iceland"),
    ("coached", "soccer", "juniors", "tournament"),
    ("restored", "antique", "clocks", "workshop"),
    ("translated", "spanish", "poems", "anthology"),
    ("carved", "walnut", "spoons", "cabin"),
    ("trained", "marathon", "intervals", "track"),
    ("sketched", "cathedral", "arches", "notebook"),
    ("harvested", "honey", "beehives", "orchard"),
    ("designed", "wooden", "puzzles", "festival"),
    ("hiked", "glacier", "trails", "patagonia"),
    ("composed", "piano", "lullabies", "daughter"),
    ("fermented", "cabbage", "kimchi", "cellar"),
    ("volunteered", "animal", "rescue", "weekends"),
]
PEOPLE = ("Ana", "Ben")


def sample() -> dict[str, object]:
    """Two sessions: in the first each topic's owner says what they did (the other answers
    "Nice."), in the second the other speaker says the same words about themselves."""
    first, second = [], []
    for n, (verb, thing, detail, place) in enumerate(TOPICS):
        owner, other = PEOPLE[n % 2], PEOPLE[(n + 1) % 2]
        first += [
            {"speaker": owner, "text": f"I {verb} the {thing} with {detail} near the {place}."},
            {"speaker": other, "text": "Nice."},
        ]
        second += [
            {"speaker": other, "text": f"I {verb} some {thing} with {detail} at a {place} too."},
            {"speaker": owner, "text": "Cool."},
        ]
    return ana_and_ben_sessions("conv-tune", first, second)


@pytest.fixture(params=["sqlite", "postgresql"])
async def memory(request: pytest.FixtureRequest, tmp_path: Path):
    pg_url = request.getfixturevalue("pg_url") if request.param == "postgresql" else None
    async with memory_with(tmp_path, sample(), "locomo:tune", pg_url) as opened:
        yield opened


async def search_chunks(
    memory: AsyncMemory, text: str, limit: int, granularity: str | None = None
) -> list[Chunk]:
    filters = Filters(granularities=(granularity,)) if granularity else Filters()
    found = await memory.searcher.search(
        text, limit=limit, filters=filters, answerability_threshold=0.0
    )
    return [h.chunk for h in found.hits]


async def test_a_store_learns_its_thresholds_deterministically(memory: AsyncMemory):
    async def search(text: str, limit: int, granularity: str | None) -> list[Chunk]:
        return await search_chunks(memory, text, limit, granularity)

    first = await answerability_tune.calibrate(memory.store, search)
    again = await answerability_tune.calibrate(memory.store, search)
    assert first == again
    # Unfiltered searches and searches of rounds (the only unit here besides sessions and
    # facts) each have their own.
    assert set(first) == {"all", "round"}
    for learned in first.values():
        assert learned.skipped is None and learned.queries >= answerability_tune.MIN_QUERIES
        # Asked with the turn in the store, its speaker owns the hits; with it taken out,
        # the other speaker's turn with the same words does: a threshold tells them apart.
        assert learned.threshold in answerability_tune.THRESHOLDS
        assert learned.k in answerability_tune.KS
        assert learned.false_rejection <= answerability_tune.MAX_FALSE
        assert learned.rejected >= learned.false_rejection + answerability_tune.MIN_MARGIN
    assert answerability_tune.scope_of(("round",)) == "round"
    assert answerability_tune.scope_of(()) == answerability_tune.scope_of(("round", "fact"))


async def test_pseudo_questions_name_the_speaker_and_the_turn_is_taken_out(
    memory: AsyncMemory,
):
    ids = (await memory.store.read(lambda r: r.chunk_ids_by_kind()))["conversation"]
    drawn, units = await answerability_tune.pseudo_questions(
        memory.store, ids, 50, random.Random(1)
    )
    assert units == {"round"} and len(drawn) >= answerability_tune.MIN_QUERIES
    for question in drawn:
        first, *words = question.text.split()
        low, high = answerability_tune.WORDS
        assert first in PEOPLE and low <= len(words) <= high
    question = drawn[0]
    hits = await search_chunks(memory, question.text, answerability_tune.HITS)
    assert any(answerability_tune.holds(c, question.turn) for c in hits)
    found, removed = answerability_tune.ownerships(question, hits)
    assert set(found) == set(removed) == set(answerability_tune.KS)


def test_choose_keeps_the_threshold_off_when_nothing_separates():
    ks = answerability_tune.KS
    same: dict[int, list[float | None]] = {k: [1.0, 0.5, 0.0, None] * 10 for k in ks}
    chosen = answerability_tune.choose(same, same)
    assert chosen.threshold == 0.0 and chosen.queries == 40
    apart = {k: [0.0] * 10 + [None] * 30 for k in ks}
    owned: dict[int, list[float | None]] = {k: [1.0] * 40 for k in ks}
    chosen = answerability_tune.choose(owned, apart)
    # Every threshold and k rejects the same 25 %: the lowest threshold, at the largest k.
    assert (chosen.k, chosen.threshold, chosen.rejected, chosen.false_rejection) == (
        max(ks),
        0.01,
        0.25,
        0.0,
    )
    assert chosen.current()


async def test_recorded_with_the_fusion_shown_and_used_when_switched_on(memory: AsyncMemory):
    tuning = await memory.calibrate()
    assert tuning.answerability is not None
    learned = tuning.answerability["all"]
    assert learned.threshold > 0
    raw = await memory.store.read(lambda c: c.meta_value(selftune.META_KEY))
    recorded = json.loads(raw)["answerability"]
    assert recorded == {k: v.as_dict() for k, v in tuning.answerability.items()}
    assert f"answerability all: {learned.threshold} at k = {learned.k}" in tuning.summary()
    loaded = await selftune.load(memory.store)
    assert loaded is not None and loaded.answerability == tuning.answerability

    asked = "Ben planted tomatoes basil garden"  # Ana planted them; Ben only says he did too
    default = await memory.searcher.search(asked)
    assert not default.rejected
    assert default.explain["answerability"]["learned"] is False
    assert default.explain["answerability"]["threshold"] == 0.0
    used = await memory.searcher.search(asked, answerability_self_tune=True)
    note = used.explain["answerability"]
    assert note["learned"] is True and note["threshold"] == learned.threshold
    assert note["k"] == learned.k
    # A call that sets its own threshold keeps it.
    # A search of rounds uses what was learned on rounds.
    rounds = await memory.searcher.search(
        asked, answerability_self_tune=True, filters=Filters(granularities=("round",))
    )
    assert rounds.explain["answerability"]["threshold"] == tuning.answerability["round"].threshold
    own = await memory.searcher.search(
        asked, answerability_self_tune=True, answerability_threshold=0.0
    )
    assert own.explain["answerability"]["learned"] is False and not own.rejected

    # A threshold recorded for the ownership signal before (no `signal`) is not used.
    stale = {k: v.as_dict() for k, v in tuning.answerability.items()}
    for found in stale.values():
        del found["signal"]
    old = selftune.StoreTuning.from_dict({**tuning.as_dict(), "answerability": stale})
    assert old.answerability is not None and not old.answerability["all"].current()
    memory.searcher.tuning = old
    unused = await memory.searcher.search(asked, answerability_self_tune=True)
    assert unused.explain["answerability"]["learned"] is False
    # `recalld status` says so, rather than showing the threshold as in use.
    assert tuning.status()["answerability"]["all"]["current"] is True
    status = old.status()
    assert status["answerability"]["all"]["current"] is False
    line = answerability_line(status, True)
    assert "all: threshold" in line and "learned for an earlier signal" in line


def test_status_line_says_what_each_scope_learned_and_whether_it_is_used():
    learned = {"k": 5, "threshold": 0.2, "queries": 300, "rejected": 0.31, "false_rejection": 0.02}
    tuning = {
        "answerability": {
            "all": {**learned, "skipped": None},
            "round": {**learned, "threshold": 0.0, "skipped": None},
        }
    }
    line = answerability_line(tuning, False)
    assert line.startswith("all: threshold 0.2 at k = 5 (31% of 300 unanswerable")
    assert "round: off" in line and line.endswith(
        "not in use (search.answerability_self_tune = false)"
    )
    assert answerability_line(tuning, None).endswith("separates its pseudo-questions)")
    assert answerability_line(None, True).startswith("not learned")
