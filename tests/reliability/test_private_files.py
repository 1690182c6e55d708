"""The store is private to its user (issue 16): folders 0700 and files 0600 under umask 022,
on creation and on open of an older, looser store (tightened with a warning)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from recalld.storage.registry import open_store
from tests.integration.conftest import Daemon
from tests.storage.conftest import EMBEDDER, put


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


def store_files(db: Path) -> list[Path]:
    return [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")]


@pytest.mark.usefixtures("umask_022")
async def test_a_new_store_is_private(tmp_path: Path) -> None:
    db = tmp_path / "fresh" / "nested" / "r.db"
    store = await open_store(db, model_id=EMBEDDER.model_id, dimension=64)
    try:
        await put(store, "/notes/a.md", ["private text"])
        for file in store_files(db):
            assert mode(file) == 0o600, file
        assert mode(db.parent) == 0o700
        assert mode(db.parent.parent) == 0o700
    finally:
        await store.close()


@pytest.mark.usefixtures("umask_022")
async def test_a_loose_store_is_tightened_on_open(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "r.db"
    store = await open_store(db, model_id=EMBEDDER.model_id, dimension=64)
    await put(store, "/notes/a.md", ["private text"])
    # Leave -wal and -shm behind as a running daemon would, then loosen everything.
    for file in store_files(db):
        file.chmod(0o644)
    caplog.set_level(logging.WARNING, logger="recalld.private")
    again = await open_store(db, model_id=EMBEDDER.model_id, dimension=64)
    try:
        for file in store_files(db):
            assert mode(file) == 0o600, file
        assert f"{db} was readable by others (644); made it 600" in caplog.text
    finally:
        await again.close()
        await store.close()


@pytest.mark.usefixtures("umask_022")
def test_daemon_files_are_private_and_tightened_on_restart(
    make_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    daemon = make_daemon()
    data = daemon.home / "data"
    db = data / "recalld.db"
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.md").write_text("# Cutover\n\nThe postgres cutover is on Friday.\n")
    daemon.start()
    daemon.wait_ready()
    daemon.client.sources_add(folder)
    daemon.wait_for(lambda s: s["counts"]["documents"] >= 1)
    export = tmp_path / "out.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "recalld", "export", str(export)],
        env=daemon.env,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    private = [*store_files(db), db.with_name("recalld.db.lock"), data / "sources.json", export]
    for file in private:
        assert mode(file) == 0o600, file
    assert mode(data) == 0o700 and mode(data / "drop") == 0o700
    assert daemon.stop() == 0

    # An older recalld left them readable by everyone: the next start tightens them.
    data.chmod(0o755)
    for file in private:
        if file.exists():
            file.chmod(0o644)
    daemon.start()
    daemon.wait_ready()
    for file in private[:-1]:
        if file.exists():
            assert mode(file) == 0o600, file
    assert mode(data) == 0o700
    assert "was readable by others (644); made it 600" in daemon.log.read_text()
    assert daemon.stop() == 0
