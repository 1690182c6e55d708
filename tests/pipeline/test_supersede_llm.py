"""The LLM knowledge-update detector inside the ingest path, against a real local HTTP server,
and the fall-back to the rule when the endpoint fails."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from recalld.api import AsyncMemory
from recalld.config import load_settings
from recalld.embeddings.base import HashEmbedder
from recalld.ingest import autolink
from tests.helpers.fake_openai import FakeOpenAI, Reply


def settings_for(home: Path, base_url: str):
    overrides = {
        "embed.model": "hash:64",
        "facts.base_url": base_url,
        "facts.model": "judge",
        "facts.max_retries": "0",
        "links.supersede_similarity": "0",
    }
    return load_settings(None, {"RECALLD_HOME": str(home)}, overrides).settings


async def supersedes_of(memory: AsyncMemory, chunk_id: int) -> list[int]:
    found = await memory.store.read(lambda c: c.links_of(chunk_id, "supersedes", "out"))
    return [x["dst"] for x in found]


async def test_llm_verdicts_make_supersedes_links(tmp_path: Path) -> None:
    with FakeOpenAI() as server:
        verdict = {"results": [{"pair": 1, "supersedes": True}]}
        server.script("chat/completions", Reply(content=json.dumps(verdict)))
        settings = settings_for(tmp_path, server.base_url)
        async with await AsyncMemory.open(settings, embedder=HashEmbedder(64)) as memory:
            first = await memory.remember("Ana is on the red team", event_time=1.0)
            # The rule cannot read "switched teams"; the model says it replaces the old fact.
            second = await memory.remember("Ana switched to the blue team", event_time=2.0)
            ids = [await _chunk_id(memory, r.document_id) for r in (first, second)]
            assert await supersedes_of(memory, ids[1]) == [ids[0]]
            old = await memory.get(ids[0])
            assert old.status == "superseded"
        [request] = server.requests_to("chat/completions")
        assert request.body["model"] == "judge"
        pairs = json.loads(request.body["messages"][-1]["content"])["pairs"]
        assert pairs == [
            {"pair": 1, "older": "Ana is on the red team", "newer": "Ana switched to the blue team"}
        ]


async def test_endpoint_failure_falls_back_to_the_rule(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with FakeOpenAI() as server:
        server.script("chat/completions", Reply(status=400))
        settings = settings_for(tmp_path, server.base_url)
        async with await AsyncMemory.open(settings, embedder=HashEmbedder(64)) as memory:
            first = await memory.remember("Ana lives in Porto", event_time=1.0)
            second = await memory.remember("Ana moved to Lisbon", event_time=2.0)
            ids = [await _chunk_id(memory, r.document_id) for r in (first, second)]
            assert await supersedes_of(memory, ids[1]) == [ids[0]]
    assert any(
        r.levelno == logging.WARNING and "using the rule" in r.getMessage() for r in caplog.records
    )


async def _chunk_id(memory: AsyncMemory, document_id: int | None) -> int:
    assert document_id is not None

    [chunk] = await memory.store.read(lambda c: c.neighbours(document_id, 0, 0))
    return chunk.id


async def test_unfiltered_knn_fallback_still_finds_links(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(autolink, "EXACT_BELOW", -1)  # a large store: one KNN per chunk
    overrides = {"embed.model": "hash:64", "links.similar_threshold": "0.8"}
    settings = load_settings(None, {"RECALLD_HOME": str(tmp_path)}, overrides).settings
    async with await AsyncMemory.open(settings, embedder=HashEmbedder(64)) as memory:
        await memory.add_text("# Notes\n\nThe otter sleeps in the reeds.", source="n.md")
        first = await memory.remember("The otter sleeps in the reeds by the river")
        # As after a failed filtered KNN: the wider unfiltered search, filtered here.
        memory.ingestor.linker._unfiltered = True
        second = await memory.remember("The otter sleeps in the reeds by the river!")
        ids = [await _chunk_id(memory, r.document_id) for r in (first, second)]
        found = await memory.store.read(lambda c: c.links_of(ids[1], "similar", "out"))
        # Only the memory: the document chunk is as similar but of another granularity.
        assert [x["dst"] for x in found] == [ids[0]]


async def test_large_store_knn_path_finds_the_same_links(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = ["The heron fishes at dawn on the lake", "The heron fishes at dawn on the lake!"]
    found = []
    for below in (20_000, -1):  # the matrix product, then one KNN per new chunk
        monkeypatch.setattr(autolink, "EXACT_BELOW", below)
        overrides = {"embed.model": "hash:64", "links.similar_threshold": "0.8"}
        home = tmp_path / str(below)
        settings = load_settings(None, {"RECALLD_HOME": str(home)}, overrides).settings
        async with await AsyncMemory.open(settings, embedder=HashEmbedder(64)) as memory:
            reports = [await memory.remember(t) for t in texts]
            ids = [await _chunk_id(memory, r.document_id) for r in reports]
            newest = ids[1]
            out = await memory.store.read(lambda c, n=newest: c.links_of(n, "similar", "out"))
            found.append([(x["dst"] == ids[0], x["weight"]) for x in out])
    assert found[0] == found[1] and found[0][0][0] is True
