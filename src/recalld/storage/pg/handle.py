"""The connection handle a PostgreSQL store gives to `readers` / `writer`, and the vector type.

`PgConn` wraps one pooled psycopg connection: inside the transaction `Store.write` opened, or
for `Store.read`, where each query is its own read-only transaction (`readers.read_settings`;
`storage.pg.access.PgReader` runs the contract's operations on it). It carries who is
writing (the database role's scope, the OS user and the host), which the writer records on every
document. `execute` / `fetchall` accept SQLite's `?` placeholders too, so ad-hoc SQL written
for either backend (tests, `Reader.fetchall`) runs on both.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import psycopg
from psycopg.adapt import Dumper, Loader
from psycopg.pq import Format
from psycopg.types import TypeInfo

if TYPE_CHECKING:
    from recalld.storage.pg.term_stats import TermStats


@dataclass(frozen=True, slots=True)
class Writer:
    """Who writes through a store: recorded on each document (multi-daemon stores).

    Attributes:
        scope: The row scope: the database role when the store isolates users, else ''.
        os_user: `getpass.getuser()` of the daemon.
        host: `socket.gethostname()` of the daemon.
    """

    scope: str
    os_user: str
    host: str


def _translate(sql: str) -> str:
    # SQLite's qmark style to psycopg's format style; a literal % must be doubled first.
    return sql.replace("%", "%%").replace("?", "%s")


class PgConn:
    """One pooled connection inside a read or write transaction (see module docstring)."""

    def __init__(
        self,
        conn: psycopg.AsyncConnection[Any],
        writer: Writer,
        dimension: int,
        term_stats: TermStats | None = None,
        *,
        read: bytes | None = None,
    ):
        self.conn = conn
        self.writer = writer
        self.dimension = dimension
        # The store's cache of keyword document frequencies (reads only; None: count afresh).
        self.term_stats = term_stats
        # A read's settings statement (`readers.read_settings`), sent with each of its queries;
        # None in a write, which runs in the transaction `Store.write` opened.
        self._read = read
        # Whether each query runs with the HNSW scan settings (`readers.read_settings`).
        self.hnsw_set = read is not None

    async def _execute(
        self,
        cursor: psycopg.AsyncCursor[Any],
        sql: str,
        params: Sequence[Any] | None,
        settings: Mapping[str, str] | None,
    ) -> None:
        """`cursor.execute`, preceded in a read by its settings statement and in either by
        `settings` (transaction-local, `set_config`), all in one round trip (psycopg's
        pipeline mode: in a read they share one implicit transaction with the query)."""
        if self._read is None and not settings:
            await cursor.execute(sql, params)
            return
        async with self.conn.pipeline():
            if self._read is not None:
                await self.conn.execute(self._read)
            if settings:
                calls = ", ".join(["set_config(%s, %s, true)"] * len(settings))
                await self.conn.execute(
                    f"SELECT {calls}", [v for item in settings.items() for v in item]
                )
            await cursor.execute(sql, params)

    def _writing(self, what: str) -> None:
        if self._read is not None:
            raise psycopg.ProgrammingError(f"{what} is for writes; this connection reads")

    async def fetch(
        self,
        sql: str,
        params: Sequence[Any] | None = None,
        *,
        settings: Mapping[str, str] | None = None,
    ) -> list[Any]:
        """Run a `%s`-style query and return every row as a tuple (`settings`: server
        settings for this query only)."""
        async with self.conn.cursor() as cursor:
            await self._execute(cursor, sql, params, settings)
            return list(await cursor.fetchall()) if cursor.description else []

    async def fetch_binary(self, sql: str, params: Sequence[Any] | None = None) -> list[Any]:
        """`fetch` with results in binary: `halfvec` columns arrive as float32 numpy vectors
        (`VectorLoader`) instead of text to parse."""
        async with self.conn.cursor(binary=True) as cursor:
            await self._execute(cursor, sql, params, None)
            return list(await cursor.fetchall())

    async def run(self, sql: str, params: Sequence[Any] | None = None) -> int:
        """Run a `%s`-style statement; returns the affected row count."""
        async with self.conn.cursor() as cursor:
            await self._execute(cursor, sql, params, None)
            return cursor.rowcount

    async def run_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run a `%s`-style statement once per row (psycopg pipelines them)."""
        rows = list(rows)
        if rows:
            self._writing("run_many")
            async with self.conn.cursor() as cursor:
                await cursor.executemany(sql, rows)

    async def copy_rows(
        self,
        table: str,
        columns: Sequence[str],
        rows: Iterable[Sequence[Any]],
        binary_types: Sequence[str] | None = None,
    ) -> None:
        """`COPY table (columns) FROM STDIN`: one round trip for many rows, without a statement
        per row. With `binary_types` (one type name per column) the rows go in binary, which
        sends `halfvec` values as packed float16s instead of formatted text. Stores with
        row-level security get one `INSERT` per row instead (pipelined)."""
        rows = list(rows)
        if not rows:
            return
        if self.writer.scope:
            # An isolated store (row-level security), where PostgreSQL refuses COPY.
            names, marks = ", ".join(columns), ", ".join(["%s"] * len(columns))
            await self.run_many(f"INSERT INTO {table} ({names}) VALUES ({marks})", rows)
            return
        self._writing("copy_rows")
        sql = f"COPY {table} ({', '.join(columns)}) FROM STDIN"
        async with self.conn.cursor() as cursor:
            async with cursor.copy(sql + (" (FORMAT BINARY)" if binary_types else "")) as copy:
                if binary_types:
                    copy.set_types(list(binary_types))
                for row in rows:
                    await copy.write_row(row)

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run a `?`-style statement (aiosqlite's spelling)."""
        if not params:  # without parameters psycopg sends the text as it is
            return await self.run(sql)
        return await self.run(_translate(sql), list(params))

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Run a `?`-style query and return every row."""
        if not params:
            return await self.fetch(sql)
        return await self.fetch(_translate(sql), list(params))


class VectorDumper(Dumper):
    """numpy vectors to pgvector's binary `halfvec` (int16 dim, int16 0, big-endian float16s),
    several times cheaper than formatting the text form for bulk ingest."""

    format = Format.BINARY

    def dump(self, obj: Any) -> bytes:
        array = np.asarray(obj, dtype=">f2").reshape(-1)
        return struct.pack(">HH", array.shape[0], 0) + array.tobytes()


class VectorLoader(Loader):
    """pgvector's binary `halfvec` (see `VectorDumper`) to a float32 numpy vector: the same
    values `embedding::real[]` gives, without formatting and parsing them as text."""

    format = Format.BINARY

    def load(self, data: Any) -> np.ndarray[Any, np.dtype[np.float32]]:
        (dimension,) = struct.unpack_from(">H", data)
        return np.frombuffer(data, dtype=">f2", count=dimension, offset=4).astype(np.float32)


async def register_vector(conn: psycopg.AsyncConnection[Any]) -> None:
    """Teach a connection to send numpy arrays as `halfvec` values."""
    info = await TypeInfo.fetch(conn, "halfvec")
    if info is None:
        raise psycopg.ProgrammingError("the vector extension is not installed in this database")
    info.register(conn)  # so binary COPY can name the type (`PgConn.copy_rows`)
    dumper = type("BoundVectorDumper", (VectorDumper,), {"oid": info.oid})
    conn.adapters.register_dumper(np.ndarray, dumper)
    conn.adapters.register_loader(info.oid, VectorLoader)
