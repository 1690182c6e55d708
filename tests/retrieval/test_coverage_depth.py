"""`search.coverage_depth`: the keyword signal reads the most of the query any of the best
keyword hits holds, not only the first (BM25 can rank a short chunk repeating one word first)."""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from recalld.api import AsyncMemory
from recalld.errors import QueryError
from tests.helpers.notes import memory_with_notes

REPEATS = "zebra zebra zebra zebra zebra zebra"
BOTH = "a quiet zebra walked past the quokka " + " ".join(
    f"then {w} went on along the river" for w in ("ann", "bo", "cy", "di", "ed", "flo", "gus")
)
FILLER = [f"note {i} about {w} and tea" for i, w in enumerate("abcdefghij")]
QUERY = "zebra quokka"


@pytest.fixture(params=["sqlite", "postgresql"])
async def memory(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AsyncMemory]:
    pg_url = request.getfixturevalue("pg_url") if request.param == "postgresql" else None
    async with memory_with_notes(tmp_path, [REPEATS, BOTH, *FILLER], pg_url) as opened:
        yield opened


async def test_coverage_reads_the_best_keyword_hits_when_deeper(memory: AsyncMemory):
    search = memory.searcher.search
    keyword = await search(QUERY, mode="bm25", gate=False)
    top_two = [h.chunk.text for h in keyword.hits[:2]]
    assert sorted(top_two) == sorted([REPEATS, BOTH])
    first = await search(QUERY)
    deeper = await search(QUERY, coverage_depth=2)
    # Either of the two best keyword hits holds every query word: the deeper signal sees it.
    assert deeper.explain["keyword_coverage"] == 1.0
    same = await search(QUERY, coverage_depth=1)
    assert same.explain["keyword_coverage"] == first.explain["keyword_coverage"]
    if top_two[0] == REPEATS:
        # SQLite's BM25 ranks the chunk repeating one word first (PostgreSQL's ranking does
        # not): the default signal reads only that one.
        assert 0 < first.explain["keyword_coverage"] < 1
        assert deeper.explain["weights"]["bm25"] > first.explain["weights"]["bm25"]
    else:
        assert first.explain["keyword_coverage"] == 1.0
    with pytest.raises(QueryError):
        await search(QUERY, coverage_depth=0)
