"""Self-tuning: a store chooses its fusion per content kind from its own content, no labels."""

import json
import random
from pathlib import Path

import pytest

from recalld.api import AsyncMemory
from recalld.config import load_settings
from recalld.retrieval import selftune
from tests.helpers.conversations import ana_and_ben_sessions, memory_with
from tests.helpers.records import stored_chunk
from tests.retrieval.corpus import PASSAGES

TOPICS = {
    "volcano": "lava magma eruption crater ash basalt caldera vent plume tephra",
    "orchestra": "violin cello conductor symphony rehearsal brass oboe score tempo timpani",
    "bakery": "sourdough flour yeast oven crust proofing dough rye starter knead",
    "satellite": "orbit thruster antenna payload launch telemetry apogee solar panel",
    "glacier": "ice moraine crevasse meltwater snowpack calving firn fjord cirque till",
    "cycling": "saddle derailleur cadence peloton sprint chain gears climb helmet crank",
    "chess": "gambit bishop rook endgame checkmate pawn opening castling knight tempo",
    "coffee": "espresso roast arabica grinder crema barista brew beans aroma filter",
}
FILLER = "the of and a in to is was for on with as by at from that this it".split()


def make_documents() -> dict[str, str]:
    """Forty titled documents of three paragraphs, each paragraph its own chunk."""
    rng = random.Random(7)
    docs = {}
    for n in range(40):
        topic = list(TOPICS)[n % len(TOPICS)]
        words = TOPICS[topic].split()
        paragraphs = []
        for _ in range(3):
            sentences = []
            for _ in range(8):
                picked = rng.sample(words, 4) + rng.sample(FILLER, 5) + [f"item{rng.randrange(60)}"]
                rng.shuffle(picked)
                sentences.append(" ".join(picked).capitalize() + ".")
            paragraphs.append(" ".join(sentences))
        title = f"Notes on {topic} number {n} and {rng.choice(words)} {rng.choice(words)}"
        docs[f"doc{n}"] = title + "\n\n" + "\n\n".join(paragraphs)
    return docs


@pytest.fixture
async def memory(tmp_path: Path):
    env = {
        "RECALLD_HOME": str(tmp_path),
        "RECALLD_EMBED__MODEL": "hash:64",
        "RECALLD_CHUNK__MAX_TOKENS": "160",
    }
    settings = load_settings(None, env).settings
    async with await AsyncMemory.open(settings) as opened:
        for name, text in make_documents().items():
            await opened.add_text(text, source=name, name=f"{name}.md")
        yield opened


async def test_calibration_is_deterministic_recorded_and_used(memory: AsyncMemory, tmp_path: Path):
    counts = await memory.counts()
    assert counts["chunks"] >= selftune.MIN_CHUNKS
    first = await selftune.calibrate(memory.store, memory.embedder, memory.settings.search)
    again = await selftune.calibrate(memory.store, memory.embedder, memory.settings.search)
    assert first.kinds and set(first.kinds) == {"text"}
    choice = first.kinds["text"]
    assert choice.queries >= selftune.MIN_QUERIES
    assert set(choice.scores) == set(selftune.FAMILIES)
    assert choice.family in selftune.FAMILIES and choice.prior == "score/coverage+complete"
    # The winner has the best mean reciprocal rank, or is the prior (a tie, or a best family
    # whose gain was not significant).
    assert choice.family == choice.prior or choice.scores[choice.family] == max(
        choice.scores.values()
    )
    assert {k: v.as_dict() for k, v in again.kinds.items()} == {
        k: v.as_dict() for k, v in first.kinds.items()
    }
    assert first.dominant == "text" and first.chunks == counts["chunks"]

    # Recorded in the store, read back by the next process that opens it.
    tuning = await memory.calibrate()
    raw = await memory.store.read(lambda c: c.meta_value(selftune.META_KEY))
    assert json.loads(raw)["kinds"]["text"]["family"] == tuning.kinds["text"].family
    async with await AsyncMemory.open(memory.settings, embedder=memory.embedder) as reopened:
        assert reopened.searcher.tuning is not None
        assert reopened.searcher.tuning.kinds["text"].family == tuning.kinds["text"].family
    # Off by default; on, the chosen family's settings are searched with and explained.
    plain = await memory.search("lava crater eruption")
    assert plain.explain["calibration"] is None
    tuned = await memory.search("lava crater eruption", self_tune=True)
    family = selftune.FAMILIES[tuning.kinds["text"].family]
    assert tuned.explain["fusion"] == family["fusion"]
    assert tuned.explain["weighting"] == family["weighting"]
    assert tuned.explain["calibration"] == {
        "calibrated": True,
        "kind": "text",
        "family": tuning.kinds["text"].family,
        "chosen": True,
    }
    # A call that sets its own fusion keeps it.
    own = await memory.search("lava crater eruption", self_tune=True, fusion="rrf")
    assert own.explain["fusion"] == "rrf" and own.explain["calibration"]["chosen"] is False


def test_choice_keeps_the_prior_on_a_tie_or_a_gain_within_noise():
    scores = {"score/coverage": [1.0, 0.5], "rrf/idf": [0.5, 1.0], "score/idf": [0.0, 0.5]}
    assert selftune.choose(scores, "score/coverage") == "score/coverage"
    # Better on both pseudo-queries: two are too few to call it more than luck.
    assert selftune.choose({**scores, "score/idf": [1.0, 1.0]}, "score/coverage") == (
        "score/coverage"
    )
    # Better on 30 of 40, level on the rest: significant, so it replaces the prior; of two
    # level winners the first in FAMILIES is chosen.
    prior, better = [0.5] * 40, [1.0] * 30 + [0.5] * 10
    many = {"score/coverage": prior, "rrf/idf": better, "score/idf": better}
    assert selftune.paired_p(better, prior) < selftune.SWITCH_P
    assert selftune.choose(many, "score/coverage") == "score/idf"
    # Better on 3 of 40 only: within noise, the prior stays.
    few = [1.0] * 3 + [0.5] * 37
    assert selftune.paired_p(few, prior) >= selftune.SWITCH_P
    assert selftune.choose({**many, "rrf/idf": few, "score/idf": few}, "score/coverage") == (
        "score/coverage"
    )
    assert selftune.paired_p(prior, prior) == 1.0


def test_staleness_follows_growth():
    tuning = selftune.StoreTuning(kinds={}, dominant="text", chunks=1000, at=0.0, seconds=0.0)
    assert not selftune.is_stale(tuning, 1100)
    assert selftune.is_stale(tuning, 1300) and selftune.is_stale(tuning, 700)
    assert selftune.is_stale(None, selftune.MIN_CHUNKS) and not selftune.is_stale(None, 10)


def test_conversation_pseudo_queries_target_the_reply_not_the_question():
    from recalld.types import Chunk

    def chunk(cid: int, granularity: str, text: str, turns: list[str], position: int) -> Chunk:
        return stored_chunk(
            id=cid,
            document_id=1,
            source="c",
            kind="conversation",
            granularity=granularity,
            position=position,
            text=text,
            meta={"turn_ids": turns},
            key=f"k{cid}",
            token_count=0,
            status="current",
        )

    chunks = [
        chunk(1, "session", "s", ["t1", "t2", "t3", "t4"], 0),
        chunk(
            2,
            "round",
            "[d]\nAna: I adopted a dog.\nBen: What did you name the dog?",
            ["t1", "t2"],
            1,
        ),
        chunk(
            3, "round", "[d]\nAna: Biscuit, after my favourite snack.\nBen: Cute.", ["t3", "t4"], 2
        ),
    ]
    [query] = selftune.conversation_queries(chunks, [chunks[1]], random.Random(0))
    assert query.text == "What did you name the dog?"
    assert query.targets == {3} and query.excluded == {1, 2}


def question_and_answer_rounds(rounds: int) -> dict[str, object]:
    """One session whose every round ends with Ben's question, which Ana's next turn (the
    first of the next round) answers."""
    turns = []
    for n in range(rounds):
        turns += [
            {"speaker": "Ana", "text": f"My answer number {n} is about the garden shed."},
            {"speaker": "Ben", "text": f"What happened to the shed after week {n + 1}?"},
        ]
    return ana_and_ben_sessions("conv-draw", turns)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_conversation_pseudo_queries_come_from_every_round_of_a_sampled_conversation(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str
):
    pg_url = request.getfixturevalue("pg_url") if backend == "postgresql" else None
    sample = question_and_answer_rounds(30)
    async with memory_with(tmp_path, sample, "locomo:draw", pg_url) as memory:
        ids = (await memory.store.read(lambda r: r.chunk_ids_by_kind()))["conversation"]
        rounds = await memory.store.read(
            lambda r: r.fetchall("SELECT id FROM chunks WHERE granularity = 'round'")
        )
        assert len(rounds) == 30
        # Rounds are a few of a conversation's chunks; one sampled chunk of it is enough
        # for a pseudo-query from each round whose question the next round answers.
        for sampled in (ids, ids[:1], ids[-1:]):
            drawn = await selftune.pseudo_queries(
                memory.store, "conversation", sampled, 200, random.Random(0)
            )
            assert len(drawn) == 29
            assert {q.text for q in drawn} == {
                f"What happened to the shed after week {n + 1}?" for n in range(29)
            }


async def test_the_held_out_chunk_is_not_among_the_candidates(memory: AsyncMemory):
    # It holds the pseudo-query's words verbatim: left in, its coverage of 1 and both routes
    # ranking it first would set every coverage and agreement weight.
    ids = (await memory.store.read(lambda r: r.chunk_ids_by_kind()))["text"]
    drawn = await selftune.pseudo_queries(memory.store, "text", ids, 30, random.Random(3))
    vectors = memory.embedder.embed([q.text for q in drawn])
    total = len(ids)
    for query, vector in zip(drawn, vectors, strict=True):
        found = await selftune._candidates(memory.store, query, vector, 20, total)
        seen = (
            set(found.similarity)
            | set(found.keyword)
            | set(found.completed.similarity)
            | set(found.completed.keyword)
            | set(found.orders[0])
            | set(found.orders[1])
        )
        assert seen and not seen & query.excluded
        assert len(found.orders[0]) == 20  # the pool is still full without it


async def test_the_paraphrase_corpus_keeps_the_defaults(tmp_path: Path):
    # Its notes are one chunk each: a held-out sentence has no other chunk of its document
    # to find, so no pseudo-query can be drawn, and 16 chunks are too few anyway.
    env = {"RECALLD_HOME": str(tmp_path), "RECALLD_EMBED__MODEL": "hash:64"}
    async with await AsyncMemory.open(load_settings(None, env).settings) as memory:
        for key, text in PASSAGES.items():
            await memory.add_text(text, source=f"note:{key}", name=f"{key}.txt")
        ids = (await memory.store.read(lambda r: r.chunk_ids_by_kind()))["text"]
        assert len(ids) == len(PASSAGES) < selftune.MIN_CHUNKS
        drawn = await selftune.pseudo_queries(memory.store, "text", ids, 200, random.Random(0))
        assert drawn == []
        tuning = await memory.calibrate()
        assert tuning.kinds == {} and "text" in tuning.skipped
        searched = await memory.search("How often do we ship a new version?", self_tune=True)
        assert searched.explain["calibration"]["chosen"] is False
