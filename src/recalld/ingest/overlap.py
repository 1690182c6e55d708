"""Overlapping ingest calls: the next files are read and chunked, and the last ones written,
while the model embeds.

`Ingestor.ingest_many` is one call per group of files (the group sets the model's batches),
and its stages take turns with other calls': one call embeds at a time (`Ingestor`'s model
lock), and calls given places in one `WriteOrder` write in the order of their places (so
document ids follow the files' order, as when the calls ran one after another). `InFlight`
keeps a few such calls running at once, so the model is not left idle while a call reads,
chunks or writes.

Only the writes of one overlapped run are ordered: other writes (a skipped file, an error, a
memory) take no place, so nothing a batch does before its own write can wait on a later one.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any, Generic, TypeVar

T = TypeVar("T")

# Calls in flight: one embedding, one reading and chunking the next files, one writing.
DEPTH = 3


class InFlight(Generic[T]):
    """Runs calls with at most `depth` at once; their results come back in the order the calls
    were made. Leaving the `async with` block cancels the calls still running (and waits for
    them), so nothing outlives a failure or a cancelled caller."""

    def __init__(self, depth: int = DEPTH) -> None:
        self.depth = depth
        self._running: deque[asyncio.Task[T]] = deque()

    async def __aenter__(self) -> InFlight[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        running, self._running = list(self._running), deque()
        for task in running:
            task.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)

    async def add(self, call: Coroutine[Any, Any, T]) -> list[T]:
        """Start `call`; when `depth` are running, wait for the oldest and return its result.

        Raises:
            Exception: What the oldest call raised.
        """
        self._running.append(asyncio.ensure_future(call))
        if len(self._running) < self.depth:
            return []
        return [await self._running.popleft()]

    async def drain(self) -> list[T]:
        """Wait for every call still running; their results in order."""
        done = []
        while self._running:
            done.append(await self._running[0])
            self._running.popleft()
        return done


class WriteOrder:
    """Concurrent calls write in the order they took their place (document ids follow the
    order files were given in, as when the calls ran one after another)."""

    def __init__(self) -> None:
        self._last: asyncio.Future[None] | None = None

    def place(self) -> Place:
        """Take the next place in line."""
        place = Place(self._last, asyncio.get_running_loop().create_future())
        self._last = place.done
        return place


class Place:
    """One call's place in a `WriteOrder`: `turn()` waits for the places before it; `leave()`
    (always, in a `finally`) lets the places after it go, once those before it have."""

    def __init__(self, before: asyncio.Future[None] | None, done: asyncio.Future[None]) -> None:
        self.before = before
        self.done = done

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """Wait for every earlier place to be left, then hold the line until the block ends."""
        if self.before is not None:
            # Shielded: a cancelled caller gives up its turn without cancelling the one before.
            await asyncio.shield(self.before)
        try:
            yield
        finally:
            self.leave()

    def leave(self) -> None:
        """Give up this place (done writing, or nothing to write)."""
        if self.before is None or self.before.done():
            self._resolve()
        else:
            self.before.add_done_callback(lambda _: self._resolve())

    def _resolve(self) -> None:
        if not self.done.done():
            self.done.set_result(None)
