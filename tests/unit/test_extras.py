"""A missing extra is named in the error, for each optional part (issue 17)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from recalld.chunkers import chunk_file
from recalld.config import EmbedSettings
from recalld.embeddings.base import load_embedder
from recalld.errors import ConfigError, UnsupportedFormatError
from recalld.extras import installed
from recalld.ingest.llm_chat import JsonChat
from recalld.storage.registry import open_store
from tests.unit.chunkers.test_documents import make_xlsx


@pytest.fixture
def uninstall(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """Make modules unimportable, as if their extra were not installed."""

    def hide(*modules: str) -> None:
        for module in modules:
            monkeypatch.setitem(sys.modules, module, None)
        installed.cache_clear()

    yield hide
    installed.cache_clear()


def test_everything_is_installed_for_the_suite() -> None:
    # `make test` installs every extra, so the tests below cover the real code paths too.
    for module in ("openai", "psycopg", "psycopg_pool", "pandas", "openpyxl", "pptx"):
        assert installed(module), module


def test_xlsx_without_the_office_extra(uninstall) -> None:
    uninstall("pandas")
    with pytest.raises(UnsupportedFormatError, match=r"recalld\[office\]") as info:
        chunk_file("budget.xlsx", make_xlsx())
    assert info.value.data["extra"] == "office" and info.value.data["missing"] == ["pandas"]


def test_openai_model_without_the_openai_extra(uninstall) -> None:
    uninstall("openai")
    with pytest.raises(ConfigError, match=r"embed.model = 'openai:x'.*recalld\[openai\]"):
        load_embedder("openai:x", None, EmbedSettings(base_url="http://127.0.0.1:9/v1"))
    with pytest.raises(ConfigError, match=r"fact extraction.*recalld\[openai\]"):
        JsonChat("fact extraction", "m", base_url="http://127.0.0.1:9/v1")


async def test_postgres_without_the_postgres_extra(uninstall, tmp_path: Path) -> None:
    uninstall("psycopg")
    with pytest.raises(ConfigError, match=r"PostgreSQL store.*recalld\[postgres\]"):
        await open_store("postgresql://me@127.0.0.1:9/none", model_id="m", dimension=4)
