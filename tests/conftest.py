"""Suite-wide fixtures: an isolated home for every test, and a check that logging is untouched."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point RECALLD_HOME and the XDG dirs at a temp dir, so no test touches the real home."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("RECALLD_HOME", str(home))
    for name in ("XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_RUNTIME_DIR"):
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture(autouse=True)
def logging_untouched() -> Iterator[None]:
    """Library code must never configure logging (watchfiles' autouse fixture)."""
    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    yield
    assert (list(root.handlers), root.level) == before


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache dir for the built ONNX graph, shared by the whole session."""
    return tmp_path_factory.mktemp("models")


from tests.helpers.postgres import pg_server, pg_url, store_env  # noqa: E402, F401 - suite-wide fixtures
