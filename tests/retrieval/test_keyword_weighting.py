"""The label-free keyword weightings beside coverage (issue 14): `weighting = "agreement"`
(how far each route's best candidates are ranked high by the other), `"coverage-agreement"`
(the mean of that and the coverage curve) and `search.keyword_weight_floor`."""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from recalld.api import AsyncMemory
from recalld.errors import QueryError
from recalld.retrieval import fusion
from tests.helpers.notes import memory_with_notes

TEXTS = [
    "the zebra crossed the river at dawn",
    "a quokka smiled at the zebra keeper",
    "notes on river crossings and ferries",
    *[f"note {i} about {w} and tea" for i, w in enumerate("abcdefgh")],
]
QUERY = "zebra river quokka"


@pytest.fixture(params=["sqlite", "postgresql"])
async def memory(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AsyncMemory]:
    pg_url = request.getfixturevalue("pg_url") if request.param == "postgresql" else None
    async with memory_with_notes(tmp_path, TEXTS, pg_url) as opened:
        yield opened


async def test_agreement_weights_are_the_routes_endorsement(memory: AsyncMemory):
    search = memory.searcher.search
    agreed = await search(QUERY, limit=50, weighting="agreement", agreement_depth=3)
    assert agreed.explain["weighting"] == "agreement"
    share = agreed.explain["keyword_signal"]
    assert 0.0 <= share <= 1.0
    assert agreed.explain["weights"]["bm25"] == pytest.approx(share, abs=1e-4)
    assert agreed.explain["weights"]["vector"] == pytest.approx(1 - share, abs=1e-4)
    # The share is the one `route_agreement` gives for the two routes' completed scores.
    similarity, keyword = {}, {}
    for hit in agreed.hits:
        routes = hit.explain["routes"]
        similarity[hit.chunk.id] = routes["vector"]["similarity"]
        keyword[hit.chunk.id] = routes.get("bm25", {}).get("score", 0.0)
    assert len(agreed.hits) == len(TEXTS)  # every chunk is a candidate: the sums are whole
    assert fusion.route_agreement(similarity, keyword, 3) == pytest.approx(share, abs=1e-3)
    # The same store and query give the same weights again.
    again = await search(QUERY, weighting="agreement", agreement_depth=3)
    assert again.explain["weights"] == agreed.explain["weights"]


async def test_coverage_agreement_is_the_mean_of_both(memory: AsyncMemory):
    search = memory.searcher.search
    by_coverage = (await search(QUERY)).explain["weights"]["bm25"]
    agreement = (await search(QUERY, weighting="agreement")).explain["keyword_signal"]
    mixed = await search(QUERY, weighting="coverage-agreement")
    assert mixed.explain["weights"]["bm25"] == pytest.approx(
        (by_coverage + agreement) / 2, abs=1e-3
    )


async def test_keyword_weight_floor(memory: AsyncMemory):
    search = memory.searcher.search
    default = await search(QUERY)
    assert (
        default.explain["weights"]
        == (await search(QUERY, keyword_weight_floor=0.0)).explain["weights"]
    )
    floored = await search(QUERY, keyword_weight_floor=0.999)
    assert floored.explain["weights"] == {"vector": 0.001, "bm25": 0.999}
    for bad in ({"keyword_weight_floor": 1.5}, {"agreement_depth": 0}):
        with pytest.raises(QueryError):
            await search(QUERY, **bad)
