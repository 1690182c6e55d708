"""Export and import (issue 8, part 9): a store round-trips through JSONL with everything in it,
importing is idempotent and remaps ids into a non-empty store, vectors are reused or
re-embedded, and a malformed file imports nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from recalld import __version__
from recalld.api import AsyncMemory
from recalld.config import Settings, load_settings
from recalld.errors import NotFoundError, ParseError
from recalld.storage.importer import import_file
from recalld.storage.registry import export_lines

NOTES = """# Lighthouse maintenance

The lamp is cleaned every Tuesday with a soft cloth and alcohol.

## Fuel

Paraffin was replaced by an electric lamp in 1954; the spare bulbs are in the north cellar.
"""

CHAT = {
    "messages": [
        {"role": "user", "content": "I moved to Lisbon last spring, near the river."},
        {"role": "assistant", "content": "Lisbon is lovely. Do you still keep bees?"},
        {"role": "user", "content": "Yes, two hives on the roof of the flat."},
        {"role": "assistant", "content": "Rooftop hives do well in a warm city."},
    ]
}

MEMORIES = [
    ("Deploys happen on Thursdays after the standup", "procedural", ["ops", "deploy"], 0.9),
    ("Maria prefers tea over coffee", "preference", ["people"], 0.3),
]


def settings_for(home: Path, model: str = "hash:64") -> Settings:
    return load_settings(None, {"RECALLD_HOME": str(home), "RECALLD_EMBED__MODEL": model}).settings


def make_files(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "lighthouse.md").write_text(NOTES)
    (folder / "chat.json").write_text(json.dumps(CHAT))


async def fill(memory: AsyncMemory, folder: Path) -> None:
    make_files(folder)
    await memory.add_file(folder / "lighthouse.md")
    await memory.add_file(folder / "chat.json")
    for text, kind, tags, importance in MEMORIES:
        await memory.remember(
            text, memory_type=kind, tags=tags, importance=importance, event_time=1.7e9
        )

    async def link(conn: Any) -> None:
        rows = await conn.fetchall("SELECT id FROM chunks ORDER BY id")
        first, last = rows[0][0], rows[-1][0]
        await conn.execute(
            "INSERT INTO links (src, dst, relation, weight, created_at) VALUES (?, ?, ?, ?, ?)",
            (first, last, "related", 0.75, 1.6e9),
        )
        await conn.execute(
            "INSERT INTO links (src, dst, relation, weight, created_at) VALUES (?, ?, ?, ?, ?)",
            (last, first, "supersedes", 1.0, 1.6e9),
        )
        # Counters travel too.
        await conn.execute(
            "UPDATE chunks SET access_count = 3, retrieval_count = 5 WHERE id = ?", (first,)
        )

    await memory.store.write(link)


async def snapshot(memory: AsyncMemory) -> dict[str, Any]:
    """Everything that must survive, keyed by source and chunk key instead of ids."""

    async def read(conn: Any) -> dict[str, Any]:
        docs = {
            r[0]: tuple(r[1:])
            for r in await conn.fetchall(
                "SELECT source, kind, format, content_hash, state, chunk_count, mtime, size, "
                "created_at FROM documents"
            )
        }
        chunk_rows = await conn.fetchall(
            "SELECT c.id, d.source, c.key, c.position, c.kind, c.granularity, c.text, "
            "c.content_hash, c.token_count, c.tags, c.memory_type, c.importance, c.event_time, "
            "c.created_at, c.access_count, c.retrieval_count, c.status, c.meta, c.parent_id "
            "FROM chunks c JOIN documents d ON d.id = c.document_id"
        )
        name = {r[0]: (r[1], r[2]) for r in chunk_rows}
        chunks = {(r[1], r[2]): (*r[3:18], name.get(r[18])) for r in chunk_rows}
        links = sorted(
            (name[r[0]], name[r[1]], r[2], r[3], r[4])
            for r in await conn.fetchall("SELECT src, dst, relation, weight, created_at FROM links")
        )
        vectors = {
            name[r[0]]: bytes(r[1])
            for r in await conn.fetchall("SELECT chunk_id, embedding FROM chunks_vec")
        }
        fts = (await conn.fetchall("SELECT count(*) FROM chunks_fts"))[0][0]
        return {"documents": docs, "chunks": chunks, "links": links, "vectors": vectors, "fts": fts}

    return await memory.store.read(read)


def write_export(memory: AsyncMemory, path: Path, vectors: bool = False) -> list[dict[str, Any]]:
    lines = list(export_lines(memory.store.path, vectors=vectors, recalld_version=__version__))
    path.write_text("".join(line + "\n" for line in lines))
    return [json.loads(line) for line in lines]


async def top_hits(memory: AsyncMemory, query: str) -> list[tuple[str, str]]:
    result = await memory.search(query, limit=5)
    return [(h.chunk.source, h.chunk.text) for h in result.hits]


QUERIES = ["when is the lamp cleaned", "where did I move", "deploy day", "tea or coffee", "bees"]


@pytest.fixture
async def source(tmp_path: Path) -> Any:
    async with await AsyncMemory.open(settings_for(tmp_path / "a")) as memory:
        await fill(memory, tmp_path / "files")
        yield memory


async def test_round_trip_into_a_fresh_store(source: AsyncMemory, tmp_path: Path) -> None:
    lines = write_export(source, tmp_path / "x.jsonl")
    header, footer = lines[0], lines[-1]
    assert header["type"] == "header" and header["format"] == "recalld-export"
    assert header["model_id"] == "hash-64" and header["dimension"] == 64
    assert {"documents", "chunks", "links", "errors"} <= set(header["tables"])
    assert footer["type"] == "footer"
    assert footer["counts"]["links"] == (await source.counts())["links"] > 2  # 2 user + auto
    assert all("vector" not in line for line in lines)  # not without --vectors
    before = await snapshot(source)
    granularities = {chunk[2] for chunk in before["chunks"].values()}
    assert {"chunk", "session", "round", "memory"} <= granularities

    async with await AsyncMemory.open(settings_for(tmp_path / "b")) as target:
        report = await import_file(target.store, tmp_path / "x.jsonl", target.ingestor.embed)
        assert report["documents"]["imported"] == len(before["documents"]) == 4
        assert report["embedded"] == len(before["chunks"]) and report["vectors_reused"] == 0
        assert report["rows"]["links"] == len(before["links"])
        after = await snapshot(target)
        for key in ("documents", "chunks", "links", "fts"):
            assert after[key] == before[key], key
        # The same model embeds the same text to the same vector.
        assert after["vectors"] == before["vectors"]
        assert await target.counts() == await source.counts()
        for query in QUERIES:
            assert await top_hits(target, query) == await top_hits(source, query), query


async def test_vectors_travel_byte_identical(source: AsyncMemory, tmp_path: Path) -> None:
    lines = write_export(source, tmp_path / "x.jsonl", vectors=True)
    assert all("vector" in line for line in lines if line["type"] == "chunks")
    before = await snapshot(source)
    async with await AsyncMemory.open(settings_for(tmp_path / "b")) as target:

        async def no_embedding(texts: Any) -> Any:
            raise AssertionError(f"re-embedded {len(texts)} texts")

        report = await import_file(target.store, tmp_path / "x.jsonl", no_embedding)
        assert report["vectors_reused"] == len(before["chunks"]) and report["embedded"] == 0
        after = await snapshot(target)
        assert after["vectors"] == before["vectors"]
        assert after["chunks"] == before["chunks"]


async def test_another_model_re_embeds(source: AsyncMemory, tmp_path: Path) -> None:
    write_export(source, tmp_path / "x.jsonl", vectors=True)
    before = await snapshot(source)
    async with await AsyncMemory.open(settings_for(tmp_path / "b", "hash:32")) as target:
        report = await import_file(target.store, tmp_path / "x.jsonl", target.ingestor.embed)
        assert report["vectors_reused"] == 0 and report["embedded"] == len(before["chunks"])
        after = await snapshot(target)
        assert after["chunks"] == before["chunks"]
        assert {len(v) for v in after["vectors"].values()} == {32 * 4}
        hits = await top_hits(target, "when is the lamp cleaned")
        assert hits and "Tuesday" in hits[0][1]


async def test_import_twice_and_into_a_non_empty_store(source: AsyncMemory, tmp_path: Path) -> None:
    write_export(source, tmp_path / "x.jsonl")
    before = await snapshot(source)
    async with await AsyncMemory.open(settings_for(tmp_path / "b")) as target:
        # The target already holds its own things, so the file's ids collide with its ids.
        await target.remember("The boiler was serviced in October", tags=["home"])
        (tmp_path / "other.md").write_text("# Garden\n\nThe roses need pruning in February.\n")
        await target.add_file(tmp_path / "other.md")
        own = await snapshot(target)

        first = await import_file(target.store, tmp_path / "x.jsonl", target.ingestor.embed)
        once = await snapshot(target)
        second = await import_file(target.store, tmp_path / "x.jsonl", target.ingestor.embed)
        twice = await snapshot(target)
        assert first["documents"]["imported"] == 4
        assert second["documents"] == {"imported": 0, "unchanged": 4, "replaced": 0, "conflicts": 0}
        assert second["chunks"] == second["embedded"] == 0 and not second["rows"].get("links")
        assert twice == once
        # Both the target's own content and the file's are there, links point where they did.
        assert once["documents"] == {**own["documents"], **before["documents"]}
        assert once["chunks"] == {**own["chunks"], **before["chunks"]}
        assert once["links"] == before["links"]


async def test_conflicting_document_is_kept_unless_replace(
    source: AsyncMemory, tmp_path: Path
) -> None:
    write_export(source, tmp_path / "x.jsonl")
    md = str((tmp_path / "files" / "lighthouse.md").resolve())
    async with await AsyncMemory.open(settings_for(tmp_path / "b")) as target:
        await target.add_text("# Lighthouse\n\nA newer version of the notes.\n", source=md)
        kept = await import_file(target.store, tmp_path / "x.jsonl", target.ingestor.embed)
        assert kept["documents"]["conflicts"] == 1 and kept["conflicts"] == [md]
        # The links touching the kept document's chunks could not follow.
        assert sum(kept["skipped_rows"].values()) >= 1
        assert "newer version" in (await top_hits(target, "newer version notes"))[0][1]
        replaced = await import_file(
            target.store, tmp_path / "x.jsonl", target.ingestor.embed, replace=True
        )
        assert replaced["documents"]["replaced"] == 1
        assert await top_hits(target, "lamp cleaned Tuesday") == await top_hits(
            source, "lamp cleaned Tuesday"
        )


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda ls: ls.__setitem__(5, "{not json"), "line 6: not JSON"),
        (lambda ls: ls.__setitem__(3, ls[3].replace('"text"', '"texte"')), "line 4: columns"),
        (lambda ls: ls.pop(), "cut short"),
        (lambda ls: ls.pop(3), "chunks but"),
        (lambda ls: ls.insert(0, '{"type":"chunks","row":{}}'), "line 1: not a recalld export"),
    ],
)
async def test_malformed_file_imports_nothing(
    source: AsyncMemory, tmp_path: Path, mutate: Any, message: str
) -> None:
    write_export(source, tmp_path / "x.jsonl", vectors=True)
    lines = (tmp_path / "x.jsonl").read_text().splitlines()
    mutate(lines)
    (tmp_path / "bad.jsonl").write_text("\n".join(lines) + "\n")
    async with await AsyncMemory.open(settings_for(tmp_path / "b")) as target:
        with pytest.raises(ParseError, match=message) as caught:
            await import_file(target.store, tmp_path / "bad.jsonl", target.ingestor.embed)
        assert "bad.jsonl" in caught.value.message and caught.value.data["line"] >= 1
        assert (await target.counts())["documents"] == 0
        with pytest.raises(NotFoundError):
            await import_file(target.store, tmp_path / "missing.jsonl", target.ingestor.embed)


HISTORY = """CREATE TABLE memory_history (
    id INTEGER PRIMARY KEY,
    chunk_id INTEGER NOT NULL REFERENCES chunks(id) ON DELETE CASCADE,
    previous_text TEXT NOT NULL,
    changed_at REAL NOT NULL,
    payload BLOB
)"""


async def test_tables_added_later_travel_with_their_ids_remapped(
    source: AsyncMemory, tmp_path: Path
) -> None:
    """A table another version adds (here a memory history) is exported by its columns and its
    chunk references are remapped, without any change to export or import."""

    async def add_history(conn: Any) -> None:
        await conn.execute(HISTORY)
        rows = await conn.fetchall("SELECT id, text FROM chunks WHERE kind = 'memory' ORDER BY id")
        for chunk_id, text in rows:
            await conn.execute(
                "INSERT INTO memory_history (chunk_id, previous_text, changed_at, payload) "
                "VALUES (?, ?, ?, ?)",
                (chunk_id, f"earlier: {text}", 1.5e9, b"\x00\xffraw"),
            )

    await source.store.write(add_history)
    lines = write_export(source, tmp_path / "x.jsonl")
    assert lines[0]["tables"]["memory_history"][:2] == ["id", "chunk_id"]

    async def history(memory: AsyncMemory) -> list[tuple[Any, ...]]:
        rows = await memory.store.read(
            lambda c: c.fetchall(
                "SELECT c.text, h.previous_text, h.changed_at, h.payload FROM memory_history h "
                "JOIN chunks c ON c.id = h.chunk_id ORDER BY h.previous_text"
            )
        )
        return [tuple(r) for r in rows]

    async with await AsyncMemory.open(settings_for(tmp_path / "old")) as old:
        # A store without the table (an older recalld) refuses the file, naming the table.
        with pytest.raises(ParseError, match="line 1: table 'memory_history' does not exist"):
            await import_file(old.store, tmp_path / "x.jsonl", old.ingestor.embed)

    async with await AsyncMemory.open(settings_for(tmp_path / "b")) as target:
        await target.store.write(lambda c: c.execute(HISTORY))
        # Shift the ids: the target holds a memory of its own first.
        await target.remember("The bins go out on Monday night")
        report = await import_file(target.store, tmp_path / "x.jsonl", target.ingestor.embed)
        assert report["rows"]["memory_history"] == 2
        expected = await history(source)
        assert len(expected) == 2 and expected[0][3] == b"\x00\xffraw"
        assert await history(target) == expected
        again = await import_file(target.store, tmp_path / "x.jsonl", target.ingestor.embed)
        assert not again["rows"].get("memory_history")
        assert await history(target) == expected
