"""Self-tuning in the daemon: a fresh store calibrates in the background while searches go on,
`status` shows the choice and `recalld calibrate` runs it on demand."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.conftest import Daemon
from tests.retrieval.test_selftune import make_documents

pytestmark = pytest.mark.integration


def test_fresh_store_calibrates_in_the_background_without_blocking_searches(
    make_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    for name, text in make_documents().items():
        (folder / f"{name}.md").write_text(text)
    daemon = make_daemon(RECALLD_SEARCH__SELF_TUNE="true", RECALLD_CHUNK__MAX_TOKENS="160")
    daemon.start()
    assert daemon.wait_ready()["calibration"] is None
    daemon.client.ingest(folder)

    searches: list[tuple[float, float]] = []
    stop = threading.Event()

    def search_meanwhile() -> None:
        from recalld.client import Client

        with Client(daemon.socket, timeout=30) as client:
            while not stop.is_set():
                started = time.time()
                assert client.search("lava crater eruption", limit=3)["hits"]
                searches.append((started, time.time()))

    searcher = threading.Thread(target=search_meanwhile)
    searcher.start()
    try:
        status = daemon.wait_for(lambda s: s["calibration"] is not None, timeout=120)
    finally:
        stop.set()
        searcher.join()
    tuning = status["calibration"]
    assert status["self_tune"] is True and status["answerability_self_tune"] is False
    # No conversations: no answerability threshold to learn, and it says why.
    assert tuning["answerability"]["all"]["threshold"] == 0.0
    assert "pseudo-questions" in tuning["answerability"]["all"]["skipped"]
    assert tuning["kinds"]["text"]["family"] in tuning["kinds"]["text"]["scores"]
    # It may have started during the ingest: it is redone only when the store grew by 20 %.
    assert 50 <= tuning["chunks"] <= status["counts"]["chunks"]
    # Searches were answered, promptly, while the calibration ran.
    ran_from, ran_to = tuning["at"] - tuning["seconds"], tuning["at"]
    during = [(a, b) for a, b in searches if a >= ran_from and b <= ran_to]
    assert during, (tuning["seconds"], len(searches))
    assert max(b - a for a, b in during) < 2.0

    # The search says which family it used; `recalld calibrate` redoes it on demand.
    result = daemon.client.search("lava crater eruption", explain=True)
    assert result["explain"]["calibration"]["family"] == tuning["kinds"]["text"]["family"]
    again = subprocess.run(
        [sys.executable, "-m", "recalld", "calibrate", "--json"],
        env=daemon.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["kinds"]["text"]["family"] == tuning["kinds"]["text"]["family"]
