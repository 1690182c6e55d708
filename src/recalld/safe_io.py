"""Reading files that may block: only regular files are opened, and reads have a deadline.

- `open_regular` opens with `O_NONBLOCK` and checks what it opened, so a FIFO, socket or
  device named like a document (or an ignore file) is refused before anything can block on it,
  with no window between a stat and the open.
- `call_with_timeout` runs blocking file work in its own daemon thread and stops waiting at a
  deadline. A regular file can still block (a FUSE or network mount that hangs, a file under a
  lease, `/proc`); the caller then moves on, and because the thread is a daemon thread, not one
  of the default executor's, the process can still exit (issue 18: one such read stopped all
  ingest and made SIGTERM hang). The stuck thread ends when the read does.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import stat
import threading
from collections.abc import Callable
from typing import BinaryIO, TypeVar

T = TypeVar("T")


class NotRegularFile(OSError):
    """The path is a pipe, socket or device, which is never read."""


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """Open `path` for reading in binary mode if it is a regular file (symlinks followed).

    Raises:
        NotRegularFile: It is a FIFO, socket or device.
        OSError: It cannot be opened.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(
                errno.EINVAL, "not a regular file (a pipe, socket or device)", os.fspath(path)
            )
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


async def call_with_timeout(fn: Callable[[], T], limit_s: float) -> T:
    """`fn()` in a daemon thread; raises `TimeoutError` if it has not returned in `limit_s`.

    The thread is left to finish on its own (its result is dropped). Use it for file reads
    only: a thread per call is cheap next to a read, and a stuck one never blocks shutdown.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if future.done():
            return  # the caller stopped waiting
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def work() -> None:
        try:
            result, error = fn(), None
        except BaseException as exc:  # handed to the caller, like to_thread does
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=work, name="recalld-read", daemon=True).start()
    async with asyncio.timeout(limit_s):
        return await future
