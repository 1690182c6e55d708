"""The daemon on the real packaged embedding model: the one end-to-end test that uses it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.conftest import Daemon

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.model]


def test_semantic_search_over_the_socket(
    make_daemon: Callable[..., Daemon], tmp_path: Path, model_cache: Path
) -> None:
    daemon = make_daemon(RECALLD_EMBED__MODEL="local", RECALLD_CACHE_DIR=str(model_cache))
    daemon.start()
    status = daemon.wait_ready(timeout=120)
    assert status["model"].startswith("minilm") and status["dimension"] == 384
    drop = Path(status["drop_folder"])
    (drop / "pets.md").write_text(
        "# Pets\n\nOur golden retriever loves chasing tennis balls in the park every morning.\n"
    )
    (drop / "db.md").write_text(
        "# Databases\n\nWrite-ahead logging lets readers continue "
        "while a single writer commits transactions.\n"
    )
    daemon.wait_for(lambda s: s["counts"]["documents"] == 2, timeout=120)
    # No shared keywords: only the vectors can find it.
    hits = daemon.client.search("my dog playing fetch outside", mode="vector")["hits"]
    assert hits[0]["source"] == str(drop / "pets.md")
    assert daemon.stop() == 0
