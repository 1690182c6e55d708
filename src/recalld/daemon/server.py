"""The Unix socket server: one JSON-RPC message per line, one task per connection.

- The socket file is mode 0600 inside a 0700 directory; its path must stay under 100 bytes
  (`sun_path` is 104 bytes on macOS, 108 on Linux).
- On start a stale socket (nobody answers) is removed; a live one means another daemon serves
  it: `DaemonAlreadyRunning`. An exclusive `flock` on `<store>.lock` also keeps two daemons off
  one store even when their sockets differ, and on Linux one on the database file itself keeps
  them off it even through a hard link (`StoreLock`).
- Only the daemon's own user is served: the peer's uid is read from the kernel (`SO_PEERCRED`
  on Linux, `LOCAL_PEERCRED`, which `getpeereid(3)` wraps, on macOS and FreeBSD) and any other
  uid gets -32004 and is closed. The file modes keep other users out already; this holds even
  when someone loosens them (issue 6).
- At most `MAX_CONNECTIONS` connections are served at once. When they are all taken, the one
  quiet the longest (asking nothing, or not reading what it was sent, for `EVICT_IDLE_S` at
  least) is closed to make room, so idle or stuck clients cannot lock others out; if none
  is, the newcomer gets -32005 (`DaemonBusy`, "busy") and is closed. A connection that sends
  no complete line for `IDLE_TIMEOUT_S`, or does not read its answers for as long, is closed
  (clients reconnect).
- Memory per connection is bounded: nothing is read ahead of the request being answered (the
  socket is not read while it runs), and its answer waits for the peer to read the one before,
  so a client that sends and never reads holds one request and one answer, not megabytes.
- A line that is not JSON gets -32700 with a null id and the connection stays open; a line over
  `protocol.MAX_LINE_BYTES` gets -32003 and the connection is closed (a line is never buffered
  past the limit, whatever its length).
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
import struct
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from recalld import private, protocol
from recalld.daemon.methods import Dispatcher
from recalld.errors import ConfigError, DaemonAlreadyRunning

logger = logging.getLogger(__name__)

MAX_SOCKET_PATH = 100
IDLE_TIMEOUT_S = 300.0
MAX_CONNECTIONS = 256
# A connection must have been idle this long before a newcomer may take its slot (so a burst
# of new connections does not evict each other before they send their first request).
EVICT_IDLE_S = 5.0
# Answers waiting for a peer that does not read them; past this the peer is dropped at once
# (answers are sent one at a time, so only a single huge one gets here).
MAX_UNREAD_BYTES = 16 * 2**20
# The kernel's queue of connections not yet accepted. With asyncio's default of 100, a burst of
# connections fails on the client side (EAGAIN) before the daemon can serve or refuse them.
LISTEN_BACKLOG = 1024
# A refused peer gets this long to take its one-line answer before the connection is dropped.
_REFUSAL_WRITE_S = 1.0
# `struct ucred` (Linux): pid, uid, gid.
_UCRED = struct.Struct("3i")
# The start of `struct xucred` (macOS, FreeBSD): cr_version, cr_uid; the groups follow.
_XUCRED_HEAD = struct.Struct("2I")
_XUCRED_SIZE = 128  # larger than the struct on every BSD; the kernel returns its own length
_SOL_LOCAL = 0
_LOCAL_PEERCRED = 0x001


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


def peer_uid(sock: Any) -> int | None:
    """The uid of the process at the other end of a connected Unix socket.

    Args:
        sock: A connected `AF_UNIX` socket (or asyncio's `TransportSocket` around one).

    Returns:
        The peer's effective uid, or None where the platform offers no way to ask.

    Raises:
        OSError: The kernel refused to tell (the peer is gone, or not a Unix socket).
    """
    if hasattr(socket, "SO_PEERCRED"):  # Linux
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
        _pid, uid, _gid = _UCRED.unpack(raw[: _UCRED.size])
        return int(uid)
    if sys.platform == "darwin" or sys.platform.startswith("freebsd"):
        # getpeereid(3) is this getsockopt; Python has no binding for either on every version.
        option = getattr(socket, "LOCAL_PEERCRED", _LOCAL_PEERCRED)
        raw = sock.getsockopt(_SOL_LOCAL, option, _XUCRED_SIZE)
        _version, uid = _XUCRED_HEAD.unpack(raw[: _XUCRED_HEAD.size])
        return int(uid)
    return None


class StoreLock:
    """An exclusive `flock` on a file beside the store, held while the daemon runs.

    The file beside the store goes by path, which a hard link or a second spelling of the
    path gets around. So on Linux the database file itself is locked too (`identity`): a
    flock belongs to the file (device and inode), whatever name opened it, and Linux keeps
    flock apart from the POSIX locks SQLite takes (flock(2)), so SQLite is not disturbed.
    BSD and macOS share one lock table between the two, so there the path lock is all.

    Args:
        store_path: The SQLite file (on PostgreSQL, the local anchor path).
        identity: Also lock the database file itself (SQLite stores on Linux).
    """

    def __init__(self, store_path: Path, *, identity: bool = True) -> None:
        self.store = store_path
        self.path = store_path.with_name(store_path.name + ".lock")
        self.identity = identity and sys.platform.startswith("linux")
        self._handle: IO[str] | None = None
        self._store_fd: int | None = None

    def acquire(self) -> None:
        """Take the lock.

        Raises:
            DaemonAlreadyRunning: Another process holds it.
        """
        if not self.path.parent.is_dir():
            private.private_dir(self.path.parent)
        private.create_private(self.path)
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
        if self.identity and self.store.exists():
            try:
                self._store_fd = _lock_file_identity(self.store)
            except BaseException:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
                handle.close()
                raise
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._handle = handle

    def lock_store_file(self) -> None:
        """Lock the database file too, once it exists (a new store: after it is created).

        Raises:
            DaemonAlreadyRunning: Another process has it locked.
        """
        if self.identity and self._store_fd is None and self.store.exists():
            self._store_fd = _lock_file_identity(self.store)

    def release(self) -> None:
        """Drop the lock (the file stays; a lock file that exists is harmless).

        Call it after the store is closed: closing a descriptor of the database drops every
        POSIX lock this process holds on it, SQLite's included.
        """
        if self._store_fd is not None:
            os.close(self._store_fd)
            self._store_fd = None
        if self._handle is not None:
            fcntl.flock(self._handle.fileno(), fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None


def _lock_file_identity(store: Path) -> int:
    """Flock the database file itself; returns the descriptor that holds the lock."""
    fd = os.open(store, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        info = os.fstat(fd)
        os.close(fd)
        holder = _flock_holder(info.st_dev, info.st_ino)
        raise DaemonAlreadyRunning(
            f"another recalld ({holder}) already has {store} open under another name (a hard "
            f"link or another path to the same file, device {info.st_dev} inode "
            f"{info.st_ino}); two daemons on one database lose writes: stop it first",
            data={"store": str(store), "device": info.st_dev, "inode": info.st_ino},
        ) from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def _flock_holder(device: int, inode: int) -> str:
    """'pid N' for the process holding a flock on that file, from /proc/locks if it says."""
    key = f"{os.major(device):02x}:{os.minor(device):02x}:{inode}"
    with contextlib.suppress(OSError):
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == key:
                return f"pid {fields[4]}"
    return "another process"


@dataclass(eq=False)
class _Peer:
    """One served connection, as the slot policy sees it."""

    transport: asyncio.Transport
    idle_since: float | None  # monotonic time its last answer went out; None while busy
    stalled_since: float | None = None  # since when an answer waits for the peer to read it
    evicted: bool = False

    def quiet_since(self) -> float | None:
        """Since when it has asked nothing, or read nothing it was sent (None: working)."""
        return self.idle_since if self.idle_since is not None else self.stalled_since


class SocketServer:
    """Serves `dispatcher` on a Unix socket.

    Args:
        path: The socket file.
        dispatcher: Answers each request.
        idle_timeout: Seconds a connection may wait without sending a complete line (or
            without reading what it is sent) before it is closed.
        max_connections: Connections served at once; more are refused with -32005 unless
            one has been idle `evict_idle_after` s, which is closed to make room.
        allowed_uid: The only peer uid served; default: this process's own.
        evict_idle_after: Seconds idle before a connection may lose its slot to a newcomer.
    """

    def __init__(
        self,
        path: Path,
        dispatcher: Dispatcher,
        *,
        idle_timeout: float = IDLE_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
        allowed_uid: int | None = None,
        evict_idle_after: float = EVICT_IDLE_S,
    ) -> None:
        self.path = path
        self.dispatcher = dispatcher
        self.idle_timeout = idle_timeout
        self.max_connections = max_connections
        self.allowed_uid = os.geteuid() if allowed_uid is None else allowed_uid
        self.evict_idle_after = evict_idle_after
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._peers: set[_Peer] = set()
        self.evicted = 0  # idle connections closed to make room, since start
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._inode: int | None = None
        self.refused = 0  # connections turned away for the cap, since start
        self._refused_burst = 0  # ... since the cap was last reached
        self._peer_check_warned = False

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
            self._serve_connection,
            path=os.fspath(self.path),
            limit=protocol.MAX_LINE_BYTES,
            backlog=LISTEN_BACKLOG,
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

    @property
    def connections(self) -> int:
        """Connections being served now."""
        return len(self._connections)

    def _refusal(self, writer: asyncio.StreamWriter) -> tuple[int, str] | None:
        """Why this new connection must be turned away, if it must."""
        sock = writer.get_extra_info("socket")
        try:
            uid = peer_uid(sock) if sock is not None else None
        except OSError as exc:
            logger.debug("cannot read the peer's credentials: %s", exc)
            return protocol.PERMISSION_DENIED, "cannot verify who is connecting"
        if uid is None:
            if not self._peer_check_warned:
                self._peer_check_warned = True
                logger.warning(
                    "this platform cannot tell who connects to %s; relying on its 0600 mode",
                    self.path,
                )
        elif uid != self.allowed_uid:
            logger.warning("refused a connection from uid %d: not the daemon's user", uid)
            return (
                protocol.PERMISSION_DENIED,
                "permission denied: this daemon serves only the user who started it",
            )
        if len(self._connections) >= self.max_connections and not self._evict_idle():
            if not self._refused_burst:
                logger.warning(
                    "%d connections open, the most served at once; refusing new ones",
                    len(self._connections),
                )
            self._refused_burst += 1
            self.refused += 1
            return (
                protocol.TOO_MANY_CONNECTIONS,
                f"recalld is busy: all {self.max_connections} connections it serves are in use; "
                "retry in a moment",
            )
        if self._refused_burst and len(self._connections) < self.max_connections * 9 // 10:
            logger.info("accepting connections again (%d refused meanwhile)", self._refused_burst)
            self._refused_burst = 0
        return None

    def _evict_idle(self) -> bool:
        """Close the connection idle the longest, if one has been for `evict_idle_after` s."""
        now = time.monotonic()
        quiet = [(since, p) for p in self._peers if (since := p.quiet_since()) is not None]
        idle = [(s, p) for s, p in quiet if not p.evicted and now - s >= self.evict_idle_after]
        if not idle:
            return False
        since, victim = min(idle, key=lambda pair: pair[0])
        victim.evicted = True
        victim.transport.abort()
        self.evicted += 1
        logger.debug("closed a connection quiet for %.0f s to make room", now - since)
        return True

    async def _refuse(self, writer: asyncio.StreamWriter, code: int, message: str) -> None:
        data = {"type": "DaemonBusy"} if code == protocol.TOO_MANY_CONNECTIONS else None
        try:
            writer.write(protocol.dumps(protocol.error_response(None, code, message, data)))
            async with asyncio.timeout(_REFUSAL_WRITE_S):
                await writer.drain()
        except (ConnectionError, TimeoutError):
            pass  # the peer went away or does not read; it is dropped either way
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        refusal = self._refusal(writer)
        if refusal is not None:
            await self._refuse(writer, *refusal)
            return
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
        transport = writer.transport
        assert isinstance(transport, asyncio.Transport)
        peer = _Peer(transport, time.monotonic())

        async def send(message: dict[str, Any]) -> None:
            async with lock:
                if writer.is_closing():
                    return
                writer.write(protocol.dumps_answer(message))
                if writer.transport.get_write_buffer_size() > MAX_UNREAD_BYTES:
                    logger.info(
                        "dropping a connection with %d bytes of unread answers", MAX_UNREAD_BYTES
                    )
                    writer.transport.abort()
                    return
                # Waiting for the peer to read is idleness too: such a peer may lose its slot.
                peer.stalled_since = time.monotonic()
                try:
                    async with asyncio.timeout(self.idle_timeout):
                        await writer.drain()
                except TimeoutError:
                    # The peer stopped reading its answers. Dropping the connection frees its
                    # slot and the buffered answers; the read loop then sees it closed.
                    logger.info(
                        "dropping a connection that stopped reading for %g s", self.idle_timeout
                    )
                    writer.transport.abort()
                except ConnectionError:
                    # The peer left (e.g. a client that timed out): what it asked for goes on
                    # to the end, an ingest above all; only its messages are dropped (issue 17).
                    writer.transport.abort()
                finally:
                    peer.stalled_since = None

        self._peers.add(peer)
        try:
            await self._read_loop(reader, send, peer)
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
            self._peers.discard(peer)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _read_loop(
        self,
        reader: asyncio.StreamReader,
        send: Callable[[dict[str, Any]], Awaitable[None]],
        peer: _Peer,
    ) -> None:
        transport = peer.transport
        while True:
            peer.idle_since = time.monotonic()
            # Read only while waiting for the next request: what a client sends while one
            # runs stays in its socket, not in this process (at most one read chunk here).
            transport.resume_reading()
            try:
                async with asyncio.timeout(self.idle_timeout):
                    line = await reader.readuntil(b"\n")
            except TimeoutError:
                # Silent, or a half line trickling in: either way the slot is taken back.
                logger.debug("closing a connection idle for %g s", self.idle_timeout)
                return
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
            peer.idle_since = None
            transport.pause_reading()
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
