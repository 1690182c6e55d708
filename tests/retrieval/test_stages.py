"""Each retrieval stage through the search path, on a real store with the test embedder."""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from recalld.api import AsyncMemory
from recalld.config import load_settings
from recalld.errors import QueryError
from tests.helpers.postgres import VECTOR_INDEX


@pytest.fixture(params=["sqlite", "postgresql"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """Settings for a store on each backend (the same stages must behave the same)."""
    env = {"RECALLD_HOME": str(tmp_path), "RECALLD_EMBED__MODEL": "hash:64"}
    if request.param == "postgresql":
        env["RECALLD_STORE__PATH"] = request.getfixturevalue("pg_url")
        env["RECALLD_STORE__VECTOR_INDEX"] = VECTOR_INDEX
    return env


@pytest.fixture
async def memory(env: dict[str, str]) -> AsyncIterator[AsyncMemory]:
    settings = load_settings(None, env).settings
    async with await AsyncMemory.open(settings) as opened:
        yield opened


async def test_importance_rerank_is_opt_in_and_explained(memory: AsyncMemory):
    await memory.remember("deploy checklist for the api service", importance=0.1)
    await memory.remember("deploy checklist for the api gateway", importance=1.0)
    plain = await memory.search("deploy checklist api service")
    assert plain.hits[0].chunk.text.endswith("service")
    assert "factors" not in plain.hits[0].explain
    boosted = await memory.search("deploy checklist api service", importance_weight=5.0)
    assert boosted.hits[0].chunk.text.endswith("gateway")
    assert set(boosted.hits[0].explain["factors"]) == {"semantic", "importance"}


async def test_dedup_drops_identical_content_from_other_sources(memory: AsyncMemory):
    await memory.add_text("The rota changes every Monday.", source="a", name="a.txt")
    await memory.add_text("The rota changes every Monday.", source="b", name="b.txt")
    await memory.add_text("The rota is kept in the ops channel.", source="c", name="c.txt")
    deduped = await memory.search("rota monday")
    assert [h.chunk.text for h in deduped.hits].count("The rota changes every Monday.") == 1
    kept = await memory.search("rota monday", dedup=False)
    assert [h.chunk.text for h in kept.hits].count("The rota changes every Monday.") == 2


async def test_candidates_read_by_status_only_are_read_whole_when_they_move_up(
    memory: AsyncMemory,
):
    # With the default stages a search reads whole only the chunks of its first `limit`
    # candidates and the others' status (`pipeline.load_for`): when dedup or the status
    # penalty moves one of those up, its chunk is read then.
    await memory.remember("the rota changes every monday")
    await memory.add_text("the rota changes every monday", source="copy", name="a.txt")
    await memory.remember("the rota changes every monday!")
    query = "rota changes every monday"
    every = await memory.search(query, limit=3, gate=False, dedup=False)
    first, second, third = (h.chunk for h in every.hits)
    assert first.text == second.text != third.text  # the copies tie, ahead of the third
    deduped = await memory.search(query, limit=2, gate=False)
    assert [(h.chunk.id, h.chunk.text) for h in deduped.hits] == [
        (first.id, first.text),
        (third.id, third.text),
    ]
    await memory.link(third.id, first.id, "supersedes")
    await memory.link(third.id, second.id, "supersedes")
    [hit] = (await memory.search(query, limit=1, gate=False)).hits
    assert (hit.chunk.id, hit.chunk.text, hit.chunk.source) == (third.id, third.text, third.source)
    assert hit.explain["position"] == 1 and "status_penalty" not in hit.explain


async def test_mmr_prefers_a_different_second_hit(memory: AsyncMemory):
    texts = ["alpha beta gamma delta", "alpha beta gamma delta epsilon", "alpha zeta eta theta"]
    for i, text in enumerate(texts):
        await memory.add_text(text, source=f"s{i}", name="t.txt")
    plain = await memory.search("alpha beta gamma", limit=2, gate=False)
    diverse = await memory.search("alpha beta gamma", limit=2, gate=False, mmr=True, mmr_lambda=0.3)
    assert [h.chunk.source for h in plain.hits] == ["s0", "s1"]
    assert [h.chunk.source for h in diverse.hits] == ["s0", "s2"]


async def test_fusions_and_weightings_all_run_and_explain_themselves(memory: AsyncMemory):
    await memory.add_text("Tom is allergic to peanuts.", source="t", name="t.txt")
    for fusion in ("score", "rrf"):
        for weighting in ("coverage", "idf", "fixed"):
            result = await memory.search("peanuts allergy", fusion=fusion, weighting=weighting)
            assert result.hits[0].chunk.source == "t"
            assert result.explain["fusion"] == fusion
            assert result.explain["weighting"] == weighting
            assert sum(result.explain["weights"].values()) == pytest.approx(1.0)


async def test_retrievals_and_accesses_are_counted_apart(env: dict[str, str]):
    settings = load_settings(None, env).settings
    async with await AsyncMemory.open(settings) as memory:
        await memory.remember("the wifi password rotates monthly")
        chunk_id = (await memory.search("wifi password")).hits[0].chunk.id
    # Closing waits for the counts, which are written in the background.
    async with await AsyncMemory.open(settings) as memory:
        chunk = await memory.get(chunk_id)
        assert chunk.retrieval_count == 1 and chunk.access_count == 0
    async with await AsyncMemory.open(settings) as memory:
        chunk = await memory.get(chunk_id)
        assert chunk.retrieval_count == 1 and chunk.access_count == 1


@pytest.mark.parametrize(
    "overrides", [{"mode": "psychic"}, {"fusion": "magic"}, {"nonsense": 1}, {"limit": 0}]
)
async def test_bad_requests_are_query_errors(memory: AsyncMemory, overrides):
    with pytest.raises(QueryError):
        await memory.search("anything", **overrides)


async def test_empty_query_is_a_query_error(memory: AsyncMemory):
    with pytest.raises(QueryError, match="empty"):
        await memory.search("   ")
