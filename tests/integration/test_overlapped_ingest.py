"""`recalld ingest DIR` through a real daemon, with its batches overlapped (`ingest.overlap`):
every file lands once, in walk order, a bad file fails with its reason and takes nothing else
with it, and ingesting again changes nothing."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Daemon

pytestmark = [pytest.mark.integration]

NOTES = 70  # more than three batches of 16 in flight at once


def _ingest(daemon: Daemon, folder: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "recalld", "ingest", str(folder), "--json"],
        env=daemon.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _documents(home: Path) -> list[tuple[int, str, int]]:
    """(id, source, chunks) of every stored document, by id."""
    with sqlite3.connect(home / "data" / "recalld.db") as conn:
        rows = conn.execute(
            "SELECT d.id, d.source, (SELECT count(*) FROM chunks c WHERE c.document_id = d.id) "
            "FROM documents d ORDER BY d.id"
        ).fetchall()
    return [(int(i), str(s), int(n)) for i, s, n in rows]


def test_a_folder_lands_whole_in_order_and_a_bad_file_alone_fails(
    make_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(NOTES):
        (folder / f"n{i:03d}.md").write_text(f"# Note {i}\n\nThe otter census, entry {i}.\n")
    big = folder / "n035-big.md"
    big.write_text("otters " * 300_000)  # 2.1 MB, over the 1 MB limit below
    daemon = make_daemon(RECALLD_DAEMON__MAX_FILE_MB="1")
    daemon.start()
    daemon.wait_ready()
    try:
        report = _ingest(daemon, folder)
        assert (report["files"], report["ingested"], report["failed"]) == (NOTES + 1, NOTES, 1)
        [error] = report["errors"]
        assert error["path"] == str(big) and "over the 1 MiB limit" in error["message"]
        again = _ingest(daemon, folder)
        assert (again["unchanged"], again["failed"]) == (NOTES, 1)
    finally:
        daemon.stop()
    docs = _documents(daemon.home)
    assert [source for _, source, _ in docs] == sorted(str(p) for p in folder.iterdir() if p != big)
    assert all(chunks == 1 for _, _, chunks in docs)
