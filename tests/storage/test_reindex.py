"""The reindex staging table on real SQLite and PostgreSQL: staging, cascade on delete, the swap
(with SQLite's vector cascade tables), cancel, and what `check` / `repair` make of a reindex in
progress."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from recalld.embeddings.base import HashEmbedder
from recalld.errors import ReindexError
from recalld.storage import checks, records, registry, repair
from recalld.storage.contract import Store
from recalld.storage.registry import open_store, stored_model
from recalld.storage.sqlite import schema
from recalld.storage.sqlite.connection import connect
from recalld.types import ChunkDraft, Filters
from tests.storage.conftest import put

NEW = HashEmbedder(32)


async def chunk_rows(store: Store) -> list[tuple[int, str]]:
    return await store.read(lambda c: c.reindex_missing(0, 10_000))


async def stage_all(store: Store, rows: list[tuple[int, str]]) -> int:
    ids = [cid for cid, _ in rows]
    matrix = NEW.embed([t for _, t in rows])
    return await store.write(lambda c: c.stage_vectors(ids, matrix, NEW.model_id))


async def begin(store: Store) -> records.ReindexState:
    return await store.write(lambda c: c.begin_reindex("hash:32", NEW.model_id, 32))


async def test_stage_swap_and_the_cascade_tables(store: Store) -> None:
    await put(store, "/a.md", [f"alpha note {i}" for i in range(30)])
    state = await begin(store)
    rows = await chunk_rows(store)
    assert await stage_all(store, rows[:10]) == 10
    assert await store.read(lambda r: r.reindex_progress()) == (10, 30)
    # A replaced document's chunks leave the staging table with their rows (ON DELETE CASCADE).
    await put(store, "/a.md", [f"beta note {i}" for i in range(20)], digest="h2")
    assert (await store.read(lambda r: r.reindex_progress())) == (0, 20)
    with pytest.raises(RuntimeError, match="no vector"):
        await store.write(lambda c: c.swap_model(state))
    await stage_all(store, await chunk_rows(store))
    count = await store.write(lambda c: c.swap_model(state))
    assert count == 20
    store.end_switch(state.model_id, state.dimension)
    postgres = store.backend == "postgresql"
    assert store.model_version == 1 and store.dimension == 32
    if not postgres:
        assert store.vectors.dimension == 32
    meta = await store.read(lambda c: c.fetchall("SELECT key, value FROM meta"))
    assert {"model_id": "hash-32", "dimension": "32", "model_spec": "hash:32"}.items() <= dict(
        (str(k), str(v)) for k, v in meta
    ).items()
    assert await store.read(lambda r: r.reindex_state()) is None
    query = NEW.embed(["beta note 7"])[0]
    hits = await store.read(lambda c: c.knn(query, 3, Filters()))
    texts = await store.read(lambda c: c.chunks_by_id([hits[0][0]]))
    assert texts[hits[0][0]].text == "beta note 7" and hits[0][1] == pytest.approx(0, abs=1e-5)
    report = await asyncio.to_thread(registry.check_store, store.path)
    assert report["ok"], report
    if not postgres:  # a SQLite file's model is read without opening the store
        assert await asyncio.to_thread(stored_model, store.path) == ("hash:32", "hash-32", 32)
    # New chunks after the swap go in at the new dimension.
    doc = records.NewDocument("/b.md", "text", "markdown", "hb")
    chunk = records.NewChunk(ChunkDraft(text="gamma", key="k0"), 1, NEW.embed(["gamma"])[0])
    await store.write(lambda c: c.replace_document(doc, [chunk]))
    hits = await store.read(lambda c: c.knn(NEW.embed(["gamma"])[0], 1, Filters()))
    assert hits[0][1] == pytest.approx(0, abs=1e-5)


async def test_stage_refuses_after_cancel_and_cancel_empties(store: Store) -> None:
    await put(store, "/a.md", ["one", "two", "three"])
    await begin(store)
    rows = await chunk_rows(store)
    await stage_all(store, rows[:2])
    assert await store.write(lambda r: r.cancel_reindex()) == 2
    assert await store.read(lambda r: r.reindex_progress()) == (0, 3)
    with pytest.raises(ReindexError, match="cancelled or replaced"):
        await stage_all(store, rows)


async def test_check_reports_a_reindex_and_repair_drops_only_bad_rows(store: Store) -> None:
    await put(store, "/a.md", [f"note {i}" for i in range(12)])
    await begin(store)
    rows = await chunk_rows(store)
    await stage_all(store, rows[:6])
    report = await asyncio.to_thread(registry.check_store, store.path)
    assert report["ok"], report
    [entry] = [c for c in report["checks"] if c["name"] == "reindex"]
    assert "in progress to hash-32 (32 dims): 6/12 staged" in entry["detail"]
    # A vector of the wrong size (e.g. written by a bug or another model): flagged, repaired.
    # (PostgreSQL stages `halfvec` values, SQLite float32 blobs.)
    zeros = np.zeros(64, dtype=np.float32)
    bad = zeros if store.backend == "postgresql" else zeros.tobytes()
    await store.write(
        lambda c: c.execute(
            "UPDATE reindex_vectors SET embedding = ? WHERE chunk_id = ?", (bad, rows[0][0])
        )
    )
    report = await asyncio.to_thread(registry.check_store, store.path)
    assert checks.failed(report) == {"reindex"}
    done = await repair.check_and_repair(store, None, _never, _never)
    assert done["ok"], done
    assert await store.read(lambda r: r.reindex_progress()) == (5, 12)  # the sound rows stay
    # Staged rows with no reindex recorded: flagged and dropped.
    await store.write(
        lambda c: c.execute("DELETE FROM meta WHERE key IN (?, ?, ?, ?)", tuple(records.STATE_KEYS))
    )
    report = await asyncio.to_thread(registry.check_store, store.path)
    assert checks.failed(report) == {"reindex"}
    done = await repair.check_and_repair(store, None, _never, _never)
    assert done["ok"], done
    assert await store.read(lambda r: r.reindex_progress()) == (0, 12)


async def _never(_: object) -> None:
    raise AssertionError("nothing to re-ingest")


async def test_a_version_2_store_migrates_and_learns_its_spec(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = connect(path)
    schema.migrate(conn, schema.MIGRATIONS[:2])
    conn.execute("INSERT INTO meta VALUES ('model_id', 'hash-64'), ('dimension', '64')")
    schema.create_vector_table(conn, 64)
    conn.close()
    store = await open_store(path, model_id="hash-64", dimension=64, model_spec="hash:64")
    try:
        assert await asyncio.to_thread(stored_model, path) == ("hash:64", "hash-64", 64)
        await put(store, "/a.md", ["x"])
        report = await asyncio.to_thread(registry.check_store, path)
        assert report["ok"], report
    finally:
        await store.close()
    conn = connect(path)
    assert schema.schema_version(conn) == schema.SCHEMA_VERSION
    conn.close()
