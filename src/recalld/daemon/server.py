"""The Unix socket server: one JSON-RPC message per line, one task per connection.

- The socket file is mode 0600 inside a 0700 directory; its path must stay under 100 bytes
  (`sun_path` is 104 bytes on macOS, 108 on Linux).
- On start a stale socket (nobody answers) is removed; a live one means another daemon serves
  it: `DaemonAlreadyRunning`. An exclusive `flock` on `<store>.lock` also keeps two daemons off
  one store even when their sockets differ.
- A line that is not JSON gets -32700 with a null id and the connection stays open; a line over
  `protocol.MAX_LINE_BYTES` gets -32003 and the connection is closed.
- Requests on one connection are answered in order; connections are served concurrently.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import os
import socket
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO, Any

from recalld import protocol
from recalld.daemon.methods import Dispatcher
from recalld.errors import ConfigError, DaemonAlreadyRunning

logger = logging.getLogger(__name__)

MAX_SOCKET_PATH = 100


def check_socket_path(path: Path) -> None:
    """Refuse socket paths the OS cannot bind.

    Raises:
        ConfigError: The path is 100 bytes or longer.
    """
    if len(os.fsencode(path)) >= MAX_SOCKET_PATH:
        raise ConfigError(
            f"socket path {path} is {len(os.fsencode(path))} bytes, over the limit of "
            f"{MAX_SOCKET_PATH - 1}; set daemon.socket to a shorter path",
            data={"path": str(path)},
        )


def prepare_socket_dir(path: Path) -> None:
    """Create the socket's directory 0700 (tightening it if we own it)."""
    folder = path.parent
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = folder.stat()
    if info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) & 0o077:
        folder.chmod(0o700)


def socket_is_live(path: Path) -> bool:
    """True when something accepts connections on the socket at `path`."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(os.fspath(path))
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except OSError as exc:
        if exc.errno in (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTSOCK):
            return False
        raise
    finally:
        probe.close()
    return True


class StoreLock:
    """An exclusive `flock` on a file beside the store, held while the daemon runs."""

    def __init__(self, store_path: Path) -> None:
        self.path = store_path.with_name(store_path.name + ".lock")
        self._handle: IO[str] | None = None

    def acquire(self) -> None:
        """Take the lock.

        Raises:
            DaemonAlreadyRunning: Another process holds it.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = self.path.open("a+")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise DaemonAlreadyRunning(
                f"recalld is already running on {self.path.with_suffix('')} (pid {holder}); "
                "stop it first or use another store",
                data={"lock": str(self.path)},
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._handle = handle

    def release(self) -> None:
        """Drop the lock (the file stays; a lock file that exists is harmless)."""
        if self._handle is not None:
            fcntl.flock(self._handle.fileno(), fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None


class SocketServer:
    """Serves `dispatcher` on a Unix socket.

    Args:
        path: The socket file.
        dispatcher: Answers each request.
    """

    def __init__(self, path: Path, dispatcher: Dispatcher) -> None:
        self.path = path
        self.dispatcher = dispatcher
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._inode: int | None = None

    async def start(self) -> None:
        """Bind the socket.

        Raises:
            ConfigError: The path is too long.
            DaemonAlreadyRunning: A live daemon answers on it.
        """
        check_socket_path(self.path)
        prepare_socket_dir(self.path)
        if self.path.exists() or self.path.is_symlink():
            if await asyncio.to_thread(socket_is_live, self.path):
                raise DaemonAlreadyRunning(
                    f"recalld is already running on {self.path}; stop it first (or "
                    "`recalld status` to see it)",
                    data={"socket": str(self.path)},
                )
            logger.info("removing stale socket %s", self.path)
            self.path.unlink()
        self._server = await asyncio.start_unix_server(
            self._serve_connection, path=os.fspath(self.path), limit=protocol.MAX_LINE_BYTES
        )
        os.chmod(self.path, 0o600)
        self._inode = self.path.stat().st_ino
        logger.info("listening on %s", self.path)

    async def stop(self, grace: float) -> None:
        """Stop accepting, let requests in flight finish for `grace` s, then close all."""
        if self._server is not None:
            self._server.close()
        if self._in_flight:
            logger.info("waiting for %d requests in flight", self._in_flight)
            try:
                async with asyncio.timeout(grace):
                    await self._idle.wait()
            except TimeoutError:
                logger.warning("cancelling %d requests still running", self._in_flight)
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        self.unlink()

    def unlink(self) -> None:
        """Remove the socket file, unless another daemon has replaced it since."""
        with contextlib.suppress(FileNotFoundError):
            if self._inode is not None and self.path.stat().st_ino == self._inode:
                self.path.unlink()

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        # The work runs in an inner task that shutdown may cancel: Python 3.11's stream
        # protocol logs a spurious error when the handler task itself ends cancelled.
        task = asyncio.create_task(self._connection(reader, writer))
        self._connections.add(task)
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
        finally:
            self._connections.discard(task)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        lock = asyncio.Lock()

        async def send(message: dict[str, Any]) -> None:
            async with lock:
                writer.write(protocol.dumps(message))
                await writer.drain()

        try:
            await self._read_loop(reader, send)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away
        except asyncio.CancelledError:
            # Shutdown: tell the client why, then close.
            with contextlib.suppress(Exception):
                writer.write(
                    protocol.dumps(
                        protocol.error_response(
                            None,
                            protocol.SHUTTING_DOWN,
                            protocol.STANDARD_MESSAGES[protocol.SHUTTING_DOWN],
                        )
                    )
                )
            raise
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _read_loop(
        self, reader: asyncio.StreamReader, send: Callable[[dict[str, Any]], Awaitable[None]]
    ) -> None:
        while True:
            try:
                line = await reader.readuntil(b"\n")
            except asyncio.LimitOverrunError:
                await send(
                    protocol.error_response(
                        None,
                        protocol.LINE_TOO_LONG,
                        f"message longer than {protocol.MAX_LINE_BYTES} bytes; closing the "
                        "connection",
                    )
                )
                return
            except asyncio.IncompleteReadError as exc:
                if exc.partial.strip():
                    line = exc.partial  # last line without a newline: still answer it
                else:
                    return
            if not line.strip():
                continue
            try:
                request = protocol.parse_request(line)
            except protocol.RpcError as exc:
                await send(exc.to_response())
                continue
            self._in_flight += 1
            self._idle.clear()
            try:
                response = await self.dispatcher.handle(request, send)
            finally:
                self._in_flight -= 1
                if not self._in_flight:
                    self._idle.set()
            if response is not None:
                await send(response)
