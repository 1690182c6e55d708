"""Export and import between the backends: a store with files, conversations, memories, an
edited memory (history), user and auto links and use counters goes from SQLite to PostgreSQL,
from PostgreSQL to SQLite and from PostgreSQL to PostgreSQL, with everything in it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from recalld import __version__
from recalld.api import AsyncMemory
from recalld.config import load_settings
from recalld.storage import records
from recalld.storage.importer import import_file
from recalld.storage.registry import export_lines
from tests.helpers.postgres import VECTOR_INDEX, PgServer
from tests.transfer.test_roundtrip import MEMORIES, make_files

Opener = Callable[[str, Path], Any]


@pytest.fixture
def open_store(pg_server: PgServer) -> Any:
    """Opens an `AsyncMemory` on a new store of a backend (`sqlite` or `postgresql`)."""
    made: list[str] = []

    @asynccontextmanager
    async def opener(backend: str, home: Path) -> AsyncIterator[AsyncMemory]:
        env = {"RECALLD_HOME": str(home), "RECALLD_EMBED__MODEL": "hash:64"}
        if backend == "postgresql":
            made.append(pg_server.new_database())
            env["RECALLD_STORE__PATH"] = pg_server.url(made[-1])
            env["RECALLD_STORE__VECTOR_INDEX"] = VECTOR_INDEX
        async with await AsyncMemory.open(load_settings(None, env).settings) as memory:
            yield memory

    yield opener
    for name in made:
        pg_server.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


async def fill(memory: AsyncMemory, folder: Path) -> None:
    make_files(folder)
    await memory.add_file(folder / "lighthouse.md")
    await memory.add_file(folder / "chat.json")
    ids = []
    for text, kind, tags, importance in MEMORIES:
        report = await memory.remember(
            text, memory_type=kind, tags=tags, importance=importance, event_time=1.7e9
        )
        doc_id = report.document_id
        assert doc_id is not None
        # (Not found by a search: searches count their hits in the background.)
        [chunk] = await memory.store.read(lambda c, d=doc_id: c.neighbours(d, 0, 0))
        ids.append(chunk.id)
    await memory.ingestor.update_memory(ids[1], records.MemoryEdit(text="Maria prefers green tea"))
    await memory.link(ids[0], ids[1], "related", 0.75)
    await memory.store.write(lambda c: c.count_use([ids[0]], retrieval=True))


async def snapshot(memory: AsyncMemory) -> dict[str, Any]:
    """Everything that must survive, keyed by source and chunk key instead of ids, read with
    SQL both backends run (`Reader.fetchall` takes `?` on both)."""

    async def read(conn: Any) -> dict[str, Any]:
        docs = {
            r[0]: tuple(r[1:])
            for r in await conn.fetchall(
                "SELECT source, kind, format, content_hash, state, chunk_count, mtime, size, "
                "created_at FROM documents",
            )
        }
        rows = await conn.fetchall(
            "SELECT c.id, d.source, c.key, c.position, c.kind, c.granularity, c.text, "
            "c.content_hash, c.token_count, c.tags, c.memory_type, c.importance, c.event_time, "
            "c.created_at, c.access_count, c.retrieval_count, c.status, c.meta, c.parent_id "
            "FROM chunks c JOIN documents d ON d.id = c.document_id",
        )
        name = {int(r[0]): (r[1], r[2]) for r in rows}
        chunks = {(r[1], r[2]): (*r[3:18], name.get(r[18])) for r in rows}
        links = sorted(
            (name[int(r[0])], name[int(r[1])], r[2], r[3], r[4], r[5])
            for r in await conn.fetchall(
                "SELECT src, dst, relation, weight, origin, created_at FROM links"
            )
        )
        old = sorted(
            (name[int(r[0])], *r[1:])
            for r in await conn.fetchall(
                "SELECT chunk_id, version, text, tags, importance, valid_from, replaced_at "
                "FROM chunk_history",
            )
        )
        ids = list(name)
        vectors = await conn.vectors_by_id(ids, 64)
        return {
            "documents": docs,
            "chunks": chunks,
            "links": links,
            "history": old,
            "vectors": {name[i]: v for i, v in vectors.items()},
        }

    return await memory.store.read(read)


@pytest.mark.parametrize(
    ("source_backend", "target_backend"),
    [("sqlite", "postgresql"), ("postgresql", "sqlite"), ("postgresql", "postgresql")],
)
@pytest.mark.parametrize("vectors", [False, True])
async def test_a_store_moves_between_backends(
    open_store: Any, tmp_path: Path, source_backend: str, target_backend: str, vectors: bool
) -> None:
    dump = tmp_path / "x.jsonl"
    async with open_store(source_backend, tmp_path / "a") as source:
        await fill(source, tmp_path / "files")
        before = await snapshot(source)
        lines = list(export_lines(source.store.path, vectors=vectors, recalld_version=__version__))
        dump.write_text("".join(line + "\n" for line in lines))
        expected = (await source.search("lamp cleaned Tuesday", limit=1)).hits[0].chunk.text
    header = json.loads(lines[0])
    assert {"documents", "chunks", "links", "errors", "chunk_history"} <= set(header["tables"])
    # Only the memories' own columns travel: no row scope, writer or generated tsvector.
    assert not {"scope", "tsv", "written_by", "host"} & set(header["tables"]["chunks"])
    assert not {"scope", "written_by", "os_user", "host"} & set(header["tables"]["documents"])
    assert len(before["history"]) == 1 and before["links"] and before["documents"]

    async with open_store(target_backend, tmp_path / "b") as target:
        report = await import_file(target.store, dump, target.ingestor.embed)
        assert report["documents"]["imported"] == len(before["documents"]) == 4
        assert report["vectors_reused"] == (len(before["chunks"]) if vectors else 0)
        after = await snapshot(target)
        for key in ("documents", "chunks", "links", "history"):
            assert after[key] == before[key], key
        # Vectors: the same model's, within half precision (PostgreSQL stores `halfvec`).
        assert after["vectors"].keys() == before["vectors"].keys()
        for key, vector in before["vectors"].items():
            np.testing.assert_allclose(after["vectors"][key], vector, atol=2e-3)
        again = await import_file(target.store, dump, target.ingestor.embed)
        assert again["documents"]["unchanged"] == 4 and again["chunks"] == 0
        assert not again["rows"].get("links") and not again["rows"].get("chunk_history")
        final = await snapshot(target)
        for key in ("documents", "chunks", "links", "history"):
            assert final[key] == after[key], key
        # (Searched last: a search counts its hits.)
        found = await target.search("lamp cleaned Tuesday", limit=1)
        assert found.hits[0].chunk.text == expected


def test_cli_offline_export_and_import_on_postgresql_urls(
    isolated_home: Path, pg_server: PgServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from recalld.api import Memory
    from tests.transfer.test_socket_and_cli import run_cli

    names = [pg_server.new_database(), pg_server.new_database()]
    urls = [pg_server.url(n) for n in names]
    try:
        settings = load_settings(
            None,
            {"RECALLD_HOME": str(isolated_home)},
            {"embed.model": "hash:64", "store.path": urls[0], "store.vector_index": VECTOR_INDEX},
        ).settings
        with Memory(settings) as memory:
            memory.remember("Offline on PostgreSQL: the ladder is in the shed", tags=["tools"])
        common = ["--set", "embed.model=hash:64", "--set", f"store.vector_index={VECTOR_INDEX}"]
        path = tmp_path / "x.jsonl"
        code, _, err = run_cli(
            ["export", str(path), "--offline", "--vectors", "--set", f"store.path={urls[0]}"],
            capsys,
        )
        assert code == 0, err
        assert '"vector":' in path.read_text() and "postgresql" in path.read_text()
        code, out, err = run_cli(
            ["import", str(path), "--offline", "--json", "--set", f"store.path={urls[1]}", *common],
            capsys,
        )
        assert code == 0, err
        report = json.loads(out)
        assert report["documents"]["imported"] == 1 and report["vectors_reused"] == 1
        other = load_settings(
            None,
            {"RECALLD_HOME": str(isolated_home)},
            {"embed.model": "hash:64", "store.path": urls[1], "store.vector_index": VECTOR_INDEX},
        ).settings
        with Memory(other) as memory:
            hits = memory.search("ladder shed").hits
            assert hits and hits[0].chunk.tags == ("tools",)
    finally:
        for name in names:
            pg_server.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
