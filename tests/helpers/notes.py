"""A memory holding a few short notes, on SQLite or on PostgreSQL."""

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from recalld.api import AsyncMemory
from recalld.config import load_settings
from tests.helpers.postgres import VECTOR_INDEX


@asynccontextmanager
async def memory_with_notes(
    tmp_path: Path, texts: Sequence[str], pg_url: str | None = None
) -> AsyncIterator[AsyncMemory]:
    """An open memory (hash vectors; PostgreSQL at `pg_url`, else a SQLite file) holding each
    text as its own note, source `n<i>`."""
    env = {"RECALLD_HOME": str(tmp_path), "RECALLD_EMBED__MODEL": "hash:64"}
    if pg_url is not None:
        env["RECALLD_STORE__PATH"] = pg_url
        env["RECALLD_STORE__VECTOR_INDEX"] = VECTOR_INDEX
    async with await AsyncMemory.open(load_settings(None, env).settings) as opened:
        for i, text in enumerate(texts):
            await opened.add_text(text, source=f"n{i}", name="n.txt")
        yield opened
