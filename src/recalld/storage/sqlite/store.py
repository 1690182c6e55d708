"""The store: one SQLite file, one writer connection, a pool of reader connections.

`SqliteStore.open` migrates the file, checks that it was embedded by the model in use, and opens the
connections through aiosqlite (each with its own thread, so SQLite never blocks the event
loop). Writes are serialised by one lock around the writer connection and each runs in a
single `BEGIN IMMEDIATE` transaction (datasette's write model); reads take a connection from
the pool and never wait for the writer (WAL).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import aiosqlite

from recalld.errors import QueryError, StoreError, StoreGoneError
from recalld.storage import records
from recalld.storage.contract import Embed, Reader, Writer
from recalld.storage.model_switch import ModelSwitch, shielded
from recalld.storage.records import model_mismatch
from recalld.storage.repair_report import RepairReport
from recalld.storage.sqlite import schema, vectors
from recalld.storage.sqlite.access import SqliteReader, SqliteWriter
from recalld.storage.sqlite.connection import (
    DatabaseError,
    OperationalError,
    connect,
    damaged_error,
    is_damaged,
)
from recalld.storage.sqlite.guard import StoreFiles, disk_full_error, is_disk_full
from recalld.storage.sqlite.keywords import KeywordIndex
from recalld.storage.sqlite.repair import repair_store

logger = logging.getLogger(__name__)

T = TypeVar("T")


def _prepare(path: Path, model_id: str, dimension: int, spec: str | None) -> None:
    """Migrate the file and stamp or check the embedding model (blocking; run in a thread)."""
    conn = connect(path)  # creates the folder 0700 and the file 0600 when they are new
    try:
        schema.migrate(conn)
        stored = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        if "model_id" not in stored:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO meta (key, value) VALUES ('model_id', ?)", (model_id,))
            conn.execute("INSERT INTO meta (key, value) VALUES ('dimension', ?)", (str(dimension),))
            schema.create_vector_table(conn, dimension)
            _record_spec(conn, spec)
            conn.execute("COMMIT")
        elif stored["model_id"] != model_id or int(stored["dimension"]) != dimension:
            raise model_mismatch(path, stored, model_id, dimension)
        elif records.SPEC_KEY not in stored and spec is not None:
            # Stores from before m003 learn the spec of the model that matches them.
            conn.execute("BEGIN IMMEDIATE")
            _record_spec(conn, spec)
            conn.execute("COMMIT")
    except DatabaseError as exc:
        if is_damaged(exc):
            raise damaged_error(path, exc) from exc
        raise StoreError(f"cannot open store {path}: {exc}") from exc
    finally:
        conn.close()


def _record_spec(conn: sqlite3.Connection, spec: str | None) -> None:
    if spec is not None:
        conn.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (records.SPEC_KEY, spec)
        )


def stored_meta(path: Path | str) -> dict[str, str] | None:
    """The `meta` table of the store at `path` (model, dimension, spec, reindex state), or
    None when there is no store yet. Blocking; run in a thread."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        conn = connect(path, readonly=True)
    except DatabaseError:
        return None
    try:
        return {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta")}
    except DatabaseError:
        return None  # created and never migrated
    finally:
        conn.close()


async def _open_connection(path: Path, *, readonly: bool) -> aiosqlite.Connection:
    # aiosqlite's own connect() would use the stdlib module, which may not load extensions.
    conn = aiosqlite.Connection(lambda: connect(path, readonly=readonly), 64)
    return await conn


class SqliteStore(ModelSwitch):
    """The SQLite store (`contract.Store`). Open with `await SqliteStore.open(...)` (or
    `registry.open_store`); close with `await store.close()`.

    Attributes:
        path: The SQLite file.
        model_id: The embedding model the store's vectors come from.
        dimension: Their length.
        backend: "sqlite" (`storage.pg.store.PgStore` is the PostgreSQL peer).
        schema_version: The newest schema of this backend (each has its own migrations),
            which every open store is migrated to.
    """

    backend = "sqlite"
    schema_version = schema.SCHEMA_VERSION
    # Write faults (storage/sqlite/guard.py): the last write found the disk full (cleared by
    # the next that succeeds); a file of the store changed under us (refuses every write from
    # then on).
    disk_full = False
    gone: StoreGoneError | None = None
    files: StoreFiles | None = None

    def __init__(
        self,
        path: Path,
        model_id: str,
        dimension: int,
        writer: aiosqlite.Connection,
        readers: list[aiosqlite.Connection],
        query_timeout_ms: int,
    ) -> None:
        self.path = path
        self.model_id = model_id
        self.dimension = dimension
        self._writer = writer
        self._write_lock = asyncio.Lock()
        # Last in, first out: a search reuses the connections that just ran (each keeps its own
        # page cache and file mapping warm); FIFO rotated every read through all of them, which
        # made SciFact searches slower: LIFO p50 0.79x, 0.95x and 0.84x of FIFO in three runs.
        self._readers: asyncio.Queue[aiosqlite.Connection] = asyncio.LifoQueue()
        self._all_readers = readers
        for reader in readers:
            self._readers.put_nowait(reader)
        self._timeout = query_timeout_ms / 1000
        self._deadlines: dict[int, float] = {}
        # Bumped on every commit, so readers' caches (IDF) know when to refresh.
        self.generation = 0
        # The vector cascade's in-memory mirror: readers search it, the writer stages its
        # changes on it, and write() applies them after each COMMIT.
        self.vectors = vectors.VectorIndex(dimension, self._write_lock)
        self.vectors.on_foreign = self._foreign_write
        self.vectors.untimed = self._untimed
        self.vectors.borrow = self.reading_conn
        # BM25 from memory, mirrored from FTS5 (storage/sqlite/keywords.py); readers only.
        self.keywords = KeywordIndex(path if path.is_file() else None)
        self._init_model_switch()

    @classmethod
    async def open(
        cls,
        path: Path | str,
        *,
        model_id: str,
        dimension: int,
        readers: int = 4,
        query_timeout_ms: int = 5000,
        model_spec: str | None = None,
        isolate_users: bool = False,
        vector_index: str = "hnsw",
    ) -> SqliteStore:
        """Open (creating or migrating) the store at `path`.

        `model_spec` (as `embed.model` names the model) is recorded with a new store, so a
        daemon whose config names no model can find it again (`registry.stored_model`).
        `isolate_users` and `vector_index` are PostgreSQL's; they do not apply here.

        Raises:
            SchemaTooNewError: The file comes from a newer recalld.
            ModelMismatchError: The file was embedded with another model.
            StoreError: The file cannot be opened as a store.
        """
        path = Path(path)
        await asyncio.to_thread(_prepare, path, model_id, dimension, model_spec)
        writer = await _open_connection(path, readonly=False)
        pool = [await _open_connection(path, readonly=True) for _ in range(max(1, readers))]
        store = cls(path, model_id, dimension, writer, pool, query_timeout_ms)
        store.files = await asyncio.to_thread(StoreFiles.record, path)
        for reader in pool:
            await reader.set_progress_handler(store._make_timeout(id(reader)), 1000)
        logger.info("opened store %s (model %s, %d readers)", path, model_id, len(pool))
        return store

    def _make_timeout(self, key: int) -> Callable[[], int]:
        # datasette's sqlite_timelimit: SQLite calls this every N VM steps; non-zero aborts.
        def check() -> int:
            deadline = self._deadlines.get(key)
            return 1 if deadline is not None and time.monotonic() > deadline else 0

        return check

    @contextlib.asynccontextmanager
    async def _untimed(self, conn: aiosqlite.Connection) -> AsyncIterator[None]:
        """Lift a borrowed reader's time limit for a while (the vector index's one-off load,
        which reads every row and is not the query's own work); the query then gets the
        time it had left."""
        key = id(conn)
        deadline = self._deadlines.pop(key, None)
        started = time.monotonic()
        try:
            yield
        finally:
            if deadline is not None:
                self._deadlines[key] = deadline + (time.monotonic() - started)

    @contextlib.asynccontextmanager
    async def bulk_load(self) -> AsyncIterator[None]:
        """Nothing to defer: FTS5 and the vector cascade keep up with row-by-row writes."""
        yield

    @property
    def routes_together(self) -> bool:
        """Both routes in one trip to a reader's thread (storage/sqlite/routes.py) while the
        cascade's Hamming stage runs in one thread; above that the keyword pass overlaps its
        two halves, which release the GIL (at 1M, one trip searched 1.5x slower)."""
        return not self.vectors.splits_hamming

    async def close(self) -> None:
        """Close every connection (waiting for a running write to finish)."""
        await self.vectors.stop()
        async with self._write_lock:
            await self._writer.close()
        for reader in self._all_readers:
            await reader.close()
        await asyncio.to_thread(self.keywords.close)

    @contextlib.asynccontextmanager
    async def reading(self) -> AsyncIterator[Reader]:
        """Borrow a reader, with the query time limit armed."""
        async with self.reading_conn() as conn:
            yield SqliteReader(conn, self.vectors, self.keywords)

    @contextlib.asynccontextmanager
    async def reading_conn(self) -> AsyncIterator[aiosqlite.Connection]:
        """Borrow a reader connection itself (SQLite's own checks and repairs)."""
        conn = await self._readers.get()
        self._deadlines[id(conn)] = time.monotonic() + self._timeout
        try:
            yield conn
        except OperationalError as exc:
            if "interrupted" in str(exc):
                raise QueryError(
                    f"query took longer than {self._timeout:g} s and was stopped; narrow it "
                    "or raise store.query_timeout_ms"
                ) from exc
            raise
        finally:
            self._deadlines.pop(id(conn), None)
            self._readers.put_nowait(conn)

    async def read(self, fn: Callable[[Reader], Awaitable[T]]) -> T:
        """Run `fn(reader)` on a reader connection."""
        async with self.reading() as conn:
            return await fn(conn)

    async def read_conn(self, fn: Callable[[aiosqlite.Connection], Awaitable[T]]) -> T:
        """`read`, with `fn` given the reader connection itself (SQLite's own checks)."""
        async with self.reading_conn() as conn:
            return await fn(conn)

    async def write(
        self, fn: Callable[[Writer], Awaitable[T]], *, counters_only: bool = False
    ) -> T:
        """Run `fn(writer)` on the writer connection inside one `BEGIN IMMEDIATE` transaction.

        `counters_only`: the write changes only use counters (retrieval, access), so the
        commit leaves `generation`, and with it the searcher's term-frequency cache, alone.

        A cancelled caller does not cut the transaction short: it runs on to its COMMIT or
        ROLLBACK in its own task, so the writer connection is never left inside a transaction
        (which would make every later write fail).
        """
        return await self.write_conn(
            lambda conn: fn(SqliteWriter(conn, self.vectors)), counters_only=counters_only
        )

    async def write_conn(
        self, fn: Callable[[aiosqlite.Connection], Awaitable[T]], *, counters_only: bool = False
    ) -> T:
        """`write`, with `fn` given the writer connection itself (SQLite's own repairs)."""
        return await shielded(self._transaction(fn, not counters_only))

    async def _transaction(
        self, fn: Callable[[aiosqlite.Connection], Awaitable[T]], bump: bool = True
    ) -> T:
        async with self._write_lock:
            if self.gone is not None:
                raise self.gone
            try:
                result = await self._commit(fn, bump)
            except OperationalError as exc:
                if not is_disk_full(exc):
                    raise
                if not self.disk_full:
                    logger.error("the disk holding %s is full; refusing writes: %s", self.path, exc)
                self.disk_full = True
                raise disk_full_error(self.path, exc) from exc
            if self.disk_full:
                logger.info("the disk holding %s has space again; writing", self.path)
                self.disk_full = False
            # Acknowledge only a commit that landed in the files a restart will read.
            await self._check_files()
            return result

    async def _commit(self, fn: Callable[[aiosqlite.Connection], Awaitable[T]], bump: bool) -> T:
        await self._writer.execute("BEGIN IMMEDIATE")
        try:
            result = await fn(self._writer)
            if self.vectors.staged:  # in the same transaction: other processes see it
                self.vectors.expect(await vectors.bump_changes(self._writer))
            await self._writer.execute("COMMIT")
        except BaseException:
            self.vectors.rollback()
            # A failed COMMIT (a full disk) can leave the transaction open; end it, or every
            # later BEGIN fails.
            if self._writer.in_transaction:
                await self._writer.execute("ROLLBACK")
            raise
        self.vectors.commit()
        if bump:
            self.generation += 1
        return result

    def _foreign_write(self) -> None:
        # Another process wrote: caches that follow `generation` (IDF) refresh too.
        self.generation += 1

    async def check_vector_index(self) -> tuple[int, int] | None:
        """`(missing, extra)` rows of the in-memory vector index against the store, or None
        when it is not loaded; one that differs is dropped and reloads on the next search."""
        async with self.reading_conn() as conn:
            return await self.vectors.verify(conn)

    async def repair(self, embed: Embed | None, failed: set[str]) -> RepairReport:
        """See `storage.sqlite.repair`."""
        return await repair_store(self, embed, failed)

    async def check_files(self) -> None:
        """Check that the store's files are still the ones open (the daemon's watchdog calls
        this every few seconds, so a deleted `-wal` is noticed without waiting for a write).

        Raises:
            StoreGoneError: One was deleted or replaced; every later write is refused too.
        """
        async with self._write_lock:
            await self._check_files()

    async def _check_files(self) -> None:
        if self.files is None or self.gone is not None:
            if self.gone is not None:
                raise self.gone
            return
        changed = await asyncio.to_thread(self.files.changed)
        if not changed:
            return
        # Save what was already acknowledged: copy the WAL, still open though unlinked, into
        # the database file while it is still there.
        salvaged = False
        if self.path not in changed:
            try:
                row = await (await self._writer.execute("PRAGMA wal_checkpoint(FULL)")).fetchone()
                salvaged = row is not None and row[0] == 0 and row[1] == row[2]
            except DatabaseError as exc:
                logger.error("could not save the WAL into %s: %s", self.path, exc)
        self.gone = self.files.gone_error(changed, salvaged)
        logger.error("%s", self.gone.message)
        raise self.gone
