"""The socket protocol against a real daemon: framing, bad input, state errors, lifecycle."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from recalld import protocol
from recalld.client import AsyncClient, Client
from recalld.daemon.lifecycle import STARTUP_FAILURE, Config, Server
from recalld.errors import DaemonNotRunning
from tests.pipeline.conftest import Running, daemon_env, start, stop, wait_until


async def exchange(socket: Path, *lines: bytes, expect: int | None = None) -> list[dict[str, Any]]:
    """Send raw lines on one connection, then read `expect` answers (default: one a line)."""
    reader, writer = await asyncio.open_unix_connection(str(socket))
    try:
        writer.write(b"".join(lines))
        await writer.drain()
        count = len(lines) if expect is None else expect
        return [json.loads(await asyncio.wait_for(reader.readline(), 10)) for _ in range(count)]
    finally:
        writer.close()


async def test_socket_is_private(daemon: Running) -> None:
    assert stat.S_IMODE(daemon.socket.stat().st_mode) == 0o600
    assert stat.S_IMODE(daemon.socket.parent.stat().st_mode) == 0o700


async def test_malformed_line_keeps_the_connection(daemon: Running) -> None:
    status = protocol.dumps(protocol.request(2, "status"))
    bad, good = await exchange(daemon.socket, b"{nope\n", status)
    assert bad == {"jsonrpc": "2.0", "id": None, "error": bad["error"]}
    assert bad["error"]["code"] == protocol.PARSE_ERROR
    assert good["id"] == 2 and good["result"]["state"] == "ready"


async def test_protocol_errors(daemon: Running) -> None:
    answers = await exchange(
        daemon.socket,
        b'[{"jsonrpc":"2.0","id":1,"method":"status"}]\n',
        protocol.dumps(protocol.request(2, "no/such")),
        protocol.dumps(protocol.request(3, "search", {})),
        protocol.dumps(protocol.request(4, "search", {"query": "x", "limit": "ten"})),
        protocol.dumps(protocol.request(5, "search", {"query": "x", "colour": "red"})),
        protocol.dumps(protocol.request(6, "get", {"id": 999999})),
        protocol.dumps(protocol.request(7, "search", {"query": "x", "mode": "psychic"})),
    )
    codes = [a["error"]["code"] for a in answers]
    assert codes == [
        protocol.INVALID_REQUEST,
        protocol.METHOD_NOT_FOUND,
        protocol.INVALID_PARAMS,
        protocol.INVALID_PARAMS,
        protocol.INVALID_PARAMS,
        -32060,
        protocol.INVALID_PARAMS,
    ]
    assert answers[3]["error"]["data"] == {"param": "limit"}
    assert answers[5]["error"]["data"]["type"] == "NotFoundError"
    assert [a["id"] for a in answers[1:]] == [2, 3, 4, 5, 6, 7]


async def test_notification_gets_no_answer(daemon: Running) -> None:
    notification = b'{"jsonrpc":"2.0","method":"status"}\n'
    [answer] = await exchange(
        daemon.socket, notification, protocol.dumps(protocol.request(9, "status")), expect=1
    )
    assert answer["id"] == 9


async def test_oversized_line_closes_the_connection(daemon: Running) -> None:
    reader, writer = await asyncio.open_unix_connection(str(daemon.socket))
    writer.write(
        b'{"jsonrpc":"2.0","id":1,"method":"search","params":{"query":"'
        + b"a" * (protocol.MAX_LINE_BYTES + 10)
        + b'"}}\n'
    )
    try:
        await writer.drain()
    except ConnectionError:
        pass  # the daemon may close before it has read everything
    answer = json.loads(await asyncio.wait_for(reader.readline(), 10))
    assert answer["error"]["code"] == protocol.LINE_TOO_LONG
    assert await asyncio.wait_for(reader.read(), 10) == b""
    writer.close()
    # The daemon itself is fine.
    async with daemon.client() as client:
        assert (await client.status())["state"] == "ready"


async def test_client_without_daemon(short_dir: Path) -> None:
    with pytest.raises(DaemonNotRunning, match="recalld serve"):
        await AsyncClient(short_dir / "none.sock").status()
    with pytest.raises(DaemonNotRunning):
        Client(short_dir / "none.sock").status()


async def test_second_daemon_on_the_same_store_refuses(daemon: Running, short_dir: Path) -> None:
    # Another socket, the same store: the store lock refuses it.
    env = {**daemon.env, "RECALLD_DAEMON__SOCKET": str(short_dir / "other.sock")}
    code = await Server(Config(env=env, install_signal_handlers=False)).serve()
    assert code == STARTUP_FAILURE
    # The first daemon still answers and its socket is still there.
    async with daemon.client() as client:
        assert (await client.status())["state"] == "ready"


async def test_live_socket_refuses_a_second_daemon(daemon: Running, tmp_path: Path) -> None:
    # Another store, the same socket: the live socket refuses it.
    env = daemon_env(tmp_path / "other", daemon.socket)
    code = await Server(Config(env=env, install_signal_handlers=False)).serve()
    assert code == STARTUP_FAILURE
    assert daemon.socket.exists()


async def test_stale_socket_is_replaced_and_removed_on_stop(
    isolated_home: Path, short_dir: Path
) -> None:
    import socket as sockets

    path = short_dir / "s.sock"
    stale = sockets.socket(sockets.AF_UNIX)
    stale.bind(str(path))
    stale.close()  # bound, never listening: nobody answers
    server, task = await start(daemon_env(isolated_home, path))
    async with AsyncClient(path) as client:
        assert (await client.status())["pid"] == os.getpid()
    assert await stop(server, task) == 0
    assert not path.exists()


async def test_too_long_socket_path_fails_startup(isolated_home: Path) -> None:
    env = daemon_env(isolated_home, Path("/tmp") / ("x" * 120) / "s.sock")
    assert await Server(Config(env=env, install_signal_handlers=False)).serve() == 3


async def test_shutdown_refuses_new_requests(daemon: Running) -> None:
    daemon.server.dispatcher.shutting_down = True
    try:
        [answer] = await exchange(daemon.socket, protocol.dumps(protocol.request(1, "status")))
        assert answer["error"]["code"] == protocol.SHUTTING_DOWN
    finally:
        daemon.server.dispatcher.shutting_down = False


async def test_a_client_that_leaves_does_not_stop_its_ingest(
    daemon: Running, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A client that times out and closes its connection used to kill the ingest it started
    with an internal error at the next progress message (issue 17); it now runs to the end."""
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(40):
        (folder / f"n{i}.md").write_text(f"# Note {i}\n\nThe walrus census, count {i}.\n")
    _, writer = await asyncio.open_unix_connection(str(daemon.socket))
    writer.write(protocol.dumps(protocol.request(1, "ingest", {"path": str(folder)})))
    await writer.drain()
    writer.close()  # gone before the first progress message
    async with daemon.client() as client:

        async def all_in() -> bool:
            return (await client.status())["counts"]["documents"] == 40

        await wait_until(all_in, 30)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
