"""A full disk as a state (issue 18 item 2): writes are refused with a clear error, files wait
(pending, shown in `status`) instead of being dropped, and go in once space returns.

Two ways to fill the disk for real:
- a real daemon process with its store on a small tmpfs (needs the right to mount one; the
  test is skipped where that is not allowed), filled with a ballast file that is later removed;
- the in-process daemon with SQLite's `PRAGMA max_page_count` set on its writer connection, so
  SQLite itself answers SQLITE_FULL (runs everywhere).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from recalld.errors import StoreFullError
from recalld.ingest import scheduler as scheduler_module
from tests.integration.conftest import Daemon
from tests.pipeline.conftest import Running, wait_until

WORDS = "otter walrus narwhal puffin heron badger marten lynx ibex dugong".split()


def write_corpus(folder: Path, count: int, paragraphs: int = 12) -> set[str]:
    folder.mkdir()
    names = set()
    for i in range(count):
        text = "\n\n".join(
            f"Note {i} paragraph {p}: " + " ".join(WORDS[(i + p + k) % 10] for k in range(60))
            for p in range(paragraphs)
        )
        (folder / f"note{i:04d}.md").write_text(text + "\n")
        names.add(f"note{i:04d}.md")
    return names


def waiting_for_space(status: dict[str, Any]) -> bool:
    """Files wait for space, and nothing else is left to do."""
    no_space = status["queues"]["no_space"]
    return bool(no_space) and status["pending"] == no_space


def poll(
    daemon: Daemon, predicate: Callable[[dict[str, Any]], bool], limit: float
) -> dict[str, Any]:
    deadline = time.monotonic() + limit
    while True:
        status = daemon.client.status()
        if predicate(status):
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.1)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small-disk"
    mount.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount(8) here; test_max_page_count covers SQLITE_FULL")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(mount)],
        capture_output=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip()})")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path, leave_bytes: int) -> Path:
    """A ballast file that leaves about `leave_bytes` free on `disk`."""
    ballast = disk / "ballast"
    free = shutil.disk_usage(disk).free
    with ballast.open("wb") as handle:
        handle.write(b"\0" * max(0, free - leave_bytes))
    return ballast


def fill_more(ballast: Path) -> None:
    """Grow the ballast until the disk has no byte left."""
    with ballast.open("ab", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 4096)
        except OSError:
            pass


@pytest.mark.integration
def test_a_full_tmpfs_refuses_writes_keeps_files_pending_and_loses_nothing(
    make_daemon: Callable[..., Daemon], tmp_path: Path, tmpfs: Path
) -> None:
    daemon = make_daemon(RECALLD_STORE__PATH=str(tmpfs / "recalld.db"))
    daemon.start()
    daemon.wait_ready()
    daemon.client.remember("Written before the disk filled up, about otters.")
    ballast = fill(tmpfs, 256 * 1024)
    names = write_corpus(tmp_path / "notes", 200)
    daemon.client.sources_add(tmp_path / "notes")
    # Files wait for space, shown in status; writes are refused with a clear error.
    status = poll(daemon, waiting_for_space, 120)
    assert status["writes"] == {
        "ok": False,
        "reason": "disk full",
        "message": "the disk holding the store is full",
    }
    # Memories are acknowledged while SQLite still has room (its WAL reuses its own pages),
    # then refused with a clear error: never an internal error, never a silent loss.
    fill_more(ballast)
    acknowledged = []
    for i in range(400):
        text = f"Memory {i} written on a full disk: " + " ".join(WORDS) * 300
        try:
            daemon.client.remember(text)
        except StoreFullError as exc:
            assert "is full" in exc.message and "refused" in exc.message
            break
        acknowledged.append(text)
    else:
        raise AssertionError("a full disk took 400 memories of 20 KB")
    assert daemon.client.search("otters", mode="bm25")["hits"]  # reads go on
    # Space returns: everything waiting goes in, nothing was dropped.
    ballast.unlink()
    done = daemon.wait_for(lambda s: s["counts"]["documents"] >= 201, timeout=120)
    assert done["queues"]["no_space"] == 0 and done["writes"]["ok"] is True
    assert daemon.client.search("narwhal puffin", mode="bm25")["hits"]
    assert done["counts"]["documents"] == 201 + len(acknowledged)  # notes and memories
    assert not [e for e in daemon.client.errors() if Path(e["source"]).name in names]
    assert daemon.client.check()["ok"] is True
    daemon.client.remember("Written after space came back.")
    # Nothing acknowledged is lost, even to a SIGKILL.
    daemon.stop(signal.SIGKILL)
    daemon.start()
    assert daemon.wait_ready()["counts"]["documents"] == 202 + len(acknowledged)
    assert daemon.stop() == 0


async def test_max_page_count_full_store_keeps_files_pending_and_retries(
    daemon: Running, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scheduler_module, "SPACE_PROBE_S", 0.2)
    memory = daemon.server.memory
    assert memory is not None
    store = memory.store
    names = write_corpus(tmp_path / "notes", 40)
    async with daemon.client() as client:
        await client.remember("Written before the store filled up, about otters.")
        # Fault injection: cap the database at its current size; the next page SQLite needs
        # fails with a real SQLITE_FULL.
        async with store._write_lock:
            row = await (await store._writer.execute("PRAGMA page_count")).fetchone()
            await store._writer.execute(f"PRAGMA max_page_count = {row[0]}")
        await client.sources_add(tmp_path / "notes")

        async def waiting() -> bool:
            return waiting_for_space(await client.status())

        await wait_until(waiting, 60)
        status = await client.status()
        assert status["writes"]["reason"] == "disk full"
        with pytest.raises(StoreFullError, match="is full"):
            # Large enough to need pages of its own.
            await client.remember("Refused while the store is full: " + " ".join(WORDS) * 2000)
        # Space returns.
        async with store._write_lock:
            await store._writer.execute("PRAGMA max_page_count = 1073741823")

        async def all_in() -> bool:
            status = await client.status()
            return status["counts"]["documents"] == 41 and status["pending"] == 0

        await wait_until(all_in, 60)
        status = await client.status()
        assert status["writes"]["ok"] is True and status["queues"]["no_space"] == 0
        errors = await client.errors()
        assert not [e for e in errors if Path(e["source"]).name in names]
        assert len(names) == 40
