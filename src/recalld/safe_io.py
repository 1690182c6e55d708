"""Reading files that may block: only regular files are opened, and reads have a deadline.

- `open_regular` opens with `O_NONBLOCK` and checks what it opened, so a FIFO, socket or
  device named like a document (or an ignore file) is refused before anything can block on it,
  with no window between a stat and the open.
- `call_with_timeout` runs blocking file work in a daemon thread and stops waiting at a
  deadline. A regular file can still block (a FUSE or network mount that hangs, a file under a
  lease, `/proc`); the caller then moves on, and because the thread is a daemon thread, not one
  of the default executor's, the process can still exit (issue 18: one such read stopped all
  ingest and made SIGTERM hang). The stuck thread ends when the read does. Threads are reused
  (`_Readers`): a stuck one only means the next call starts another.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import queue
import stat
import threading
from collections.abc import Callable
from typing import Any, BinaryIO, TypeVar

T = TypeVar("T")
R = TypeVar("R")


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


# An idle reader thread waits this long for more work before it ends.
READER_IDLE_S = 5.0


class _Readers:
    """Daemon threads that run blocking file work, each reused while calls keep coming.

    A thread per call cost the event loop ~1 ms a call, more on loaded cores: `Thread.start`
    waits until the new thread runs, and a folder's ingest reads every file through here. A
    call goes to an idle thread when there is one, else to a new one, so a thread stuck in a
    read never holds up the calls after it.
    """

    def __init__(self, idle_s: float) -> None:
        self.idle_s = idle_s
        self._lock = threading.Lock()
        # Invariant: threads waiting for work == `_idle` + calls queued and not yet taken.
        self._idle = 0
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], Callable[[Any], None]]] = (
            queue.SimpleQueue()
        )

    def run(self, work: Callable[[], R], hand_over: Callable[[R], None]) -> None:
        """Run `work`, then `hand_over` with its result, in a waiting thread, or in a new one
        when none waits. The thread counts itself idle between the two, so a call made as soon
        as the result is handed over finds it."""
        with self._lock:
            start = self._idle == 0
            if not start:
                self._idle -= 1  # that thread is spoken for: it takes this call
        self._calls.put((work, hand_over))
        if start:
            threading.Thread(target=self._serve, name="recalld-read", daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                work, hand_over = self._calls.get(timeout=self.idle_s)
            except queue.Empty:
                with self._lock:
                    if self._idle > 0:  # no call is queued for this thread: it ends
                        self._idle -= 1
                        return
                continue  # a call was handed to the waiting threads just now: take it
            result = work()
            with self._lock:
                self._idle += 1
            hand_over(result)


_READERS = _Readers(READER_IDLE_S)


async def call_with_timeout(fn: Callable[[], T], limit_s: float) -> T:
    """`fn()` in a daemon thread; raises `TimeoutError` if it has not returned in `limit_s`.

    The thread is left to finish on its own (its result is dropped). Use it for file reads
    only: a thread stuck in one never blocks shutdown, and the calls after it go to others.
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

    def work() -> tuple[T | None, BaseException | None]:
        try:
            return fn(), None
        except BaseException as exc:  # handed to the caller, like to_thread does
            return None, exc

    def hand_over(outcome: tuple[T | None, BaseException | None]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(settle, *outcome)

    _READERS.run(work, hand_over)
    async with asyncio.timeout(limit_s):
        return await future
