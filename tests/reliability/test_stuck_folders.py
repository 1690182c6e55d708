"""Folders that get stuck (issue 18 item 5), against a real daemon process: a file whose open
would block (a real second process holds a kernel lease on it), a read blocked in the kernel,
FIFOs, sockets and a FIFO named `.gitignore`, `sources remove` during a scan, SIGTERM, and a
start-up failure after the store is open."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import Daemon

pytestmark = pytest.mark.integration

# A second process takes a write lease on the file: every other open of it blocks until the
# lease is given up, or the kernel breaks it (/proc/sys/fs/lease-break-time, 45 s by default).
LEASE_HOLDER = """
import fcntl, os, signal, sys, time
signal.signal(signal.SIGIO, signal.SIG_IGN)  # the kernel asks for the lease back; ignore it
fd = os.open(sys.argv[1], os.O_WRONLY)
fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
print("leased", flush=True)
time.sleep(120)
"""


@pytest.fixture
def lease() -> Iterator[Callable[[Path], None]]:
    holders: list[subprocess.Popen[bytes]] = []

    def hold(path: Path) -> None:
        holder = subprocess.Popen(
            [sys.executable, "-c", LEASE_HOLDER, str(path)], stdout=subprocess.PIPE
        )
        holders.append(holder)
        assert holder.stdout is not None and holder.stdout.readline() == b"leased\n"

    yield hold
    for holder in holders:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()


def sources_of(daemon: Daemon, query: str) -> set[str]:
    return {Path(s).name for s in daemon.search_sources(query, limit=50)}


def test_a_read_that_blocks_stalls_nothing_and_sigterm_still_exits(
    make_daemon: Callable[..., Daemon], tmp_path: Path, lease: Callable[[Path], None]
) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(5):
        (folder / f"note{i}.md").write_text(f"Ordinary note {i} about walruses.\n")
    blocked = folder / "blocked.md"
    blocked.write_text("A note about walruses that nobody can open.\n")
    lease(blocked)
    daemon = make_daemon(RECALLD_DAEMON__READ_TIMEOUT_S="1")
    daemon.start()
    daemon.wait_ready()
    started = time.monotonic()
    daemon.client.sources_add(folder)
    daemon.wait_for(lambda s: s["counts"]["documents"] >= 5 and s["errors"] >= 1, timeout=30)
    assert time.monotonic() - started < 30  # well inside the 45 s the lease could hold it
    assert sources_of(daemon, "walruses") == {f"note{i}.md" for i in range(5)}
    (error,) = [e for e in daemon.client.errors() if e["source"] == str(blocked)]
    assert "held by another program" in error["message"]
    # The pipeline goes on: a file written now is ingested.
    (folder / "later.md").write_text("A later note about narwhals.\n")
    daemon.wait_for(lambda s: "later.md" in sources_of(daemon, "narwhals"), timeout=30)
    # SIGTERM with the lease still held: a clean, prompt exit.
    stopping = time.monotonic()
    assert daemon.stop(timeout=30) == 0
    assert time.monotonic() - stopping < 15


# Opening a FIFO for reading blocks in the kernel until a writer comes: a real blocked read.
BLOCKED_READER = """
import asyncio, sys, time
from recalld.safe_io import call_with_timeout

async def main():
    started = time.monotonic()
    try:
        await call_with_timeout(lambda: open(sys.argv[1], "rb").read(), 0.5)
    except TimeoutError:
        print(f"timed out after {time.monotonic() - started:.1f} s", flush=True)

asyncio.run(main())
"""


def test_a_read_blocked_in_the_kernel_times_out_and_never_holds_up_exit(tmp_path: Path) -> None:
    fifo = tmp_path / "never-written"
    os.mkfifo(fifo)
    done = subprocess.run(
        [sys.executable, "-c", BLOCKED_READER, str(fifo)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    # It stopped waiting at the deadline, and the thread still blocked did not keep the
    # process from exiting (a worker thread of asyncio.to_thread would, for ever).
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("timed out after 0."), done.stdout


def test_fifos_sockets_and_a_fifo_gitignore_are_skipped_not_waited_on(
    make_daemon: Callable[..., Daemon], tmp_path: Path, short_dir: Path
) -> None:
    folder = tmp_path / "odd"
    folder.mkdir()
    (folder / "plain.md").write_text("A plain note about otters.\n")
    inner = folder / "inner"
    inner.mkdir()
    (inner / "deep.md").write_text("A deeper note about otters.\n")
    os.mkfifo(folder / "pipe.md")
    os.mkfifo(inner / ".gitignore")  # opening it to read the rules would wait for a writer
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(short_dir / "sock.md"))
    (folder / "sock.md").symlink_to(short_dir / "sock.md")
    daemon = make_daemon(RECALLD_DAEMON__READ_TIMEOUT_S="5")
    daemon.start()
    daemon.wait_ready()
    try:
        daemon.client.sources_add(folder)
        daemon.wait_for(lambda s: {"plain.md", "deep.md"} <= sources_of(daemon, "otters"))
        # Named explicitly, a FIFO is refused at once too.
        report = daemon.client.ingest(folder / "pipe.md")
        assert report["failed"] == 1 and "not a regular file" in report["errors"][0]["message"]
        assert daemon.client.status()["pending"] == 0
        assert daemon.stop() == 0
    finally:
        listener.close()


def test_sources_remove_stops_the_scan_under_way(
    make_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    folder = tmp_path / "many"
    folder.mkdir()
    total = 3000
    for i in range(total):
        (folder / f"f{i:05d}.md").write_text(f"File {i} about puffins and the sea.\n")
    daemon = make_daemon()
    daemon.start()
    daemon.wait_ready()
    daemon.client.sources_add(folder)
    deadline = time.monotonic() + 60
    while daemon.client.status()["counts"]["documents"] < 50:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    daemon.client.sources_remove(folder)
    daemon.wait_for(lambda s: True, timeout=60)
    settled = daemon.client.status()["counts"]["documents"]
    time.sleep(1.5)
    assert daemon.client.status()["counts"]["documents"] == settled
    # What the scan had queued (up to a batch in flight) went no further.
    assert settled < total // 2, settled
    assert daemon.stop() == 0


def test_a_start_up_failure_with_the_store_open_exits_3(
    make_daemon: Callable[..., Daemon],
) -> None:
    # The dimension is given, so the store opens before the first request finds no endpoint.
    daemon = make_daemon(
        RECALLD_EMBED__MODEL="openai:test",
        RECALLD_EMBED__DIMENSIONS="64",
        RECALLD_EMBED__BASE_URL="http://127.0.0.1:9/v1",
        RECALLD_EMBED__TIMEOUT_S="0.3",
        RECALLD_EMBED__MAX_RETRIES="0",
    )
    started = time.monotonic()
    assert daemon.start().wait(30) == 3
    assert time.monotonic() - started < 30
    log = daemon.log.read_text()
    assert "opened store" in log and "cannot start" in log


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """An HTTP endpoint that accepts connections and never answers: a read that blocks."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                held.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    listener.close()


def test_sigterm_while_start_up_waits_on_a_silent_endpoint_exits_promptly(
    make_daemon: Callable[..., Daemon], silent_endpoint: str
) -> None:
    daemon = make_daemon(
        RECALLD_EMBED__MODEL="openai:test",
        RECALLD_EMBED__DIMENSIONS="64",
        RECALLD_EMBED__BASE_URL=silent_endpoint,
        RECALLD_EMBED__TIMEOUT_S="600",
        RECALLD_EMBED__MAX_RETRIES="0",
    )
    proc = daemon.start()
    deadline = time.monotonic() + 30
    while "opened store" not in daemon.log.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, daemon.log.read_text()
        time.sleep(0.05)
    time.sleep(0.5)  # the first embedding request is now waiting for its answer
    stopping = time.monotonic()
    assert daemon.stop(timeout=30) == 0
    # The request's thread is still blocked (600 s read timeout); the process did not wait.
    assert time.monotonic() - stopping < 15
    assert "stopped while starting" in daemon.log.read_text()
