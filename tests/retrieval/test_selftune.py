"""Self-tuning: a store chooses its fusion per content kind from its own content, no labels."""

import json
import random
from pathlib import Path

import pytest

from recalld.api import AsyncMemory
from recalld.config import load_settings
from recalld.retrieval import selftune
from tests.helpers.records import stored_chunk

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
    # The winner has the best mean reciprocal rank; a tie would have kept the prior.
    assert choice.scores[choice.family] == max(choice.scores.values())
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


def test_choice_keeps_the_prior_on_a_tie_and_staleness_follows_growth():
    scores = {"score/coverage": [1.0, 0.5], "rrf/idf": [0.5, 1.0], "score/idf": [0.0, 0.5]}
    assert selftune.choose(scores, "score/coverage") == "score/coverage"
    assert selftune.choose({**scores, "score/idf": [1.0, 1.0]}, "score/coverage") == "score/idf"
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
