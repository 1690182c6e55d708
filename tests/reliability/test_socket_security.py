"""Socket security and robustness (issue 6): other users refused by their kernel-reported uid,
idle and stalled connections closed, a cap on connections, and garbage, half lines and a
100 MB line that cannot take the daemon down."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from recalld import protocol
from recalld.client import AsyncClient, Client
from recalld.daemon.server import MAX_CONNECTIONS, SocketServer, peer_uid
from tests.pipeline.conftest import Running, wait_until

OTHER_UID = 65534  # nobody


async def read_message(reader: asyncio.StreamReader, limit: float = 10) -> dict[str, Any]:
    line = await asyncio.wait_for(reader.readline(), limit)
    assert line, "the daemon closed the connection instead of answering"
    message: dict[str, Any] = json.loads(line)
    return message


async def hung_up(reader: asyncio.StreamReader) -> bool:
    """True once the daemon has closed the connection (a reset counts: Linux reports one to a
    peer whose last bytes the daemon never read)."""
    try:
        return await asyncio.wait_for(reader.read(), 10) == b""
    except ConnectionResetError:
        return True


async def still_serving(socket_path: Path) -> None:
    async with AsyncClient(socket_path, timeout=10) as client:
        assert (await client.status())["state"] == "ready"


@pytest.fixture
async def side_server(daemon: Running, short_dir: Path) -> AsyncIterator[SocketServer]:
    """A second socket on the running daemon's dispatcher, with test-sized limits."""
    server = SocketServer(
        short_dir / "side" / "s.sock",
        daemon.server.dispatcher,
        idle_timeout=0.3,
        max_connections=MAX_CONNECTIONS,
    )
    await server.start()
    try:
        yield server
    finally:
        await server.stop(1)


# -- bad input on a connection ------------------------------------------------------------


async def test_garbage_lines_each_get_an_error_and_the_connection_stays(daemon: Running) -> None:
    rng = random.Random(6)
    lines = [
        b"\x00\x01\x02\xff\xfe\n",
        b"\xc3\x28 invalid utf-8\n",
        b"}{][\n",
        b'"just a string"\n',
        b"12345\n",
        b'{"jsonrpc":"2.0","id":{"nested":1},"method":"status"}\n',
        b'{"jsonrpc":"1.0","id":1,"method":"status"}\n',
        b'{"jsonrpc":"2.0","id":1,"method":"status","params":[1,2]}\n',
    ]
    for _ in range(40):
        noise = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
        lines.append(noise.replace(b"\n", b"") + b"\n")
    reader, writer = await asyncio.open_unix_connection(str(daemon.socket))
    try:
        writer.write(b"".join(lines))
        writer.write(protocol.dumps(protocol.request("after", "status")))
        await writer.drain()
        codes = []
        while True:
            message = await read_message(reader)
            if message.get("id") == "after":
                assert message["result"]["state"] == "ready"
                break
            codes.append(message["error"]["code"])
    finally:
        writer.close()
    # Blank noise lines are skipped; every other line got exactly one error.
    assert 0 < len(codes) <= len(lines)
    assert set(codes) <= {protocol.PARSE_ERROR, protocol.INVALID_REQUEST, protocol.INVALID_PARAMS}
    await still_serving(daemon.socket)


async def test_half_line_then_close_or_half_close(daemon: Running) -> None:
    # The peer vanishes mid-line: nothing to answer, nothing breaks.
    _, writer = await asyncio.open_unix_connection(str(daemon.socket))
    writer.write(b'{"jsonrpc":"2.0","id":1,"meth')
    await writer.drain()
    writer.close()
    # The peer stops writing mid-line but still listens: the fragment is answered as a line.
    reader, writer = await asyncio.open_unix_connection(str(daemon.socket))
    writer.write(b'{"jsonrpc":"2.0","id":2,"meth')
    await writer.drain()
    writer.write_eof()
    answer = await read_message(reader)
    assert answer["error"]["code"] == protocol.PARSE_ERROR and answer["id"] is None
    assert await asyncio.wait_for(reader.read(), 10) == b""
    writer.close()
    await still_serving(daemon.socket)


def stream_one_line(path: Path, most: int) -> tuple[int, bytes]:
    """Send one line of up to `most` bytes in 1 MiB blocks, never holding more than one block;
    stop when the daemon hangs up. Returns the bytes sent and what the daemon answered."""
    block = b"x" * 2**20
    sent = 0
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(os.fspath(path))
        try:
            sock.sendall(b'{"jsonrpc":"2.0","id":1,"method":"search","params":{"query":"')
            while sent < most:
                sock.sendall(block)
                sent += len(block)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the daemon hung up: what we want
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass  # after the queued answer, Linux reports the bytes the daemon dropped
    return sent, answer


async def test_a_100_mb_line_is_cut_off_without_being_buffered(daemon: Running) -> None:
    """The daemon answers -32003 and hangs up after about its 8 MiB limit, so the client
    never gets to send the rest of its 100 MB."""
    sent, answer = await asyncio.to_thread(stream_one_line, daemon.socket, 100 * 2**20)
    [line] = answer.splitlines()
    assert json.loads(line)["error"]["code"] == protocol.LINE_TOO_LONG
    # Cut off after the limit plus what the kernel and the stream buffers hold.
    assert sent < 3 * protocol.MAX_LINE_BYTES, sent
    print(f"\n100 MB line: cut off after {sent / 2**20:.0f} MiB")
    await still_serving(daemon.socket)


# -- many connections ---------------------------------------------------------------------


async def test_500_connections_at_once_do_not_starve_a_client(daemon: Running) -> None:
    flood = 500
    socket_server = daemon.server._socket
    assert socket_server is not None
    outcomes: dict[str, int] = {"served": 0, "refused": 0, "reset": 0}
    latencies: list[float] = []
    release = asyncio.Event()

    async def one(index: int) -> None:
        # Like a real client: connect, send at once, read the answer.
        try:
            reader, writer = await asyncio.open_unix_connection(str(daemon.socket))
        except ConnectionError:
            outcomes["reset"] += 1
            return
        try:
            writer.write(protocol.dumps(protocol.request(index, "status")))
            await writer.drain()
            line = await asyncio.wait_for(reader.readline(), 30)
        except ConnectionError:
            line = b""
        try:
            if not line:
                # Refused before our request went out: the daemon's one-line answer is lost
                # with the connection. The server's own count below covers these.
                outcomes["reset"] += 1
                return
            message = json.loads(line)
            if "result" in message:
                outcomes["served"] += 1
                await release.wait()  # hold the slot until every connection has its answer
            else:
                assert message["error"]["code"] == protocol.TOO_MANY_CONNECTIONS
                outcomes["refused"] += 1
        finally:
            writer.close()

    async def steady_client() -> None:
        # Connected before the flood; it keeps searching through it.
        async with AsyncClient(daemon.socket, timeout=10) as client:
            await client.status()
            while not release.is_set():
                started = asyncio.get_running_loop().time()
                await client.search("anything at all", limit=3)
                latencies.append(asyncio.get_running_loop().time() - started)
                await asyncio.sleep(0.01)

    steady = asyncio.create_task(steady_client())
    await asyncio.sleep(0.2)
    refused_before = socket_server.refused
    tasks = [asyncio.create_task(one(i)) for i in range(flood)]
    try:
        await wait_until(lambda: sum(outcomes.values()) == flood, 60)
        during = len(latencies)
        await asyncio.sleep(0.3)  # the steady client goes on while the slots are held
        assert len(latencies) > during, "the steady client got no answer during the flood"
    finally:
        release.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await steady
    refused = socket_server.refused - refused_before
    # Never more than the cap at once (the steady client holds one slot), every connection
    # served or refused by the daemon, and nothing left behind.
    assert 0 < outcomes["served"] <= MAX_CONNECTIONS - 1
    assert outcomes["served"] + refused == flood
    assert outcomes["refused"] + outcomes["reset"] == refused
    print(
        f"\n{flood} connections: {outcomes['served']} served, {refused} refused "
        f"({outcomes['refused']} read the -32005 answer); steady client: {len(latencies)} "
        f"searches, slowest {max(latencies) * 1000:.0f} ms"
    )
    await wait_until(lambda: socket_server.connections == 0)
    await still_serving(daemon.socket)


# -- idle and stalled connections ---------------------------------------------------------


async def test_idle_connection_is_closed(side_server: SocketServer) -> None:
    reader, writer = await asyncio.open_unix_connection(str(side_server.path))
    assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the daemon, no answer
    writer.close()
    # A half line trickling in is no different from silence.
    reader, writer = await asyncio.open_unix_connection(str(side_server.path))
    writer.write(b'{"jsonrpc":"2.0",')
    await writer.drain()
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()
    assert side_server.connections == 0


async def test_busy_connection_is_not_idle(side_server: SocketServer) -> None:
    reader, writer = await asyncio.open_unix_connection(str(side_server.path))
    try:
        for index in range(8):  # 8 x 0.1 s: longer than the timeout, never idle for as long
            writer.write(protocol.dumps(protocol.request(index, "status")))
            await writer.drain()
            assert (await read_message(reader))["id"] == index
            await asyncio.sleep(0.1)
    finally:
        writer.close()


async def test_clients_reconnect_after_an_idle_close(side_server: SocketServer) -> None:
    async with AsyncClient(side_server.path, timeout=10) as client:
        assert (await client.status())["state"] == "ready"
        await asyncio.sleep(0.6)  # the daemon drops the connection meanwhile
        assert (await client.status())["state"] == "ready"
    sync = Client(side_server.path, timeout=10)
    try:
        assert (await asyncio.to_thread(sync.status))["state"] == "ready"
        await asyncio.sleep(0.6)
        assert (await asyncio.to_thread(sync.status))["state"] == "ready"
    finally:
        sync.close()


async def test_a_peer_that_never_reads_its_answers_is_dropped(
    side_server: SocketServer, daemon: Running
) -> None:
    _, writer = await asyncio.open_unix_connection(str(side_server.path))
    request = protocol.dumps(protocol.request(1, "config/show"))
    # Enough answers to fill the socket and stream buffers; none of them is ever read.
    writer.write(request * 3000)
    await writer.drain()
    await wait_until(lambda: side_server.connections == 0, 20)
    writer.close()
    await still_serving(daemon.socket)


# -- peer credentials ---------------------------------------------------------------------


def test_peer_uid_reads_the_kernel_credentials() -> None:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with left, right:
        uid = peer_uid(left)
    if uid is None:
        pytest.skip(f"no peer credentials on {sys.platform}")
    assert uid == os.geteuid()


async def test_a_uid_other_than_the_daemons_is_refused(
    daemon: Running, short_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Checked for real by the kernel's answer: the server here serves only a uid that is not
    ours, so our own connection plays the other user (works without root)."""
    other = SocketServer(
        short_dir / "other" / "s.sock", daemon.server.dispatcher, allowed_uid=os.geteuid() + 1
    )
    await other.start()
    try:
        with caplog.at_level(logging.WARNING, logger="recalld.daemon.server"):
            reader, writer = await asyncio.open_unix_connection(str(other.path))
            writer.write(protocol.dumps(protocol.request(1, "status")))
            answer = await read_message(reader)
            assert answer["error"]["code"] == protocol.PERMISSION_DENIED
            assert "result" not in answer
            assert await hung_up(reader)
            writer.close()
        assert f"refused a connection from uid {os.geteuid()}" in caplog.text
    finally:
        await other.stop(1)


CONNECT_AS_OTHER = """
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(10)
s.connect(sys.argv[1])
try:
    s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"status"}\\n')
except BrokenPipeError:
    pass  # already refused; the answer is still queued
data = b""
try:
    while chunk := s.recv(65536):
        data += chunk
except ConnectionResetError:
    pass  # after the answer: the daemon closed without reading our request
sys.stdout.write(data.decode())
"""


def _interpreter_for(uid: int) -> str | None:
    """A Python that `uid` may run (a virtualenv under /root is out of its reach)."""
    for candidate in (sys.executable, getattr(sys, "_base_executable", ""), "/usr/bin/python3"):
        if not candidate:
            continue
        try:
            subprocess.run(
                [candidate, "-S", "-c", "pass"], user=uid, group=uid, check=True, timeout=20
            )
        except (OSError, subprocess.SubprocessError):
            continue
        return candidate
    return None


def _dir_others_can_reach() -> Path | None:
    """A fresh folder whose every ancestor other users may traverse (/tmp may be 0700)."""
    for base in (Path(tempfile.gettempdir()), Path("/var/tmp"), Path("/dev/shm")):
        chain = [base, *base.parents]
        if base.is_dir() and all(p.stat().st_mode & stat.S_IXOTH for p in chain):
            return Path(tempfile.mkdtemp(prefix="rs-", dir=base))
    return None


@pytest.fixture
def reachable_dir() -> Iterator[Path]:
    path = _dir_others_can_reach()
    if path is None:
        pytest.skip("no temp folder that another user can reach")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="running a client as another user needs root")
async def test_another_user_is_refused_even_with_open_permissions(
    daemon: Running, reachable_dir: Path
) -> None:
    """A real process running as uid 65534 connects to a socket whose modes were opened up for
    the test: the kernel lets it in, the uid check throws it out."""
    python = await asyncio.to_thread(_interpreter_for, OTHER_UID)
    if python is None:
        pytest.skip(f"no Python interpreter that uid {OTHER_UID} can run")
    folder = reachable_dir / "shared"
    server = SocketServer(folder / "s.sock", daemon.server.dispatcher)
    await server.start()
    try:
        # Opened up for the test: the kernel lets another user connect; the uid check does not.
        for path, mode in ((reachable_dir, 0o711), (folder, 0o711), (server.path, 0o666)):
            os.chmod(path, mode)
        proc = await asyncio.create_subprocess_exec(
            python,
            "-S",
            "-c",
            CONNECT_AS_OTHER,
            str(server.path),
            user=OTHER_UID,
            group=OTHER_UID,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, err.decode()
        [line] = out.decode().splitlines()
        answer = json.loads(line)
        assert answer["error"]["code"] == protocol.PERMISSION_DENIED
        assert "result" not in answer
        # The daemon's own user still gets in on the same socket.
        await still_serving(server.path)
    finally:
        await server.stop(1)
