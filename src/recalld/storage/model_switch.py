"""What every store does the same way: the model switch of a reindex, and writes that outlive a
cancelled caller."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")


class ModelSwitch:
    """A reindex swaps the model (`Writer.swap_model`): `model_version` counts the swaps and
    `switching` is set from just before the swap's statements (inside its transaction) until
    the process has switched its embedder, so a search or ingest that overlapped it knows to
    start again and a new one waits."""

    model_id: str
    dimension: int

    def _init_model_switch(self) -> None:
        self.model_version = 0
        self.switching = False
        self._switched = asyncio.Event()
        self._switched.set()

    def begin_switch(self) -> None:
        """Mark the model as changing (called inside the swap transaction, before COMMIT)."""
        self.switching = True
        self._switched.clear()

    def end_switch(self, model_id: str | None = None, dimension: int | None = None) -> None:
        """The swap committed (`model_id` and `dimension` given) or was abandoned (None)."""
        if model_id is not None and dimension is not None:
            self.model_id, self.dimension = model_id, dimension
            self.model_version += 1
        self.switching = False
        self._switched.set()

    def model_changed(self, since: int) -> bool:
        """Whether the model changed, or is changing, since `model_version` was `since`."""
        return self.switching or self.model_version != since

    async def model_settled(self) -> int:
        """Wait for a swap in progress to finish; returns the current `model_version`."""
        await self._switched.wait()
        return self.model_version


def _observe(task: asyncio.Future[Any]) -> None:
    # A write whose caller was cancelled has no one to read its error: log it instead.
    if not task.cancelled() and task.exception() is not None:
        logger.debug("a write finished after its caller was cancelled: %r", task.exception())


async def shielded(transaction: Coroutine[Any, Any, T]) -> T:
    """Run a write transaction in its own task: a cancelled caller does not cut it short, so
    it runs on to its COMMIT or ROLLBACK and the connection is never left inside it."""
    task = asyncio.ensure_future(transaction)
    task.add_done_callback(_observe)
    return await asyncio.shield(task)
