"""One truth between processes (issue 16): the in-process API writes the store while a real
daemon runs; the daemon finds the new text, and `check` reports its in-memory vector index
while that misses rows."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from recalld.api import Memory
from recalld.config import load_settings
from tests.integration.conftest import Daemon

pytestmark = pytest.mark.integration


def check(daemon: Daemon) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "recalld", "check", "--json"],
        env=daemon.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    report = json.loads(done.stdout)
    return done.returncode, {c["name"]: c for c in report["checks"]}


def vector_top(daemon: Daemon, query: str) -> str:
    hits = daemon.client.search(query, mode="vector", limit=1)["hits"]
    return str(hits[0]["text"]) if hits else ""


def test_in_process_writes_reach_the_running_daemon(
    make_daemon: Callable[..., Daemon], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    for i in range(5):
        (notes / f"n{i}.md").write_text(f"# Note {i}\n\nHarbour log entry number {i}.\n")
    daemon = make_daemon()
    daemon.start()
    daemon.wait_ready()
    daemon.client.ingest(notes)
    assert vector_top(daemon, "Harbour log entry number 3.").endswith("number 3.")
    code, checks = check(daemon)
    assert code == 0 and checks["vector_index_memory"]["detail"] == "matches the store"

    settings = load_settings(None, daemon.env).settings
    caplog.set_level(logging.WARNING, logger="recalld.api")
    assert daemon.proc is not None
    with Memory(settings) as memory:
        # It says that a daemon serves this store, and goes on.
        assert memory.daemon_pid == str(daemon.proc.pid)
        assert f"recalld is running on {settings.store_path}" in caplog.text
        memory.remember("The ferry to Skye leaves at 7:40 from Mallaig")
    # The daemon's next search catches up (a change counter in the store) and finds it ...
    found = vector_top(daemon, "The ferry to Skye leaves at 7:40 from Mallaig")
    assert found == "The ferry to Skye leaves at 7:40 from Mallaig"
    code, checks = check(daemon)
    assert code == 0 and checks["vector_index_memory"]["ok"]  # ... with its index whole again

    with Memory(settings) as memory:
        memory.remember("The lighthouse on Neist Point was automated in 1990")
        memory.remember("Otters feed at dusk near the Kyleakin pier")
    # Before any search, `check` sees the index that misses the two new rows.
    code, checks = check(daemon)
    assert code == 1
    assert checks["vector_index_memory"]["value"] == 2 and not checks["vector_index_memory"]["ok"]
    assert "misses 2 rows" in checks["vector_index_memory"]["detail"]
    assert vector_top(daemon, "Otters feed at dusk near the Kyleakin pier").startswith("Otters")
    assert check(daemon)[0] == 0
    assert daemon.stop() == 0
