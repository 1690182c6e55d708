"""`check` and `check --repair` on real SQLite files broken with raw SQL (issue 6): every
invariant is detected, every one is restored, and a user's memory survives."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from recalld.api import AsyncMemory
from recalld.cli import main
from recalld.config import Settings, load_settings
from recalld.embeddings.base import HashEmbedder
from recalld.ingest.pipeline import MEMORY_PREFIX, content_hash
from recalld.storage.checks import failed
from recalld.storage.registry import check_store
from recalld.storage.sqlite.connection import connect
from tests.pipeline.conftest import Running, daemon_env, start, stop

EMBEDDER = HashEmbedder(64)
MEMORY = "The spare key to the lighthouse is under the blue stone."


def settings_for(home: Path) -> Settings:
    return load_settings(
        None, {"RECALLD_HOME": str(home), "RECALLD_EMBED__MODEL": "hash:64"}
    ).settings


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    folder = tmp_path / "notes"
    folder.mkdir()
    for name, body in {
        "tides.md": "# Tides\n\nSpring tides follow the full moon.\n\nNeap tides are weaker.\n",
        "boats.md": "# Boats\n\nThe ketch has two masts.\n\nThe sloop has one mast.\n",
        "birds.md": "# Birds\n\nPuffins nest in burrows on the cliff.\n",
    }.items():
        (folder / name).write_text(body)
    return folder


async def fill(memory: AsyncMemory, notes: Path) -> None:
    for name in ("birds.md", "boats.md", "tides.md"):
        await memory.add_file(notes / name)
    await memory.add_text("Harbour fees rise in April.", source="notes:harbour")
    await memory.remember(MEMORY, tags=["keys"])


def rows(path: Path, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
    conn = connect(path)
    try:
        return [tuple(r) for r in conn.execute(sql, params).fetchall()]
    finally:
        conn.close()


def break_store(path: Path, notes: Path) -> None:
    """Break every invariant `check` knows, the way crashes, bugs or hand edits would."""
    conn = connect(path)
    try:
        conn.execute("PRAGMA foreign_keys=OFF")  # as a hand edit or an old bug would have it
        conn.execute("BEGIN")
        tides = conn.execute(
            "SELECT c.id, c.text FROM chunks c JOIN documents d ON d.id = c.document_id "
            "WHERE d.source = ? ORDER BY c.position",
            (str(notes / "tides.md"),),
        ).fetchall()
        # A chunk loses its vector (in chunks_vec and in the cascade's copies).
        for table in ("chunks_vec", "vector_codes", "vector_floats"):
            conn.execute(f"DELETE FROM {table} WHERE chunk_id = ?", (tides[0][0],))
        # Another loses its full-text row; a third is indexed under the wrong words.
        conn.execute(
            "INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', ?, ?)",
            (tides[-1][0], tides[-1][1]),
        )
        boats = conn.execute(
            "SELECT c.id, c.text FROM chunks c JOIN documents d ON d.id = c.document_id "
            "WHERE d.source = ? ORDER BY c.position LIMIT 1",
            (str(notes / "boats.md"),),
        ).fetchone()
        conn.execute(
            "INSERT INTO chunks_fts(chunks_fts, rowid, text) VALUES ('delete', ?, ?)",
            (boats[0], boats[1]),
        )
        conn.execute(
            "INSERT INTO chunks_fts(rowid, text) VALUES (?, 'zeppelin walrus')", (boats[0],)
        )
        conn.execute("INSERT INTO chunks_fts(rowid, text) VALUES (88888, 'ghost narwhal')")
        # An orphan vector and an orphan chunk (whose document never existed).
        conn.execute(
            "INSERT INTO chunks_vec (chunk_id, embedding, kind, granularity) "
            "VALUES (99999, ?, 'document', 'chunk')",
            (EMBEDDER.embed(["orphan"])[0].tobytes(),),
        )
        conn.execute(
            "INSERT INTO chunks (document_id, position, kind, granularity, key, text, "
            "content_hash, token_count, created_at) VALUES (777, 0, 'document', 'chunk', 'k', "
            "'an orphan about quasars', 'h', 4, 0)"
        )
        # The memory loses its document row: the memory itself must survive the repair.
        conn.execute("DELETE FROM documents WHERE kind = 'memory'")
        # Wrong counts, and half-written documents (a file, and a text with no file).
        conn.execute(
            "UPDATE documents SET chunk_count = chunk_count + 5 WHERE source = ?",
            (str(notes / "birds.md"),),
        )
        conn.execute(
            "UPDATE documents SET state = 'partial' WHERE source IN (?, 'notes:harbour')",
            (str(notes / "boats.md"),),
        )
        conn.execute("COMMIT")
    finally:
        conn.close()


EXPECTED_FAILURES = {
    "chunks_without_vector",
    "orphan_vectors",
    "chunks_without_fts",
    "orphan_fts_rows",
    "orphan_chunks",
    "chunk_count_mismatch",
    "partial_documents",
    "vector_parity",
    "vector_index",
    "fts_integrity",
}


def assert_repaired(path: Path, notes: Path, report: dict[str, Any]) -> None:
    assert report["ok"], [c for c in report["checks"] if not c["ok"]]
    repair = report["repair"]
    assert set(repair["before"]["failed"]) == EXPECTED_FAILURES
    actions = {a["name"]: a["count"] for a in repair["actions"]}
    assert actions["orphan_vectors_deleted"] == 1
    assert actions["orphan_chunks_deleted"] == 1
    assert actions["orphan_memories_restored"] == 1
    assert actions["vectors_reembedded"] == 1
    assert actions["chunk_counts_fixed"] >= 1
    assert actions["partial_completed"] == 1  # the text source, in place
    assert actions["partial_to_reingest"] == 1  # the file, from disk
    assert "fts_rebuilt" in actions and "vector_index_rebuilt" in actions
    assert repair["reingest"] == [str(notes / "boats.md")] and not repair["unrepaired"]
    # The memory is back under the source `remember` gives it, with its tags.
    [(source, state, count)] = rows(
        path, "SELECT source, state, chunk_count FROM documents WHERE kind = 'memory'"
    )
    assert source == MEMORY_PREFIX + content_hash(MEMORY.encode())[:16]
    assert state == "complete" and count == 1
    [(text, tags)] = rows(path, "SELECT text, tags FROM chunks WHERE kind = 'memory'")
    assert text == MEMORY and json.loads(tags) == ["keys"]
    # The re-embedded vector is the model's own.
    [(chunk_id, chunk_text)] = rows(
        path,
        "SELECT c.id, c.text FROM chunks c JOIN documents d ON d.id = c.document_id "
        "WHERE d.source = ? ORDER BY c.position LIMIT 1",
        (str(notes / "tides.md"),),
    )
    [(blob,)] = rows(path, "SELECT embedding FROM chunks_vec WHERE chunk_id = ?", (chunk_id,))
    stored = np.frombuffer(blob, dtype=np.float32)
    assert np.allclose(stored, EMBEDDER.embed([chunk_text])[0], atol=1e-6)
    assert not rows(path, "SELECT 1 FROM chunks WHERE text LIKE '%quasars%'")


async def assert_searchable(memory: AsyncMemory, notes: Path) -> None:
    for query, source in (
        ("lighthouse spare key", None),
        ("spring tides full moon", str(notes / "tides.md")),
        ("neap tides weaker", str(notes / "tides.md")),
        ("ketch masts", str(notes / "boats.md")),
        ("puffins burrows", str(notes / "birds.md")),
        ("harbour fees", "notes:harbour"),
    ):
        hits = (await memory.search(query, mode="bm25")).hits
        assert hits, query
        if source is not None:
            assert hits[0].chunk.source == source, query
        else:
            assert hits[0].chunk.text == MEMORY
    for stale in ("zeppelin walrus", "ghost narwhal", "quasars"):
        assert not (await memory.search(stale, mode="bm25")).hits, stale


@pytest.fixture
def broken_store(isolated_home: Path, notes: Path) -> Iterator[Path]:
    """A store with documents, a text and a memory, then broken everywhere."""
    settings = settings_for(isolated_home)

    async def build() -> None:
        async with await AsyncMemory.open(settings) as memory:
            await fill(memory, notes)

    asyncio.run(build())
    assert check_store(settings.store_path)["ok"]
    break_store(settings.store_path, notes)
    yield settings.store_path


def test_check_finds_every_broken_invariant(broken_store: Path) -> None:
    report = check_store(broken_store)
    assert not report["ok"]
    assert failed(report) == EXPECTED_FAILURES
    values = {c["name"]: c["value"] for c in report["checks"]}
    assert values["chunks_without_vector"] == 2 and values["orphan_vectors"] == 1  # + the stray
    assert values["orphan_chunks"] == 2  # the stray chunk and the memory's
    assert values["partial_documents"] == 2
    # One full-text row missing and one extra: counts alone would not notice.
    assert values["chunks_without_fts"] == 1 and values["orphan_fts_rows"] == 1
    assert values["fts_parity"] == 0
    # A check changes nothing.
    assert failed(check_store(broken_store)) == EXPECTED_FAILURES


def test_offline_repair_restores_everything_and_keeps_the_memory(
    broken_store: Path, notes: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["check", "--offline", "--repair", "--json", "--set", "embed.model=hash:64"])
    out, err = capsys.readouterr()
    assert exited.value.code == 0, err
    report = json.loads(out)
    assert_repaired(broken_store, notes, report)
    assert check_store(broken_store)["ok"]

    async def search() -> None:
        async with await AsyncMemory.open(settings_for(broken_store.parent.parent)) as memory:
            await assert_searchable(memory, notes)

    asyncio.run(search())
    # Nothing left to do: a second repair changes nothing.
    with pytest.raises(SystemExit) as exited:
        main(["check", "--offline", "--repair", "--json", "--set", "embed.model=hash:64"])
    again = json.loads(capsys.readouterr().out)
    assert exited.value.code == 0 and again["repair"]["actions"] == []


def test_offline_check_reports_failure_with_exit_1(
    broken_store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["check", "--offline"])
    out, _ = capsys.readouterr()
    assert exited.value.code == 1
    assert "PROBLEMS FOUND" in out and "fts_integrity" in out


async def test_repair_over_the_socket(isolated_home: Path, short_dir: Path, notes: Path) -> None:
    env = daemon_env(isolated_home, short_dir / "s.sock")
    server, task = await start(env)
    running = Running(server, task, short_dir / "s.sock", isolated_home, env)
    try:
        assert server.memory is not None
        await fill(server.memory, notes)
        break_store(server.memory.store.path, notes)
        async with running.client() as client:
            assert not (await client.check())["ok"]
            report = await client.check(repair=True)
            assert_repaired(server.memory.store.path, notes, report)
            assert (await client.check())["ok"]
        await assert_searchable(server.memory, notes)
    finally:
        assert await stop(server, task) == 0


async def test_offline_repair_is_refused_while_the_daemon_runs(
    daemon: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    def run() -> int:
        with pytest.raises(SystemExit) as exited:
            main(["check", "--offline", "--repair"])
        return int(exited.value.code or 0)

    assert await asyncio.to_thread(run) == 1
    assert "already running" in capsys.readouterr().err


async def test_startup_reingests_partial_files_and_keeps_partial_memories(
    isolated_home: Path, short_dir: Path, notes: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = settings_for(isolated_home)
    async with await AsyncMemory.open(settings) as memory:
        await fill(memory, notes)
    conn = connect(settings.store_path)
    try:
        conn.execute(
            "UPDATE documents SET state = 'partial' WHERE source = ? OR kind = 'memory'",
            (str(notes / "birds.md"),),
        )
    finally:
        conn.close()
    env = daemon_env(isolated_home, short_dir / "s.sock")
    with caplog.at_level(logging.INFO, logger="recalld"):
        server, task = await start(env)
    running = Running(server, task, short_dir / "s.sock", isolated_home, env)
    try:
        assert server.scheduler is not None
        await server.scheduler.wait_idle()
        states = dict(rows(settings.store_path, "SELECT kind, state FROM documents"))
        birds = rows(
            settings.store_path,
            "SELECT state FROM documents WHERE source = ?",
            (str(notes / "birds.md"),),
        )
        assert birds == [("complete",)]  # the file was read again
        assert states["memory"] == "partial"  # kept: no file to read it from
        assert f"re-ingesting partial document {notes / 'birds.md'}" in caplog.text
        async with running.client() as client:
            report = await client.check(repair=True)
            assert report["ok"]
            actions = {a["name"]: a["count"] for a in report["repair"]["actions"]}
            assert actions == {"partial_completed": 1}
            hits = (await client.search("lighthouse key", mode="bm25"))["hits"]
            assert hits[0]["text"] == MEMORY
    finally:
        assert await stop(server, task) == 0


def test_model_mismatch_is_found_and_left_alone(
    isolated_home: Path, notes: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = settings_for(isolated_home)

    async def build() -> None:
        async with await AsyncMemory.open(settings) as memory:
            await fill(memory, notes)

    asyncio.run(build())
    vectors_before = rows(settings.store_path, "SELECT count(*) FROM chunks_vec")
    conn = connect(settings.store_path)
    try:
        conn.execute("UPDATE meta SET value = '32' WHERE key = 'dimension'")
    finally:
        conn.close()
    report = check_store(settings.store_path)
    assert failed(report) == {"model"}
    [model] = [c for c in report["checks"] if c["name"] == "model"]
    assert "32 dims" in model["detail"] and "64-dim" in model["detail"]
    # Repair re-embeds nothing behind the user's back: it refuses, saying what is wrong.
    with pytest.raises(SystemExit) as exited:
        main(["check", "--offline", "--repair", "--set", "embed.model=hash:64"])
    assert exited.value.code == 1
    assert "embedded with hash-64 (32 dims)" in capsys.readouterr().err
    assert rows(settings.store_path, "SELECT count(*) FROM chunks_vec") == vectors_before


def test_a_store_killed_during_its_first_start_checks_clean(tmp_path: Path) -> None:
    """A first start can die before the schema exists, or before the model's vector table
    does; neither is damage, and the next start finishes the job."""
    from recalld.storage.sqlite import schema

    path = tmp_path / "new.db"
    connect(path).close()  # the file, nothing in it
    report = check_store(path)
    assert report["ok"] and [c["name"] for c in report["checks"]] == ["schema"]
    conn = connect(path)
    try:
        schema.migrate(conn)  # tables, but no model stamped and no vector table
    finally:
        conn.close()
    report = check_store(path)
    assert report["ok"], report
    assert report["counts"] == {"documents": 0, "chunks": 0, "vectors": 0, "fts_rows": 0}
