"""Covered turns (`search.drop_covered`): a conversation hit leaves when finer hits above it
(its round's facts, a session's rounds) already point to all of its turns."""

import json
from pathlib import Path

import pytest

from recalld.api import AsyncMemory
from recalld.retrieval import covered
from recalld.types import Hit
from tests.helpers.conversations import ana_and_ben, ana_and_ben_sessions, memory_with

QUERY = "Ben's cello teacher is very strict"
# A second log with the same turn ids (D1:1 ... D1:4) and other words.
OTHER = [
    {"speaker": "Ana", "text": "My violin teacher is strict about scales."},
    {"speaker": "Ben", "text": "Mine lets me play whatever I like on the cello."},
    {"speaker": "Ana", "text": "We should play a duet with the beagle howling along."},
    {"speaker": "Ben", "text": "Only if the teacher never hears it."},
]
FINER = {"fact": 0, "round": 1, "window": 1, "session": 2}


@pytest.fixture(params=["sqlite", "postgresql"])
async def memory(request: pytest.FixtureRequest, tmp_path: Path):
    """Two logs with the same turn ids (D1:1 ... D1:4): one's facts say nothing of the other's."""
    pg_url = request.getfixturevalue("pg_url") if request.param == "postgresql" else None
    async with memory_with(tmp_path, ana_and_ben("conv-a"), "locomo:a", pg_url) as opened:
        other = json.dumps(ana_and_ben_sessions("conv-b", OTHER)).encode()
        await opened.ingestor.ingest_bytes("locomo:b", "locomo.json", other)
        yield opened


def _covered_by_finer_above(hits: list[Hit]) -> list[int]:
    """The hits whose turns (of their own log) finer hits above them all hold."""
    out = []
    for i, hit in enumerate(hits):
        turns = {(hit.chunk.document_id, t) for t in hit.chunk.meta.get("turn_ids") or []}
        above = {
            (h.chunk.document_id, t)
            for h in hits[:i]
            if FINER[h.chunk.granularity] < FINER[hit.chunk.granularity]
            for t in h.chunk.meta.get("turn_ids") or []
        }
        if turns and turns <= above:
            out.append(hit.chunk.id)
    return out


async def test_a_hit_whose_turns_finer_hits_above_hold_leaves(memory: AsyncMemory):
    plain = await memory.searcher.search(QUERY, gate=False, limit=50, drop_covered=False)
    repeated = _covered_by_finer_above(plain.hits)
    assert repeated, "a round ranks below one of its own facts"
    assert "covered" not in plain.explain

    dropped = await memory.searcher.search(QUERY, gate=False, limit=50)  # on by default
    assert _covered_by_finer_above(dropped.hits) == []
    # Nothing else changes: the other hits keep their order and scores.
    others = [h for h in plain.hits if h.chunk.id not in repeated]
    assert [h.chunk.id for h in dropped.hits] == [h.chunk.id for h in others]
    assert [h.score for h in dropped.hits] == pytest.approx([h.score for h in others])
    assert dropped.explain["covered"] == len(repeated)


async def test_only_finer_hits_of_the_same_log_cover(memory: AsyncMemory):
    found = await memory.searcher.search(QUERY, gate=False, limit=50, drop_covered=False)
    chunks = {h.chunk.id: h.chunk for h in found.hits}
    by = {(c.document_id, c.granularity): [] for c in chunks.values()}
    for c in chunks.values():
        by[(c.document_id, c.granularity)].append(c.id)
    a, b = sorted({c.document_id for c in chunks.values()})
    parents = {chunks[f].parent_id for f in by[(a, "fact")]}
    round_a = next(r for r in by[(a, "round")] if r in parents)
    facts_a = [f for f in by[(a, "fact")] if chunks[f].parent_id == round_a]
    session_a = by[(a, "session")][0]
    turns_a = chunks[round_a].meta["turn_ids"]
    round_b = next(r for r in by[(b, "round")] if chunks[r].meta["turn_ids"] == turns_a)

    # A round below its own fact leaves; the same turn ids in another log do not cover.
    kept, dropped = covered.drop_covered([facts_a[0], round_b, round_a], chunks)
    assert kept == [facts_a[0], round_b] and dropped == {round_a}
    # A coarser hit above covers nothing: the session may not fit a reader's budget.
    assert covered.drop_covered([session_a, round_a, facts_a[0]], chunks)[1] == set()
    # Hits of one granularity never drop each other (two facts of a round, two pieces).
    assert covered.drop_covered([*facts_a, *facts_a[:1]], chunks)[0] == [*facts_a, *facts_a[:1]]
    # A session leaves only when finer hits above hold every one of its turns.
    rounds_a = by[(a, "round")]
    whole = {t for r in rounds_a for t in chunks[r].meta["turn_ids"]}
    assert whole == set(chunks[session_a].meta["turn_ids"])
    assert covered.drop_covered([*rounds_a, session_a], chunks)[1] == {session_a}
    assert covered.drop_covered([*rounds_a[1:], session_a], chunks)[1] == set()


async def test_a_limited_search_still_returns_limit_hits(memory: AsyncMemory):
    every = await memory.searcher.search(QUERY, gate=False, limit=50, drop_covered=True)
    for limit in (1, 3, 5):
        found = await memory.searcher.search(QUERY, gate=False, limit=limit, drop_covered=True)
        assert [h.chunk.id for h in found.hits] == [h.chunk.id for h in every.hits[:limit]]
        # With MMR every candidate is looked at first; still none is covered.
        diverse = await memory.searcher.search(
            QUERY, gate=False, limit=limit, drop_covered=True, mmr=True
        )
        assert len(diverse.hits) == limit and _covered_by_finer_above(diverse.hits) == []
