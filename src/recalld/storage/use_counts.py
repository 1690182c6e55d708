"""Use counters (retrievals, accesses) gathered and written together, at most once a second.

Each search used to write its hits' retrieval counts in a transaction of its own, right after
it answered. On two cores that write ran beside the next search, and its commit makes every
reader connection drop its page cache at its next read (WAL): back to back on SciFact, the
in-process search took 7.9 / 9.4 ms without the writes against 11.8 / 10.6 ms with them (a /tmp
profile, the two alternating twice). Now a search only notes its ids here; one transaction
writes everything noted within `delay_s`, and closing writes what is left. The counts stay
exact (an id noted twice is counted twice); `last_retrieved_at` is the write's time, at most
`delay_s` late. A process killed meanwhile loses those counts, never more.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

from recalld.storage.contract import Store, Writer

logger = logging.getLogger(__name__)

DELAY_S = 1.0


class UseCounts:
    """Retrievals and accesses noted by `note`, written to `store` in one transaction after
    `delay_s` (counters only: the store's generation, and so every search cache, stays)."""

    def __init__(self, store: Store, delay_s: float = DELAY_S) -> None:
        self.store = store
        self.delay_s = delay_s
        self._pending: dict[bool, list[int]] = {True: [], False: []}
        self._task: asyncio.Task[None] | None = None
        self._sleeping = False

    def note(self, chunk_ids: Sequence[int], *, retrieval: bool) -> None:
        """Count `chunk_ids` as retrieved (returned by a search) or accessed (read by id)."""
        if not chunk_ids:
            return
        self._pending[retrieval].extend(chunk_ids)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._later())

    async def _later(self) -> None:
        self._sleeping = True
        try:
            await asyncio.sleep(self.delay_s)
        finally:
            self._sleeping = False
        try:
            await self._flush_or_warn()
        finally:
            self._task = None
            if self._pending[True] or self._pending[False]:  # noted during the write
                self._task = asyncio.get_running_loop().create_task(self._later())

    async def _flush_or_warn(self) -> None:
        try:
            await self.flush()
        except Exception as exc:  # nothing waits for the counts: say so, go on
            logger.warning("could not write use counts: %s", exc)

    async def flush(self) -> None:
        """Write what is noted now, in one transaction."""
        retrieved, accessed = self._pending[True], self._pending[False]
        if not (retrieved or accessed):
            return
        self._pending = {True: [], False: []}

        async def write(conn: Writer) -> None:
            for ids, retrieval in ((retrieved, True), (accessed, False)):
                if ids:
                    await conn.count_use(ids, retrieval=retrieval)

        await self.store.write(write, counters_only=True)

    async def close(self) -> None:
        """Write what is noted now: a waiting write goes at once, one under way is awaited
        (with the wait it may start for notes made meanwhile)."""
        while (task := self._task) is not None:
            if self._sleeping:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            if self._task is task:
                self._task = None
        await self._flush_or_warn()
