"""Reading files that may block: only regular files are opened, and reads have a deadline.

- `open_regular` opens with `O_NONBLOCK` and checks what it opened, so a FIFO, socket or
  device named like a document (or an ignore file) is refused before anything can block on it,
  with no window between a stat and the open.
- `call_with_timeout` runs blocking file work in a daemon thread and stops waiting at a
  deadline; `call_each_with_timeout` runs a batch of such calls in turn, each with its own. A
  regular file can still block (a FUSE or network mount that hangs, a file under a lease,
  `/proc`); the caller then moves on, and because the thread is a daemon thread, not one of
  the default executor's, the process can still exit (issue 18: one such read stopped all
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
import time
from collections.abc import Callable, Sequence
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
    [outcome] = await call_each_with_timeout([fn], limit_s)
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


async def call_each_with_timeout(
    calls: Sequence[Callable[[], T]], limit_s: float
) -> list[T | BaseException]:
    """Each of `calls` in turn in one daemon thread, each with its own deadline: `limit_s`
    after it starts. Returns what each returned or raised, in order; `TimeoutError` for a call
    still running at its deadline.

    A batch of files costs one hop to a thread and back, not one a file: a hop costs both
    threads ~0.1 ms of CPU and the event loop a wake-up. A daemon ingesting 5,183 small files
    with its model stubbed took 11.9 CPU s against 12.7 with a hop a file (medians of four
    runs each, alternating). A call past its deadline is left to finish on its own, and its
    thread takes no further call: the calls after it go to another.
    """
    outcomes: list[T | BaseException] = []
    rest = list(calls)
    while rest:
        done = await _call_in_turn(rest, limit_s)
        outcomes.extend(done)
        if len(done) == len(rest):
            break
        outcomes.append(TimeoutError(f"no answer in {limit_s:g} s"))
        rest = rest[len(done) + 1 :]
    return outcomes


class _Progress:
    """How far a reader thread has gone through its calls, read by the task waiting on it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.outcomes: list[Any] = []
        self.started = time.monotonic()  # when the call under way began (or was queued)
        self.abandoned = False  # the task stopped waiting: the thread takes no further call


async def _call_in_turn(
    calls: Sequence[Callable[[], T]], limit_s: float
) -> list[T | BaseException]:
    """The outcomes of `calls` run in turn in a reader thread, up to the first one still
    running `limit_s` after it started (that one and those after it are left out)."""
    loop = asyncio.get_running_loop()
    finished: asyncio.Future[None] = loop.create_future()
    progress = _Progress()

    def work() -> None:
        for call in calls:
            with progress.lock:
                if progress.abandoned:
                    return
                progress.started = time.monotonic()
            outcome: T | BaseException
            try:
                outcome = call()
            except BaseException as exc:  # handed to the caller, like to_thread does
                outcome = exc
            with progress.lock:
                if progress.abandoned:
                    return
                progress.outcomes.append(outcome)

    def hand_over(_: None) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(_settle, finished)

    _READERS.run(work, hand_over)
    try:
        while not finished.done():
            with progress.lock:
                left = progress.started + limit_s - time.monotonic()
                if left <= 0:
                    progress.abandoned = True
                    return list(progress.outcomes)
            await asyncio.wait([finished], timeout=left)
    except asyncio.CancelledError:
        with progress.lock:
            progress.abandoned = True
        raise
    return progress.outcomes


def _settle(finished: asyncio.Future[None]) -> None:
    if not finished.done():
        finished.set_result(None)
