"""FTS5 and SQL syntax typed as a query (issue 6): over the socket, every one is searched for as
plain words and returns results, never an error; the store is untouched afterwards."""

from __future__ import annotations

import pytest

from tests.pipeline.conftest import Running

HOSTILE = [
    '"unbalanced quote',
    'zebra"quokka"',
    '""',
    "NEAR(zebra quokka)",
    "NEAR(zebra quokka, 2)",
    "zebra NEAR quokka",
    "zeb*",
    "*",
    "zebra*quokka",
    "text:zebra",
    "chunks_fts:zebra",
    ":",
    "{text}: zebra",
    "(zebra",
    "zebra)",
    ")(",
    "(zebra OR quokka) AND NOT lemur",
    "AND",
    "OR NOT",
    "zebra AND OR NOT quokka",
    "NOT zebra",
    "^zebra",
    "-zebra +quokka",
    "zebra - quokka",
    "'; DROP TABLE chunks; --",
    "zebra' OR '1'='1",
    "% _ \\ /",
    "zebra\x00quokka",
    "🦓 zebra",
    "rank:1",
    "zebra " * 200,
]


@pytest.mark.parametrize("mode", ["hybrid", "bm25", "vector"])
async def test_fts_syntax_as_a_query_is_just_words(daemon: Running, mode: str) -> None:
    async with daemon.client() as client:
        await client.remember("The zebra and the quokka share an enclosure near the lemur house.")
        await client.remember("Keywords AND, OR, NOT and NEAR are ordinary words in a note.")
        before = (await client.status())["counts"]
        for query in HOSTILE:
            result = await client.search(query, mode=mode, limit=5)
            assert isinstance(result["hits"], list), query
            words = {w.strip("\"'()*:^+-").lower() for w in query.split()}
            if mode == "bm25" and {"zebra", "quokka"} & words:
                assert result["hits"], f"{query!r} found nothing"
        assert (await client.status())["counts"] == before
        assert (await client.check())["ok"]
