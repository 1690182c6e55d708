"""Several statements in one trip to an aiosqlite connection's thread.

Each aiosqlite call is a trip from the event loop to the connection's thread and back (~35 us
of CPU on this 2-core machine, both ends counted): writing a document took ~13 of them,
~0.45 of the ~5 CPU s that ingesting 1,000 SciFact abstracts spent outside the model. Work
that needs no await between its statements runs in one trip instead, on the connection's own
thread, as aiosqlite runs each statement.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiosqlite

T = TypeVar("T")

# A DB-API connection of the module `connection.connect` picked (sqlite3 or sqlean).
RawConnection = Any


async def on_thread(conn: aiosqlite.Connection, work: Callable[[RawConnection], T]) -> T:
    """`work(raw)` on `conn`'s thread, `raw` the connection aiosqlite wraps; its result."""
    # aiosqlite offers no public call for this: `_execute` queues a function for the thread
    # that owns the connection (as each of its statements is queued), `_conn` is that
    # connection. tests/storage/test_on_thread.py checks both.
    queue: Callable[..., Awaitable[T]] = conn._execute
    return await queue(work, conn._conn)
