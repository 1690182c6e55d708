"""Which backend a connection belongs to, and the one place reads and writes are routed by it.

Layers above storage call `readers.X(conn, ...)` / `writer.Y(conn, ...)` with whatever
`Store.read` / `Store.write` handed them. On SQLite that is an aiosqlite connection and the
functions in `readers.py` / `writer.py` run as written; on PostgreSQL it is a
`storage.pg.handle.PgConn`, and `@routed` sends the call to the function of the same name in
`storage.pg.readers` / `storage.pg.writer`. The PostgreSQL modules are imported only when a
PostgreSQL store is in use, so psycopg stays an optional dependency.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

POSTGRES = "postgresql"


def is_postgres(conn: Any) -> bool:
    """True for a PostgreSQL handle (`PgConn` sets `backend`)."""
    return getattr(conn, "backend", None) == POSTGRES


def is_url(location: object) -> bool:
    """True when a store location names a PostgreSQL database rather than a SQLite file."""
    return isinstance(location, str) and location.startswith(("postgresql://", "postgres://"))


def routed(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """Run the PostgreSQL twin of `fn` (same module name under `storage.pg`) on a PgConn."""
    module = fn.__module__.rsplit(".", 1)[-1]
    name = fn.__name__

    @functools.wraps(fn)
    async def run(*args: P.args, **kwargs: P.kwargs) -> T:
        conn = args[0] if args else kwargs.get("conn")
        if is_postgres(conn):
            twin: Callable[P, Awaitable[T]] = getattr(
                importlib.import_module(f"recalld.storage.pg.{module}"), name
            )
            return await twin(*args, **kwargs)
        return await fn(*args, **kwargs)

    return run
