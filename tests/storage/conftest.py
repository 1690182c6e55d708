from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from recalld.embeddings.base import HashEmbedder
from recalld.storage import records
from recalld.storage.contract import Store
from recalld.storage.registry import open_store
from recalld.types import ChunkDraft
from tests.helpers.postgres import VECTOR_INDEX

EMBEDDER = HashEmbedder(64)


@pytest.fixture(params=["sqlite", "postgresql"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """Where a store lives: a SQLite file, or a fresh PostgreSQL database (same tests)."""
    if request.param == "sqlite":
        return tmp_path / "t.db"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
async def store(location: Path | str) -> AsyncIterator[Store]:
    s = await open_store(
        location, model_id=EMBEDDER.model_id, dimension=64, vector_index=VECTOR_INDEX
    )
    yield s
    await s.close()


def new_chunks(texts: list[str], **kw) -> list[records.NewChunk]:
    vectors = EMBEDDER.embed(texts)
    return [
        records.NewChunk(ChunkDraft(text=t, key=f"k{i}", **kw), len(t.split()), vectors[i])
        for i, t in enumerate(texts)
    ]


async def put(store: Store, source: str, texts: list[str], digest: str = "h", **kw) -> int:
    doc = records.NewDocument(source, "text", "markdown", digest)
    chunks = new_chunks(texts, **kw)
    return await store.write(lambda c: c.replace_document(doc, chunks))
