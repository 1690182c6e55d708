"""`storage.listing` and `storage.forgotten` on both backends: pages, filters, per-source
counts and the forgotten entries, through the same SQL."""

from __future__ import annotations

from typing import Any

from recalld.storage import forgotten, listing, records
from recalld.storage.contract import Store
from tests.storage.conftest import new_chunks


async def put(store: Store, source: str, texts: list[str], digest: str, **kw: Any) -> int:
    doc = records.NewDocument(source, kw.get("kind", "text"), "markdown", digest)
    chunks = new_chunks(texts, **kw)
    return await store.write(lambda c: c.replace_document(doc, chunks))


async def test_documents_memories_and_counts(store: Store) -> None:
    await put(store, "/p/notes/a.md", ["alpha one", "alpha two"], digest="a")
    await put(store, "/p/notes/b.md", ["bravo"], digest="b", tags=("red",))
    await put(store, "/p/code/c.py", ["charlie"], digest="c", kind="code")
    await put(store, "/q/d.md", ["delta"], digest="d")
    await store.write(
        lambda c: c.execute(
            "INSERT INTO errors (source, error_type, message, at) VALUES (?, ?, ?, ?)",
            ("/p/broken.pdf", "ParseError", "bad", 1.0),
        )
    )

    async def docs(query: listing.ListQuery) -> tuple[list[str], int]:
        items, total = await store.read(lambda c: listing.documents(c, query))
        return [i["source"] for i in items], total

    assert await docs(listing.ListQuery()) == (
        ["/p/code/c.py", "/p/notes/a.md", "/p/notes/b.md", "/q/d.md"],
        4,
    )
    assert await docs(listing.ListQuery(limit=2, offset=1)) == (
        ["/p/notes/a.md", "/p/notes/b.md"],
        4,
    )
    assert await docs(listing.ListQuery(sources=("/p/notes/", "/q/"))) == (
        ["/p/notes/a.md", "/p/notes/b.md", "/q/d.md"],
        3,
    )
    assert await docs(listing.ListQuery(kinds=("code",))) == (["/p/code/c.py"], 1)
    assert await docs(listing.ListQuery(tags=("red",))) == (["/p/notes/b.md"], 1)
    assert await docs(listing.ListQuery(since=2**40)) == ([], 0)
    # A source prefix is bound, never SQL: quotes and wildcards match only themselves.
    assert await docs(listing.ListQuery(sources=("%' OR 1=1 --",))) == ([], 0)

    counts = await store.read(lambda c: listing.source_counts(c, "/p"))
    assert counts == {"documents": 3, "chunks": 4, "errors": 1}
    assert await store.read(lambda c: listing.source_counts(c, "/p/notes/a.md")) == {
        "documents": 0,
        "chunks": 0,
        "errors": 0,
    }


async def test_forgotten_entries_round_trip(store: Store) -> None:
    await store.write(lambda c: forgotten.add(c, "/home/me/big"))
    await store.write(lambda c: forgotten.add(c, "/home/me/*.log"))
    await store.write(lambda c: forgotten.add(c, "/home/me/big"))  # again: one entry
    entries = await store.read(forgotten.entries)
    assert [e["pattern"] for e in entries] == ["/home/me/*.log", "/home/me/big"]
    assert all(isinstance(e["at"], float) for e in entries)
    assert await store.write(lambda c: forgotten.remove(c, "/home/me/big")) is True
    assert await store.write(lambda c: forgotten.remove(c, "/home/me/big")) is False
    assert [e["pattern"] for e in await store.read(forgotten.entries)] == ["/home/me/*.log"]
