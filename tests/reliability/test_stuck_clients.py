"""Clients that get stuck (issue 18 item 5), against a real daemon process: clients that send
and never read cost bounded memory, idle connections cannot lock others out, and a daemon
that is full says "busy" (exit 1), never "not running" (exit 3)."""

from __future__ import annotations

import asyncio
import select
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from recalld import protocol
from recalld.client import AsyncClient
from recalld.daemon.server import EVICT_IDLE_S, MAX_CONNECTIONS, SocketServer
from recalld.errors import DaemonBusy
from tests.integration.conftest import Daemon
from tests.pipeline.conftest import Running, wait_until

MB = 2**20


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def flood_without_reading(path: Path, budget: int) -> tuple[socket.socket, int]:
    """Connect and send requests until the daemon stops taking them (1 s stall) or `budget`
    bytes went out; never read an answer."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(path))
    sock.setblocking(False)
    request = protocol.dumps(protocol.request(1, "no/such/method"))
    chunk = request * (64 * 1024 // len(request))
    sent = 0
    while sent < budget:
        try:
            sent += sock.send(chunk)
        except BlockingIOError:
            _, writable, _ = select.select([], [sock], [], 1.0)
            if not writable:
                break
    return sock, sent


def cli(daemon: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "recalld", *args],
        env=daemon.env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.integration
def test_clients_that_never_read_cost_bounded_memory(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon()
    daemon.start()
    daemon.wait_ready()
    assert daemon.proc is not None
    pid = daemon.proc.pid
    for _ in range(20):
        daemon.client.search("warm up the search path", mode="bm25")
    base = rss_mb(pid)
    stuck = [flood_without_reading(daemon.socket, 24 * MB) for _ in range(12)]
    # The daemon stopped reading each after a request or two: it did not buffer what they sent.
    taken = sum(sent for _, sent in stuck)
    grown = rss_mb(pid) - base
    print(f"\n12 clients that never read: {taken / MB:.1f} MB sent, daemon RSS +{grown:.1f} MB")
    assert taken < 12 * 4 * MB
    assert grown < 48
    # Others are served meanwhile.
    assert daemon.client.status()["state"] == "ready"
    for sock, _ in stuck:
        sock.close()
    time.sleep(0.5)
    assert rss_mb(pid) - base < 48
    assert daemon.client.status()["state"] == "ready"
    assert daemon.stop() == 0


@pytest.mark.integration
def test_idle_connections_cannot_lock_others_out_and_a_full_daemon_says_busy(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon()
    daemon.start()
    daemon.wait_ready()
    held = []
    for _ in range(MAX_CONNECTIONS):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(daemon.socket))
        held.append(sock)
    try:
        time.sleep(0.3)
        # Every slot was just taken: "busy", exit 1, never "not running" (exit 3).
        for _ in range(3):
            result = cli(daemon, "status")
            assert result.returncode == 1, result.stderr
            assert "recalld is busy" in result.stderr and "not running" not in result.stderr
        # Once they have sat idle a while, a newcomer takes the slot of the oldest.
        time.sleep(EVICT_IDLE_S + 0.5)
        for _ in range(3):
            result = cli(daemon, "status")
            assert result.returncode == 0, result.stderr
    finally:
        for sock in held:
            sock.close()
    assert daemon.client.status()["state"] == "ready"
    assert daemon.stop() == 0


async def test_clients_stuck_on_unread_answers_give_way_to_new_ones(
    daemon: Running, short_dir: Path
) -> None:
    server = SocketServer(
        short_dir / "side" / "s.sock",
        daemon.server.dispatcher,
        max_connections=4,
        evict_idle_after=0.5,
    )
    await server.start()
    stuck = []
    try:
        flood = protocol.dumps(protocol.request(1, "no/such/method")) * 20000
        for _ in range(4):
            _, writer = await asyncio.open_unix_connection(str(server.path))
            writer.write(flood)  # and never read the answers
            stuck.append(writer)

        def all_stalled() -> bool:
            # The daemon stopped reading them: their requests back up on our side.
            return all(w.transport.get_write_buffer_size() > 0 for w in stuck)

        await wait_until(all_stalled, 20)
        # Every slot is held by a client that stopped reading; a newcomer gets one once they
        # have been stuck for `evict_idle_after` (retrying "busy", as a client would).
        deadline = asyncio.get_running_loop().time() + 10
        while True:
            try:
                async with AsyncClient(server.path, timeout=10) as client:
                    assert (await client.status())["state"] == "ready"
                break
            except DaemonBusy:
                assert asyncio.get_running_loop().time() < deadline, "stuck clients kept every slot"
                await asyncio.sleep(0.2)
        assert server.evicted >= 1
    finally:
        for writer in stuck:
            writer.transport.abort()
        await server.stop(1)
