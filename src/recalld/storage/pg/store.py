"""The store on PostgreSQL: the same `read(fn)` / `write(fn)` interface as the SQLite store.

A psycopg 3 async pool serves both: `read` borrows a connection and runs each of `fn`'s
queries read-only under the query time limit (`statement_timeout`), each in its own implicit
transaction sent with its settings in one round trip; as in a READ COMMITTED transaction (what
reads were before), each query sees the commits made before it. `write` runs `fn` in one
read-write transaction. Writes of one store are serialised by a lock, as on SQLite, so one
daemon's writes commit in order; writes of several daemons to the same database are made safe
by the schema (unique keys) and the writer's per-source advisory locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import logging
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool

from recalld.errors import QueryError, StoreError, StoreGoneError
from recalld.storage import contract
from recalld.storage.model_switch import ModelSwitch, shielded
from recalld.storage.pg import readers, schema
from recalld.storage.pg.access import PgReader, PgWriter
from recalld.storage.pg.handle import PgConn, Writer, register_vector
from recalld.storage.pg.repair import repair_store
from recalld.storage.pg.term_stats import TermStats
from recalld.storage.records import SPEC_KEY, model_mismatch
from recalld.storage.repair_report import RepairReport

logger = logging.getLogger(__name__)

T = TypeVar("T")

# The document-frequency cache of `Searcher` refreshes when `generation` moves. Other daemons'
# commits do not move it, so it also moves on its own every this many seconds.
GENERATION_PERIOD_S = 10.0


class StoreUrl(str):
    """A PostgreSQL store's `path`: reads as the URL without its password (for `status` and
    logs) and carries the full URL in `url` for `check`, which opens its own connection."""

    url: str

    def __new__(cls, url: str) -> StoreUrl:
        shown = super().__new__(cls, redact(url))
        shown.url = url
        return shown


def redact(url: str) -> str:
    """The URL without its password, for logs and `status`."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    if info.get("password"):
        info["password"] = "********"
    host = info.get("host", "")
    user = info.get("user", "")
    return f"postgresql://{user}@{host}/{info.get('dbname', '')}"


async def _prepare(
    conn: psycopg.AsyncConnection[Any],
    model_id: str,
    dimension: int,
    isolate: bool,
    vector_index: str,
    model_spec: str | None,
) -> dict[str, str]:
    """Migrate, then stamp or check the embedding model and the isolation mode."""
    await schema.migrate(conn)
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (schema.MIGRATION_LOCK,))
        cursor = await conn.execute("SELECT key, value FROM meta")
        stored = {str(k): str(v) for k, v in await cursor.fetchall()}
        if "model_id" not in stored:
            stamp = {
                "model_id": model_id,
                "dimension": str(dimension),
                "isolate_users": "1" if isolate else "0",
                "vector_index": vector_index,
            }
            if model_spec is not None:
                stamp[SPEC_KEY] = model_spec
            await conn.cursor().executemany(
                "INSERT INTO meta (key, value) VALUES (%s, %s)", list(stamp.items())
            )
            await schema.create_vector_table(conn, dimension, vector_index)
            if isolate:
                await schema.isolate_users(conn)
            stored.update(stamp)
        elif (
            model_spec is not None and SPEC_KEY not in stored and stored.get("isolate_users") != "1"
        ):
            # A store made before specs were recorded learns its own (as SQLite's do).
            if stored["model_id"] == model_id and int(stored["dimension"]) == dimension:
                await conn.execute(
                    "INSERT INTO meta (key, value) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING",
                    (SPEC_KEY, model_spec),
                )
    if stored["model_id"] != model_id or int(stored["dimension"]) != dimension:
        raise model_mismatch(redact(conn.info.dsn), stored, model_id, dimension)
    indexes = [schema.KEYWORD_INDEX]
    if stored.get("vector_index") == "hnsw":
        indexes.append(schema.HNSW_INDEX)
    for index in indexes:
        if not await schema.has_index(conn, index):
            # A bulk load whose process died before its end left the index dropped.
            logger.warning("building the missing index %s of %s", index.name, redact(conn.info.dsn))
            await schema.build_index(conn, index)
    return stored


def stored_meta(url: str) -> dict[str, str] | None:
    """The `meta` table of the database at `url`, or None when it cannot be read (no store
    there yet, or no server). Blocking; run in a thread."""
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
            if not conn.execute("SELECT to_regclass('meta') IS NOT NULL").fetchone()[0]:  # type: ignore[index]
                return None
            return {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta")}
    except psycopg.Error:
        return None


class PgStore(ModelSwitch):
    """The PostgreSQL store (`contract.Store`; see the module docstring), a peer of
    `storage.sqlite.store.SqliteStore`. pgvector's index does inside the database what the
    SQLite store's in-memory vector cascade does there.

    Attributes:
        path: The database URL without its password.
        url: The full URL.
        isolated: Whether rows are scoped to database roles (row-level security).
        identity: Who writes through this store.
    """

    backend = "postgresql"
    # Each route is its own round trip to the server: the keyword route runs beside the
    # embedding (`contract.Store.routes_together`).
    routes_together = False
    schema_version = schema.SCHEMA_VERSION
    # The server keeps the files: a full disk or a replaced file is its to report.
    disk_full = False
    gone: StoreGoneError | None = None

    def __init__(
        self,
        url: str,
        model_id: str,
        dimension: int,
        pool: AsyncConnectionPool[Any],
        query_timeout_ms: int,
        isolated: bool,
        identity: Writer,
    ) -> None:
        self.path = StoreUrl(url)
        self.url = url
        self.model_id = model_id
        self.dimension = dimension
        self.isolated = isolated
        self.identity = identity
        self._pool = pool
        self._write_lock = asyncio.Lock()
        self._timeout_ms = query_timeout_ms
        self._read_settings = readers.read_settings(query_timeout_ms)
        self._commits = 0
        self._bulk = False
        self._term_stats = TermStats(lambda: self.generation)
        self._init_model_switch()

    @property
    def generation(self) -> int:
        """Moves on every commit of this store and every `GENERATION_PERIOD_S` seconds."""
        return self._commits + int(time.monotonic() // GENERATION_PERIOD_S)

    @classmethod
    async def open_url(
        cls,
        url: str,
        *,
        model_id: str,
        dimension: int,
        readers: int = 4,
        query_timeout_ms: int = 5000,
        isolate_users: bool = False,
        vector_index: str = "hnsw",
        model_spec: str | None = None,
    ) -> PgStore:
        """Open (creating or migrating) the store in the database at `url`.

        Raises:
            SchemaTooNewError: The database comes from a newer recalld.
            ModelMismatchError: The database was embedded with another model.
            StoreError: The database cannot be reached or used.
        """
        if vector_index not in schema.VECTOR_INDEXES:
            raise StoreError(f"store.vector_index must be one of {schema.VECTOR_INDEXES}")
        try:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                stored = await _prepare(
                    conn, model_id, dimension, isolate_users, vector_index, model_spec
                )
                cursor = await conn.execute("SELECT current_user")
                row = await cursor.fetchone()
                role = str(row[0]) if row else ""
        except psycopg.Error as exc:
            raise StoreError(f"cannot open store {redact(url)}: {exc}") from exc
        isolated = stored.get("isolate_users") == "1"
        identity = Writer(
            scope=role if isolated else "", os_user=getpass.getuser(), host=socket.gethostname()
        )

        async def configure(conn: psycopg.AsyncConnection[Any]) -> None:
            await register_vector(conn)
            await conn.set_autocommit(True)

        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            url, min_size=1, max_size=max(2, readers + 1), configure=configure, open=False
        )
        try:
            await pool.open(wait=True, timeout=30)
        except Exception as exc:
            await pool.close()
            raise StoreError(f"cannot open store {redact(url)}: {exc}") from exc
        logger.info(
            "opened store %s (model %s, pool of %d, isolated %s)",
            redact(url),
            model_id,
            pool.max_size,
            isolated,
        )
        return cls(url, model_id, dimension, pool, query_timeout_ms, isolated, identity)

    async def close(self) -> None:
        """Close the pool (waiting for a running write to finish)."""
        async with self._write_lock:
            await self._pool.close()

    @contextlib.asynccontextmanager
    async def reading(self) -> AsyncIterator[contract.Reader]:
        """Borrow a reader whose queries run read-only, with the query time limit armed."""
        async with self.reading_pg() as conn:
            yield PgReader(conn)

    @contextlib.asynccontextmanager
    async def reading_pg(self) -> AsyncIterator[PgConn]:
        """Borrow a connection whose queries each run read-only under the query time limit."""
        async with self._pool.connection() as conn:
            try:
                # Each query carries its settings and runs in its own implicit transaction
                # (`readers.read_settings`): one round trip a query, no BEGIN or COMMIT (a
                # search makes several reads, each usually of one query).
                yield PgConn(
                    conn, self.identity, self.dimension, self._term_stats, read=self._read_settings
                )
            except psycopg.errors.QueryCanceled as exc:
                raise QueryError(
                    f"query took longer than {self._timeout_ms / 1000:g} s and was stopped; "
                    "narrow it or raise store.query_timeout_ms"
                ) from exc

    async def read(self, fn: Callable[[contract.Reader], Awaitable[T]]) -> T:
        """Run `fn(reader)`, its queries read-only (see the module docstring)."""
        async with self.reading() as reader:
            return await fn(reader)

    async def read_pg(self, fn: Callable[[PgConn], Awaitable[T]]) -> T:
        """`read`, with `fn` given the connection handle itself (migration from SQLite)."""
        async with self.reading_pg() as conn:
            return await fn(conn)

    async def write(
        self, fn: Callable[[contract.Writer], Awaitable[T]], *, counters_only: bool = False
    ) -> T:
        """Run `fn(writer)` inside one transaction; it commits when `fn` returns.

        A cancelled caller does not cut the transaction short: it runs on to its end in its
        own task (as on SQLite)."""
        return await self.write_pg(lambda conn: fn(PgWriter(conn)), counters_only=counters_only)

    async def write_pg(
        self, fn: Callable[[PgConn], Awaitable[T]], *, counters_only: bool = False
    ) -> T:
        """`write`, with `fn` given the connection handle itself (migration from SQLite)."""
        return await shielded(self._pg_transaction(fn, not counters_only))

    async def _pg_transaction(self, fn: Callable[[PgConn], Awaitable[T]], bump: bool) -> T:
        async with self._write_lock, self._pool.connection() as conn:
            async with conn.transaction():
                result = await fn(PgConn(conn, self.identity, self.dimension))
            if bump:
                self._commits += 1
            return result

    @contextlib.asynccontextmanager
    async def bulk_load(self) -> AsyncIterator[None]:
        """See `contract.Store.bulk_load`. On a store with no chunks (no vectors) yet, the
        keyword GIN index (the HNSW index) is dropped for the block and built over every row at
        its end, several times faster than keeping it up row by row; readers meanwhile scan
        (slower, same answers). The indexes are built even when the block fails; if the process
        dies inside it, the next `open_url` builds them. Nested blocks and isolated stores
        defer nothing."""
        if self._bulk or self.isolated:
            yield
            return
        self._bulk = True
        try:
            deferred = await shielded(self._defer_indexes())
            try:
                yield
            finally:
                if deferred:
                    await shielded(self._build_indexes(deferred))
        finally:
            self._bulk = False

    async def _defer_indexes(self) -> list[schema.Index]:
        deferred = []
        async with self._write_lock, self._pool.connection() as conn:
            for index in (schema.KEYWORD_INDEX, schema.HNSW_INDEX):
                try:
                    if await schema.defer_index(conn, index):
                        deferred.append(index)
                except psycopg.errors.InsufficientPrivilege:
                    pass  # another role owns the table: keep the index up row by row
        return deferred

    async def _build_indexes(self, indexes: list[schema.Index]) -> None:
        async with self._write_lock, self._pool.connection() as conn:
            for index in indexes:
                await schema.build_index(conn, index)

    async def check_vector_index(self) -> tuple[int, int] | None:
        """None: there is no in-memory vector index to check (pgvector's lives in the database)."""
        return None

    async def repair(self, embed: contract.Embed | None, failed: set[str]) -> RepairReport:
        """See `storage.pg.repair` (nothing is re-embedded: `embed` is not needed)."""
        return await repair_store(self, failed)

    async def check_files(self) -> None:
        """Nothing to check: the server owns the database files."""
