"""Overlapping `Ingestor.ingest_many` calls on real stores (SQLite and PostgreSQL) with the hash
embedder: the same store as calls made one after another, documents in call order, one
transaction per call that a failing document does not take down, and auto links that still
see the documents before them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from recalld.config import ChunkSettings, LinkSettings
from recalld.embeddings.base import HashEmbedder
from recalld.ingest.overlap import InFlight, WriteOrder
from recalld.ingest.pipeline import Ingestor, IngestReport
from recalld.storage.contract import Reader, Store
from recalld.storage.registry import open_store
from tests.helpers.postgres import VECTOR_INDEX, PgServer

EMBEDDER = HashEmbedder(64)
Item = tuple[str, str, bytes, float | None, int | None]


@pytest.fixture(params=["sqlite", "postgresql"])
def locations(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path | str, ...]]:
    """Two fresh stores' places on one backend."""
    if request.param == "sqlite":
        yield tmp_path / "t.db", tmp_path / "alone.db"
        return
    server: PgServer = request.getfixturevalue("pg_server")
    names = [server.new_database(), server.new_database()]
    yield tuple(server.url(name) for name in names)
    for name in names:
        server.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def location(locations: tuple[Path | str, ...]) -> Path | str:
    return locations[0]


async def _open(location: Path | str) -> Store:
    return await open_store(
        location, model_id=EMBEDDER.model_id, dimension=64, vector_index=VECTOR_INDEX
    )


@pytest.fixture
async def store(location: Path | str) -> AsyncIterator[Store]:
    opened = await _open(location)
    yield opened
    await opened.close()


def _items(calls: int, per_call: int) -> list[list[Item]]:
    return [
        [
            (
                f"/notes/{c:02d}-{f}.md",
                f"{c:02d}-{f}.md",
                f"# Note {c} {f}\n\nOtters {c} hold hands {f} while sleeping.\n\n"
                f"## More\n\nRiver {c * f} notes.\n".encode(),
                1_700_000_000.0,
                None,
            )
            for f in range(per_call)
        ]
        for c in range(calls)
    ]


async def _content(store: Store) -> list[tuple[int, str, list[tuple[str, str, bytes]]]]:
    """Each document's id and source, and its chunks' keys, texts and vector bytes."""

    async def read(r: Reader) -> list[tuple[int, str, list[tuple[str, str, bytes]]]]:
        docs = sorted(await r.documents("/notes/"), key=lambda d: d.id)
        ids = await r.chunk_ids([d.id for d in docs])
        chunks = await r.chunks_by_id(list(ids.values()))
        vectors = await r.vectors_by_id(list(ids.values()), 64)
        return [
            (
                d.id,
                d.source,
                sorted(
                    (key, chunks[cid].text, vectors[cid].tobytes())
                    for (doc_id, key), cid in ids.items()
                    if doc_id == d.id
                ),
            )
            for d in docs
        ]

    return await store.read(read)


async def test_overlapping_calls_store_what_one_after_another_stores(
    store: Store, locations: tuple[Path | str, ...]
) -> None:
    calls = _items(7, 3)
    overlapped = Ingestor(store, EMBEDDER, ChunkSettings(), batch_size=4)
    order = WriteOrder()
    got: list[list[IngestReport]] = []
    async with InFlight[list[IngestReport]](depth=3) as flight:
        for items in calls:
            got += await flight.add(overlapped.ingest_many(items, place=order.place()))
        got += await flight.drain()
    assert [r.source for reports in got for r in reports] == [i[0] for c in calls for i in c]
    assert all(r.status == "ingested" and r.embedded == r.chunks > 0 for c in got for r in c)

    alone = await _open(locations[1])
    try:
        one_by_one = Ingestor(alone, EMBEDDER, ChunkSettings(), batch_size=4)
        for items in calls:
            await one_by_one.ingest_many(items)
        expected = await _content(alone)
    finally:
        await alone.close()
    content = await _content(store)
    # Document ids follow the order of the calls, as when they ran one after another.
    assert [(i, s) for i, s, _ in content] == [(i, s) for i, s, _ in expected]
    assert content == expected

    # Idempotent: the same files again change nothing.
    again = await overlapped.ingest_many(calls[0])
    assert {r.status for r in again} == {"unchanged"}
    assert await _content(store) == content


async def test_a_document_that_cannot_be_written_takes_no_other_with_it(tmp_path: Path) -> None:
    store = await _open(tmp_path / "t.db")
    try:
        # A document the store refuses (as a full disk or a damaged page would), by SQLite.
        await store.write(
            lambda c: c.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON documents WHEN NEW.source LIKE '%bad%' "
                "BEGIN SELECT RAISE(ABORT, 'refused'); END"
            )
        )
        ingestor = Ingestor(store, EMBEDDER, ChunkSettings())
        [items] = _items(1, 4)
        items[1] = ("/notes/bad.md", "bad.md", b"A bad note about otters.\n", None, None)
        with pytest.raises(Exception, match="refused"):
            await ingestor.ingest_many(items)
        stored = [s for _, s, _ in await _content(store)]
        assert stored == [items[0][0], items[2][0], items[3][0]]
    finally:
        await store.close()


async def test_links_see_the_documents_before_them_in_the_same_call(store: Store) -> None:
    links = LinkSettings(granularities=("chunk",), supersede="off")
    ingestor = Ingestor(store, EMBEDDER, ChunkSettings(), links=links)
    text = b"Otters hold hands while sleeping so they do not drift apart.\n"
    items: list[Item] = [
        ("/notes/a.md", "a.md", text, None, None),
        ("/notes/b.md", "b.md", b"Something else entirely: river notes.\n", None, None),
        ("/notes/c.md", "c.md", text, None, None),
    ]
    reports = await ingestor.ingest_many(items)
    first, _, third = (r.document_id for r in reports)
    assert first is not None and third is not None

    async def links(r: Reader) -> tuple[list[int], list[dict[str, Any]]]:
        ids = await r.chunk_ids([first, third])
        [c_chunk] = [cid for (doc, _), cid in ids.items() if doc == third]
        found = await r.links_of(c_chunk, relation="similar", direction="out")
        return [cid for (doc, _), cid in ids.items() if doc == first], found

    a_chunks, [link] = await store.read(links)
    assert link["dst"] in a_chunks


class _PreparedEmbedder(HashEmbedder):
    """The hash embedder, counting the calls to what `LocalEmbedder` opens for batches."""

    def __init__(self) -> None:
        super().__init__(64)
        self.prepared = 0

    def prepare_batches(self) -> None:
        self.prepared += 1


async def test_a_call_of_several_files_prepares_the_embedders_batches_once(store: Store) -> None:
    embedder = _PreparedEmbedder()
    ingestor = Ingestor(store, embedder, ChunkSettings())
    [one] = _items(1, 1)
    await ingestor.ingest_many(one)
    assert embedder.prepared == 0  # a lone file: left to its first batch, as before
    for items in _items(3, 2):
        await ingestor.ingest_many(items)
    assert ingestor._preparing is not None
    await ingestor._preparing
    assert embedder.prepared == 1
    # Another model (after a reindex) is prepared in its turn.
    other = _PreparedEmbedder()
    ingestor.use_model(other)
    await ingestor.ingest_many(
        [(f"/notes/x{i}.md", f"x{i}.md", b"More otters.\n", None, None) for i in range(2)]
    )
    assert ingestor._preparing is not None
    await ingestor._preparing
    assert other.prepared == 1
