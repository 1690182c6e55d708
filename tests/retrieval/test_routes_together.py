"""A hybrid search asks SQLite for both routes in one read (`Store.routes_together`): the
results are the ones the routes give apart, beside the embedding."""

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from recalld.api import AsyncMemory
from recalld.config import load_settings
from recalld.storage.sqlite import vectors
from recalld.storage.sqlite.store import SqliteStore
from recalld.types import Filters, SearchResult
from tests.retrieval.corpus import OFF_TOPIC, PASSAGES, QUESTIONS

SETTINGS: list[dict[str, Any]] = [
    {},
    {"complete_scores": False},
    {"mode": "vector"},  # the keyword route still runs, for the gate
    {"mode": "vector", "gate": False},
    {"mode": "bm25"},
    {"fusion": "rrf", "candidates": 5},
]


@pytest.fixture
async def memory(tmp_path: Path) -> AsyncIterator[AsyncMemory]:
    env = {"RECALLD_HOME": str(tmp_path), "RECALLD_EMBED__MODEL": "hash:64"}
    async with await AsyncMemory.open(load_settings(None, env).settings) as opened:
        for name, text in PASSAGES.items():
            await opened.add_text(text, source=f"notes/{name}", name="n.txt")
        assert await opened.searcher.store.keywords.load() is not None  # type: ignore[attr-defined]
        yield opened


def seen(result: SearchResult) -> tuple[Any, ...]:
    """Everything a result says but how long each step took."""
    explain = {k: v for k, v in result.explain.items() if k != "timings_ms"}
    hits = [(h.chunk.id, h.score, h.explain) for h in result.hits]
    return hits, explain, sorted(result.explain["timings_ms"]), result.tier, result.rejected


@pytest.mark.parametrize("overrides", SETTINGS)
async def test_both_routes_in_one_read_give_the_results_of_the_routes_apart(
    memory: AsyncMemory, overrides: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert memory.searcher.store.routes_together
    queries = [
        (q, f) for q in [*QUESTIONS, *OFF_TOPIC] for f in (Filters(), Filters(sources=("notes/",)))
    ]
    together = [await memory.searcher.search(q, filters=f, **overrides) for q, f in queries]
    monkeypatch.setattr(SqliteStore, "routes_together", False)
    apart = [await memory.searcher.search(q, filters=f, **overrides) for q, f in queries]
    assert [seen(r) for r in together] == [seen(r) for r in apart]
    assert any(r.hits for r in together)


async def test_a_store_whose_hamming_stage_splits_runs_the_routes_apart(
    memory: AsyncMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    await memory.searcher.search("backups")  # loads the vector index
    monkeypatch.setattr(vectors, "_SPLIT_ABOVE", 1)  # as a 200k store's: two threads
    assert not memory.searcher.store.routes_together
