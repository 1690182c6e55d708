from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from recalld.embeddings.base import HashEmbedder
from recalld.storage import writer
from recalld.storage.store import Store
from recalld.types import ChunkDraft

EMBEDDER = HashEmbedder(64)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await Store.open(tmp_path / "t.db", model_id=EMBEDDER.model_id, dimension=64)
    yield s
    await s.close()


def new_chunks(texts: list[str], **kw) -> list[writer.NewChunk]:
    vectors = EMBEDDER.embed(texts)
    return [
        writer.NewChunk(ChunkDraft(text=t, key=f"k{i}", **kw), len(t.split()), vectors[i])
        for i, t in enumerate(texts)
    ]


async def put(store: Store, source: str, texts: list[str], digest: str = "h", **kw) -> int:
    doc = writer.NewDocument(source, "text", "markdown", digest)
    chunks = new_chunks(texts, **kw)
    return await store.write(lambda c: writer.replace_document(c, doc, chunks))
