"""A second writer the path lock does not see (issue 18 item 6), with real daemon processes:
a second daemon on a hard link of the store, and the store's `-wal` or database file deleted
under a running daemon. The goal is the same in each: nothing acknowledged is lost."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from recalld.errors import StoreGoneError
from recalld.storage.sqlite.connection import connect
from tests.integration.conftest import Daemon

pytestmark = pytest.mark.integration


def stored_texts(db: Path) -> set[str]:
    conn = connect(db, readonly=True)
    try:
        return {str(row[0]) for row in conn.execute("SELECT text FROM chunks")}
    finally:
        conn.close()


def test_second_daemon_on_a_hard_link_of_the_store_exits_3(
    make_daemon: Callable[..., Daemon], tmp_path: Path, short_dir: Path
) -> None:
    first = make_daemon()
    first.start()
    db = Path(first.wait_ready()["store"])
    first.client.remember("written before the second daemon tried")
    link = tmp_path / "elsewhere" / "same.db"
    link.parent.mkdir()
    os.link(db, link)
    second = make_daemon(
        home=tmp_path / "other-home",
        socket=short_dir / "other.sock",
        RECALLD_STORE__PATH=str(link),
    )
    assert second.start().wait(60) == 3
    log = second.log.read_text()
    assert "hard link" in log and f"pid {first.proc.pid if first.proc else ''}" in log
    # The first daemon never noticed and keeps writing; the second left no files behind it.
    first.client.remember("written after the second daemon was refused")
    assert not link.with_name("same.db-wal").exists()
    assert first.stop() == 0
    assert {
        "written before the second daemon tried",
        "written after the second daemon was refused",
    } <= stored_texts(db)


@pytest.mark.parametrize("deleted", ["-wal", ""])
def test_a_store_file_deleted_under_the_daemon_stops_writes_and_loses_nothing_acknowledged(
    make_daemon: Callable[..., Daemon], deleted: str
) -> None:
    daemon = make_daemon()
    daemon.start()
    db = Path(daemon.wait_ready()["store"])
    acknowledged: list[str] = []
    for i in range(20):
        daemon.client.remember(f"kept memory {i}")
        acknowledged.append(f"kept memory {i}")
    db.with_name(db.name + deleted).unlink()
    refused = 0
    for i in range(20):
        try:
            daemon.client.remember(f"late memory {i}")
        except StoreGoneError as exc:
            assert "deleted or replaced" in exc.message and "restart recalld" in exc.message
            refused += 1
        else:
            acknowledged.append(f"late memory {i}")
    assert refused >= 19  # the first may land before a check sees the file gone, not later
    writes = daemon.client.status()["writes"]
    assert writes["ok"] is False and writes["reason"] == "store files changed"
    # Searches still work on what is open.
    assert daemon.client.search("kept memory", mode="bm25")["hits"]
    daemon.stop(signal.SIGKILL)
    if deleted == "":
        return  # the user deleted the database; what matters is that nothing more was taken
    daemon.start()
    daemon.wait_ready()
    assert set(acknowledged) <= stored_texts(db)
    assert daemon.client.status()["writes"]["ok"] is True
    assert daemon.stop() == 0


def test_a_deleted_wal_is_saved_without_waiting_for_a_write(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon()
    daemon.start()
    db = Path(daemon.wait_ready()["store"])
    for i in range(10):
        daemon.client.remember(f"quiet memory {i}")
    db.with_name(db.name + "-wal").unlink()
    # No write comes; the daemon's watchdog notices and saves the WAL into the database.
    writes = daemon.wait_for(lambda s: s["writes"]["ok"] is False, timeout=20)["writes"]
    assert "saved in the database file" in writes["message"]
    daemon.stop(signal.SIGKILL)
    assert {f"quiet memory {i}" for i in range(10)} <= stored_texts(db)
