"""Online re-embedding through the Python API (in process): swap, concurrent search and ingest,
cancel, refusal of a second target, and the model the next open follows; on SQLite and on
PostgreSQL."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest

from recalld.api import AsyncMemory, calibrate
from recalld.config import load_settings
from recalld.embeddings.base import HashEmbedder
from recalld.errors import ModelMismatchError, ReindexError
from recalld.storage import registry
from tests.helpers.postgres import VECTOR_INDEX


def text(i: int) -> str:
    """Twelve pseudo-words drawn per note, so every note is distinct under any hash model."""
    rng = random.Random(i)
    return " ".join(f"t{rng.randrange(3000)}" for _ in range(12))


def similarity(model: int, query: str, doc: str) -> float:
    q, d = HashEmbedder(model).embed([query, doc])
    return round(float(q @ d), 4)


def settings(home: Path, model: str | None, store_env: dict[str, str]):
    env = {"RECALLD_HOME": str(home), **store_env}
    if model is not None:
        env["RECALLD_EMBED__MODEL"] = model
    return load_settings(None, env, {}).settings


async def fill(memory: AsyncMemory, n: int) -> None:
    for i in range(n):
        await memory.remember(text(i))


async def test_swap_with_searches_and_ingest_running(
    tmp_path: Path, store_env: dict[str, str]
) -> None:
    memory = await AsyncMemory.open(settings(tmp_path, "hash:64", store_env))
    try:
        await fill(memory, 150)
        query = " ".join(text(7).split()[:7])
        old, new = similarity(64, query, text(7)), similarity(32, query, text(7))
        assert old != new
        before = await memory.search(query, mode="vector", limit=3)
        assert before.explain["best_similarity"] == old
        assert memory.embedder.model_id == "hash-64"
        memory.reindexer.batch = 16  # many short batches, so searches interleave
        await memory.reindexer.start("hash:32")
        errors: list[BaseException] = []
        seen: list[float] = []

        async def searching() -> None:
            while memory.reindexer.running:
                try:
                    found = await memory.search(query, mode="vector", limit=3)
                    seen.append(found.explain["best_similarity"])
                except Exception as exc:  # counted, not raised: the test asserts none
                    errors.append(exc)
                await asyncio.sleep(0)

        async def ingesting() -> None:
            for i in range(150, 190):
                await memory.remember(text(i))

        await asyncio.gather(searching(), ingesting(), memory.reindexer.wait(_ignore))
        assert errors == []
        # Old-model answers, then new-model ones, nothing else and no going back.
        assert seen and seen[0] == old and set(seen) <= {old, new}
        assert seen == sorted(seen, key=lambda v: v == new)
        assert memory.embedder.model_id == "hash-32"
        assert memory.store.dimension == 32
        after = await memory.search(query, mode="vector", limit=3)
        assert after.explain["best_similarity"] == new
        assert after.hits[0].chunk.text == before.hits[0].chunk.text == text(7)
        # New chunks after the switch get the new model's vectors.
        await memory.remember("a fresh note about zulu")
        report = await asyncio.to_thread(registry.check_store, memory.store.path)
        assert report["ok"], report
        assert report["counts"]["vectors"] == report["counts"]["chunks"] == 191
    finally:
        await memory.close()
    # The config does not name a model: the store's recorded one wins.
    reopened = await AsyncMemory.open(settings(tmp_path, None, store_env), follow_store=True)
    try:
        assert reopened.embedder.model_id == "hash-32"
    finally:
        await reopened.close()
    # The config names the old model explicitly: refused, with what to do.
    with pytest.raises(ModelMismatchError, match=r"embed\.model = 'hash:32'"):
        await AsyncMemory.open(settings(tmp_path, "hash:64", store_env))


async def _ignore(info: dict) -> None:
    pass


async def test_cancel_and_a_second_target_is_refused(
    tmp_path: Path, store_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The new model's first batch waits until the test is done with the running reindex:
    # otherwise 40 chunks can all be re-embedded and swapped in before the cancel comes.
    released = threading.Event()
    embed = HashEmbedder.embed

    def held_back(self: HashEmbedder, texts: Sequence[str]) -> Any:
        if self.dimension == 32:
            released.wait(timeout=60)
        return embed(self, texts)

    monkeypatch.setattr(HashEmbedder, "embed", held_back)
    memory = await AsyncMemory.open(settings(tmp_path, "hash:64", store_env))
    try:
        await fill(memory, 40)
        memory.reindexer.batch = 8
        await memory.reindexer.start("hash:32")
        with pytest.raises(ReindexError, match="under way"):
            await memory.reindexer.start("hash:16")
        same = await memory.reindexer.start("hash:32")  # the same target: a no-op resume
        assert same["model"] == "hash-32"
        status = memory.reindexer.status()
        assert status is not None
        assert {"spec", "model", "dimension", "done", "total", "rate", "started_at"} <= set(status)
        report = await asyncio.to_thread(registry.check_store, memory.store.path)
        assert report["ok"], report
        cancelled = await memory.reindexer.cancel()
        assert cancelled["cancelled"]
        assert memory.reindexer.status() is None
        assert memory.embedder.model_id == "hash-64"
        report = await asyncio.to_thread(registry.check_store, memory.store.path)
        assert report["ok"], report
        with pytest.raises(ReindexError, match="nothing to cancel"):
            await memory.reindexer.cancel()
        with pytest.raises(ReindexError, match="already uses"):
            await memory.reindexer.start("hash:64")
    finally:
        released.set()
        await memory.close()


async def test_auto_links_of_vectors_from_a_model_switched_out_are_left_to_the_retry(
    tmp_path: Path, store_env: dict[str, str]
) -> None:
    """Vectors embedded just before a swap meet stored vectors of the new model: the linker
    must not compare the two (the ingest's write then embeds again with the new model)."""
    from recalld.types import ChunkDraft

    memory = await AsyncMemory.open(settings(tmp_path, "hash:64", store_env))
    try:
        await fill(memory, 3)
        draft = ChunkDraft(text=text(99), kind="memory", granularity="memory", key="memory")
        stale = HashEmbedder(32).embed([draft.text])[0]
        assert await memory.ingestor.linker.links_for([draft], [stale], None) == [()]
        # The same vector of the store's own model does find its near-duplicate.
        current = HashEmbedder(64).embed([text(0)])[0]
        [links] = await memory.ingestor.linker.links_for([draft], [current], None)
        assert [relation for relation, _, _ in links] == ["similar"]
    finally:
        await memory.close()


async def test_a_query_embedded_while_the_model_switches_is_not_cached_for_the_new_one(
    tmp_path: Path,
) -> None:
    memory = await AsyncMemory.open(settings(tmp_path, "hash:64", {}))
    try:
        searcher, new = memory.searcher, HashEmbedder(32)
        embedding = asyncio.create_task(searcher.embed_query("lynx habitat"))
        await asyncio.sleep(0)  # the old model embeds the query in a worker thread
        searcher.use_model(new, await calibrate(new))  # as the reindex's switch does
        assert len(await embedding) == 64
        assert len(await searcher.embed_query("lynx habitat")) == 32
    finally:
        await memory.close()


async def test_a_search_waits_for_a_swap_held_up_on_the_vector_table_lock(
    tmp_path: Path, pg_url: str
) -> None:
    """PostgreSQL: the swap locks `chunks_vec` until COMMIT. Held up there (here by another
    session reading the table, as a `pg_dump` would), a search must wait for the new model, not
    queue on the lock until its query time limit stops it."""
    env = {
        "RECALLD_STORE__PATH": pg_url,
        "RECALLD_STORE__VECTOR_INDEX": VECTOR_INDEX,
        "RECALLD_STORE__QUERY_TIMEOUT_MS": "500",
    }
    memory = await AsyncMemory.open(settings(tmp_path, "hash:64", env))
    try:
        await fill(memory, 20)
        query = " ".join(text(7).split()[:7])
        async with await psycopg.AsyncConnection.connect(pg_url) as reader:
            await reader.execute("LOCK TABLE chunks_vec IN ACCESS SHARE MODE")
            await memory.reindexer.start("hash:32")
            for _ in range(3000):  # until the job reaches its swap (30 s at most)
                if (memory.reindexer.status() or {}).get("state") == "switching":
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.5)  # the swap reaches the lock
            search = asyncio.create_task(memory.search(query, mode="vector", limit=3))
            await asyncio.sleep(1.5)  # three times the query time limit
            await reader.rollback()
        found = await search
        assert memory.embedder.model_id == "hash-32"
        assert found.hits[0].chunk.text == text(7)
    finally:
        await memory.close()
