"""Vector search at memory speed: exact from float copies in memory for small stores, and a
cascade of bit codes in memory with exact rescoring in SQLite that holds at a million chunks.

sqlite-vec 0.1 has no ANN index: its exact KNN reads every vector, ~50-90 ms per query at
100k x 384 on a 2-core laptop, growing linearly (issue 7), and ~6-13 ms at 14k (issue 20).
Below `Tuning.exact_below` live chunks the mirror also holds every vector as float32 (1,536
bytes a 384-d chunk, so at most ~38 MB: the copies are dropped above 1.25 x `exact_below`) and
answers exactly with one matrix-vector product (~1 ms at 14k). Above it, `Reader.knn` runs
this cascade:

1. **Hamming** distance between the query's sign bits and every chunk's, held row-major in
   memory (48 bytes a 384-d chunk), by simsimd's popcount kernels in 64k-row blocks, two
   threads above 200k rows (~7 ms per million 384-d chunks on 2 idle cores).
2. **Int8 score**: the query, quantised to int8, against each survivor's int8 copy (one byte
   a dimension and a float32 scale, held in memory: 388 bytes a 384-d chunk), by simsimd's
   int8 dot product (~2.5 ms for 30k survivors with their gather; above 8,192 survivors in two
   halves, one on the pool's thread); it ranks within ~1e-3 of exact cosine.
3. **Exact** cosine distance in SQLite for the best few dozen of those, from `vector_floats`, a
   plain table whose rows are cheap to fetch by id (vec0 point lookups cost ~0.1 ms a row).

Until the background fill gives a row its int8 copy (the seconds after a big store's load),
survivors without one are narrowed by two bit stages instead, from the codes alone: the float
query against their +-1 signs (per-byte lookup tables; on MiniLM vectors ~4x fewer candidates
than Hamming for the same recall), then against two bits a dimension (sign and a magnitude
bit, four levels; ~4x fewer again), and the best of those go to the exact stage.

Consistency: `vector_codes` and `vector_floats` are written by `insert` / `delete` on the writer
connection, inside the caller's transaction. The in-memory mirror (`VectorIndex`) is loaded
lazily under the store's write lock, so no commit can slip between the snapshot it reads and
the changes it applies; the writer's changes are staged on the index and applied by the store
after COMMIT (dropped on ROLLBACK). A search holds references to the arrays it started with:
appends go past its `size` and compaction builds new arrays, so a concurrent write never
changes what a running search reads, and the final SQLite step only returns rows that exist
in the reader's snapshot.

Other processes (the in-process `recalld.api.Memory` while the daemon runs) write the same
file. Every commit that changes vectors also bumps a counter in `meta` (`CHANGES_KEY`), in the
same transaction; the mirror remembers the value it reflects. A commit of this process that
finds the counter moved by more than its own step, or a search that finds it ahead, means
another process wrote vectors: the mirror is dropped and reloads whole on the next search.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import aiosqlite
import numpy as np
import numpy.typing as npt
from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

from recalld.storage.sqlite import kernels
from recalld.storage.sqlite.on_thread import RawConnection, on_thread
from recalld.storage.sqlite.segmented import SegmentedRows

logger = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float32]

M002_SQL = """
CREATE TABLE vector_codes (
    chunk_id INTEGER PRIMARY KEY,
    code BLOB NOT NULL,
    kind TEXT NOT NULL,
    granularity TEXT NOT NULL
);
CREATE TABLE vector_floats (
    chunk_id INTEGER PRIMARY KEY,
    embedding BLOB NOT NULL
);
"""

# Commits that changed vectors, by any process (see the module docstring).
CHANGES_KEY = "vector_changes"
_BUMP_CHANGES = (
    "INSERT INTO meta (key, value) VALUES (?, '1') ON CONFLICT (key) DO UPDATE "
    "SET value = CAST(value AS INTEGER) + 1 RETURNING CAST(value AS INTEGER)"
)

_BYTE_BITS = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little")
_LOAD_BATCH = 50_000
# The mirror's load reads float copies (1.5 KB a 384-d row) to quantise them: smaller batches
# keep its transient rows, joined blob and temporaries to ~40 MB instead of ~300 MB.
_MIRROR_BATCH = 8_192


@dataclass(frozen=True, slots=True)
class Tuning:
    """How many candidates each stage keeps (chosen with `python -m bench scale`).

    Each stage keeps max(min, per_k x k, fraction x chunks). The fractions were calibrated on
    all-MiniLM-L6-v2 vectors of SciFact, so recall holds even if the density of near
    neighbours grows with the store (the pessimistic case); see the README's Benchmarks.

    Attributes:
        exact_below: Stores with fewer live chunks are searched exactly, from float copies
            held in memory (loaded with the mirror; kept up to 1.25 x this, then dropped).
        exact_in_memory: False: small stores use sqlite-vec's exact KNN instead (the
            baseline benchmarks and tests compare against).
        stage1_fraction, stage1_min: Hamming distance on the sign bits; every survivor
            with an int8 copy is scored on it.
        stage2_fraction, stage2_min: Survivors without an int8 copy yet (the background
            fill): the float query against their sign bits.
        stage3_fraction, stage3_min: Then against two bits a dimension (sign and
            magnitude); these go to the exact stage.
        per_k: Floor for stages 2 and 3, per result asked for.
        final_per_k, final_min: The best by int8 score that are rescored exactly in SQLite.
    """

    exact_below: int = 20_000
    exact_in_memory: bool = True
    stage1_fraction: float = 0.03
    stage1_min: int = 2_000
    stage2_fraction: float = 0.01
    stage2_min: int = 500
    stage3_fraction: float = 0.0025
    stage3_min: int = 200
    per_k: int = 4
    final_per_k: int = 2
    final_min: int = 32


def code_bytes(dimension: int) -> int:
    """Bytes per code: a sign bit and a magnitude bit per dimension, each plane padded to
    whole 64-bit words."""
    return (dimension + 63) // 64 * 16


def encode(vectors: npt.NDArray[np.floating[Any]], dimension: int) -> npt.NDArray[np.uint8]:
    """Two bit planes per row, packed little-endian (bit b of byte j is dimension 8j + b).

    The first plane is the sign (as sqlite-vec's `vec_quantize_binary`); the second says
    whether |x| is above the median magnitude of a random unit vector's coordinates
    (0.674 / sqrt(d)), which turns each coordinate into one of four levels for stage 3.
    """
    matrix = np.atleast_2d(np.asarray(vectors, dtype=np.float32))[:, :dimension]
    width = (dimension + 63) // 64 * 64
    planes = np.zeros((matrix.shape[0], 2, width), dtype=bool)
    planes[:, 0, :dimension] = matrix > 0
    planes[:, 1, :dimension] = np.abs(matrix) > 0.674 / np.sqrt(dimension)
    return np.packbits(planes.reshape(matrix.shape[0], -1), axis=1, bitorder="little")


def quantize(
    vectors: npt.NDArray[np.floating[Any]], dimension: int
) -> tuple[npt.NDArray[np.int8], FloatArray]:
    """Int8 copies and their scales: row i is about `scales[i] * codes[i]` (each row scaled
    by its own largest coordinate, so a zero vector stays zero)."""
    matrix = np.atleast_2d(np.asarray(vectors, dtype=np.float32))[:, :dimension]
    peak = np.abs(matrix).max(axis=1) if matrix.shape[1] else np.zeros(len(matrix), np.float32)
    scales = np.where(peak > 0, peak / 127, 1).astype(np.float32)
    codes = np.rint(matrix / scales[:, None]).astype(np.int8)
    return codes, scales


class _Arrays:
    """One generation of the mirror's arrays; a search keeps the object it started with."""

    __slots__ = (
        "alive",
        "floats",
        "grans",
        "ids",
        "int8",
        "kinds",
        "magnitudes",
        "scales",
        "signs",
        "size",
    )

    def __init__(
        self,
        words: int,
        capacity: int,
        dimension: int,
        floats: bool,
        int8: SegmentedRows | None = None,
    ) -> None:
        # The two bit planes of each code, row-major: simsimd's Hamming kernel reads a row's
        # sign words as one contiguous run. The magnitudes serve only rows without an int8 copy.
        self.signs = np.zeros((capacity, words), dtype=np.uint64)
        self.magnitudes = np.zeros((capacity, words), dtype=np.uint64)
        # Row-major int8 copies for the cascade's last in-memory stage, in segments that a
        # grown generation shares (storage/sqlite/segmented.py).
        self.int8 = int8 if int8 is not None else SegmentedRows(capacity, dimension)
        self.scales = np.zeros(capacity, dtype=np.float32)
        self.ids = np.zeros(capacity, dtype=np.int64)
        self.kinds = np.zeros(capacity, dtype=np.uint8)
        self.grans = np.zeros(capacity, dtype=np.uint8)
        self.alive = np.zeros(capacity, dtype=bool)
        # Row-major float copies for the exact in-memory search of small stores (None: big).
        self.floats: FloatArray | None = (
            np.zeros((capacity, dimension), dtype=np.float32) if floats else None
        )
        self.size = 0

    @property
    def capacity(self) -> int:
        return int(self.ids.shape[0])

    def put_codes(self, start: int, codes: npt.NDArray[np.uint8]) -> None:
        """Write `encode`d codes (rows of both planes' bytes) at slots `start`, ..."""
        words = np.ascontiguousarray(codes).view(np.uint64)
        end = start + len(words)
        split = self.signs.shape[1]
        self.signs[start:end] = words[:, :split]
        self.magnitudes[start:end] = words[:, split:]

    def grown(self, needed: int) -> _Arrays:
        """A copy with room for `needed` more rows."""
        capacity = max(1024, 2 * self.capacity, self.size + needed)
        # The int8 rows are not copied: the full segments are shared.
        int8 = self.int8.grown(capacity)
        new = _Arrays(self.signs.shape[1], capacity, int8.width, self.floats is not None, int8)
        n = self.size
        new.signs[:n] = self.signs[:n]
        new.magnitudes[:n] = self.magnitudes[:n]
        if new.floats is not None and self.floats is not None:
            new.floats[:n] = self.floats[:n]
        for name in ("ids", "kinds", "grans", "alive", "scales"):
            getattr(new, name)[:n] = getattr(self, name)[:n]
        new.size = n
        return new


Change = tuple[str, Any]


@contextlib.asynccontextmanager
async def _no_limit(conn: aiosqlite.Connection) -> AsyncIterator[None]:
    del conn
    yield


class VectorIndex:
    """The in-memory mirror of `vector_codes` for one store.

    Args:
        dimension: The store's vector length.
        write_lock: The store's write lock, held while loading.
        tuning: Candidate counts per stage.
    """

    def __init__(
        self, dimension: int, write_lock: asyncio.Lock, tuning: Tuning | None = None
    ) -> None:
        self.dimension = dimension
        self.tuning = tuning or Tuning()
        self._words = code_bytes(dimension) // 16  # 64-bit words per bit plane
        self._write_lock = write_lock
        self._arrays: _Arrays | None = None
        self._live = 0
        self._dead = 0
        self._max_id = -1  # new rowids are usually above it, so they need no delete pass
        self._pending: list[Change] = []
        self._vocab: dict[str, int] = {}
        # The store's change counter as the mirror reflects it (-1: not known yet), the value
        # the open transaction commits, and who to tell when another process wrote.
        self.changes = -1
        self._expected = -1
        self.on_foreign: Callable[[], None] | None = None
        # Lifts the reader's query time limit while the mirror loads (set by the store).
        self.untimed: Callable[[aiosqlite.Connection], AbstractAsyncContextManager[None]] = (
            _no_limit
        )
        # Borrows a reader for the background int8 fill (set by the store; None: the load
        # quantises inline, reading every float copy before the first search).
        self.borrow: Callable[[], AbstractAsyncContextManager[aiosqlite.Connection]] | None = None
        self._filling: asyncio.Task[None] | None = None
        self._loads = 0  # bumped by every load and unload: a fill of an older load stops

    @property
    def loaded(self) -> bool:
        """Whether the mirror is in memory (it loads on the first search that needs it)."""
        return self._arrays is not None

    @property
    def live(self) -> int:
        """Chunks in the mirror (0 until loaded)."""
        return self._live

    def memory_bytes(self) -> int:
        """Bytes held by the mirror's arrays (there is no per-chunk Python object)."""
        a = self._arrays
        if a is None:
            return 0
        arrays: list[npt.NDArray[Any]] = [
            a.signs,
            a.magnitudes,
            a.ids,
            a.kinds,
            a.grans,
            a.alive,
            a.scales,
        ]
        if a.floats is not None:
            arrays.append(a.floats)
        return sum(int(x.nbytes) for x in arrays) + a.int8.nbytes

    @property
    def splits_hamming(self) -> bool:
        """Whether a search's Hamming stage runs in two threads (a big store)."""
        return self._live >= _SPLIT_ABOVE

    @property
    def exact(self) -> bool:
        """Whether searches run exactly on the float copies in memory (a small store)."""
        a = self._arrays
        return a is not None and a.floats is not None and self.tuning.exact_in_memory

    def _label(self, value: str) -> int:
        if value not in self._vocab:
            # 0 is never used, so a fresh array's zeros match no filter.
            self._vocab[value] = len(self._vocab) + 1
        return self._vocab[value]

    # -- staging: called by the writer inside a transaction, applied by the store -------------

    def stage(self, change: Change) -> None:
        """Record a change made in the open transaction (`upsert`, `delete` or `reload`)."""
        self._pending.append(change)

    @property
    def staged(self) -> bool:
        """Whether the open transaction changed vectors (and so must bump the counter)."""
        return bool(self._pending)

    def expect(self, changes: int) -> None:
        """The open transaction bumped the change counter to `changes`."""
        self._expected = changes

    def commit(self) -> None:
        """The transaction committed: apply what it staged."""
        pending, self._pending = self._pending, []
        committed, self._expected = self._expected, -1
        foreign = committed >= 0 and self.changes >= 0 and committed != self.changes + 1
        if committed >= 0:
            self.changes = committed
        self._apply(pending)
        if foreign:
            self._stale("a commit found vectors written by another process")

    def _apply(self, pending: list[Change]) -> None:
        for op, payload in pending:
            if op == "reload":
                # A reindex may have changed the dimension (storage/sqlite/reindex.py `swap`).
                self._unload()
                if payload is not None:
                    self._set_dimension(int(payload))
                return
        if self._arrays is None:
            return  # not loaded: the load will read the committed rows
        for op, payload in pending:
            if op == "delete":
                self._delete(payload)
            else:
                self._upsert(*payload)
        if self._dead > max(1024, self._live // 4):
            self._compact()
        a = self._arrays
        if a is None:
            return
        if a.floats is not None and self._live >= self.tuning.exact_below * 5 // 4:
            a.floats = None  # big now: the cascade answers; searches hold their own reference
            logger.info("the vector index dropped its float copies at %d chunks", self._live)
        elif a.floats is None and self._live < self.tuning.exact_below:
            self._unload()  # small again: the next search reloads it with float copies

    def rollback(self) -> None:
        """The transaction rolled back: forget what it staged."""
        self._pending = []
        self._expected = -1

    def _stale(self, why: str) -> None:
        if self._arrays is not None:
            logger.info("%s; the vector index reloads on the next search", why)
            self._unload()
        if self.on_foreign is not None:
            self.on_foreign()

    async def catch_up(self, conn: aiosqlite.Connection) -> None:
        """Drop a loaded mirror that another process's commits left behind (read on a reader
        connection; one point query)."""
        if self._arrays is None:
            return
        self.note_changes(await read_changes(conn))

    def note_changes(self, changes: int) -> bool:
        """Drop a loaded mirror behind the store's change counter `changes` (read by a
        search); returns whether it was dropped."""
        if self._arrays is None or changes <= max(self.changes, self._expected):
            return False
        self._stale(f"another process changed vectors ({changes - self.changes} commits)")
        return True

    async def verify(self, conn: aiosqlite.Connection) -> tuple[int, int] | None:
        """`(missing, extra)`: rows of `vector_codes` the loaded mirror lacks and rows it holds
        that are gone; None when it is not loaded. A mirror that differs is dropped."""
        async with self._write_lock:
            a = self._arrays
            if a is None:
                return None
            async with conn.execute("SELECT chunk_id FROM vector_codes") as cursor:
                rows = list(await cursor.fetchall())
            table = np.fromiter((int(r[0]) for r in rows), dtype=np.int64, count=len(rows))
            mirror = a.ids[: a.size][a.alive[: a.size]]
            missing = int(np.setdiff1d(table, mirror).size)
            extra = int(np.setdiff1d(mirror, table).size)
            if missing or extra:
                self._stale(f"the vector index misses {missing} rows and holds {extra} extra")
            return missing, extra

    def _set_dimension(self, dimension: int) -> None:
        self.dimension = dimension
        self._words = code_bytes(dimension) // 16

    def _unload(self) -> None:
        self._loads += 1
        self._arrays = None
        self._live = 0
        self._dead = 0
        self._max_id = -1

    def _delete(self, chunk_ids: Iterable[int]) -> None:
        a = self._arrays
        assert a is not None
        wanted = np.fromiter((int(c) for c in chunk_ids), dtype=np.int64)
        if not len(wanted) or not a.size:
            return
        # One vectorised pass instead of an id -> slot dict, which would cost ~100 bytes a
        # chunk (100 MB at a million); "table" is O(n) in the chunks, not O(n x deleted).
        hit = np.isin(a.ids[: a.size], wanted, kind="table") & a.alive[: a.size]
        removed = int(np.count_nonzero(hit))
        if removed:
            a.alive[: a.size][hit] = False
            self._live -= removed
            self._dead += removed

    def _upsert(
        self,
        chunk_ids: Sequence[int],
        codes: npt.NDArray[np.uint8],
        kinds: Sequence[str],
        grans: Sequence[str],
        floats: FloatArray,
    ) -> None:
        if not len(chunk_ids):
            return
        if min(chunk_ids) <= self._max_id:
            self._delete(chunk_ids)
        self._max_id = max(self._max_id, max(chunk_ids))
        a = self._arrays
        assert a is not None
        count = len(chunk_ids)
        if a.size + count > a.capacity:
            # A new object: searches running on the old one keep reading it unchanged.
            a = self._arrays = a.grown(count)
        start, end = a.size, a.size + count
        a.put_codes(start, codes)
        copies, a.scales[start:end] = quantize(floats, self.dimension)
        a.int8.put_range(start, copies)
        if a.floats is not None:
            a.floats[start:end] = floats[:, : self.dimension]
        a.ids[start:end] = chunk_ids
        a.kinds[start:end] = [self._label(k) for k in kinds]
        a.grans[start:end] = [self._label(g) for g in grans]
        a.alive[start:end] = True
        self._live += count
        a.size = end  # last: a search that reads `size` sees finished rows only

    def _compact(self) -> None:
        old = self._arrays
        assert old is not None
        keep = np.flatnonzero(old.alive[: old.size])
        new = _Arrays(
            self._words, max(1024, len(keep) * 5 // 4), self.dimension, old.floats is not None
        )
        n = len(keep)
        new.signs[:n] = old.signs[keep]
        new.magnitudes[:n] = old.magnitudes[keep]
        for lo in range(0, n, _MIRROR_BATCH):  # in batches: no whole-store temporary
            new.int8.put_range(lo, old.int8.take(keep[lo : lo + _MIRROR_BATCH]))
        new.scales[:n] = old.scales[keep]
        if new.floats is not None and old.floats is not None:
            new.floats[:n] = old.floats[keep]
        new.ids[:n] = old.ids[keep]
        new.kinds[:n] = old.kinds[keep]
        new.grans[:n] = old.grans[keep]
        new.alive[:n] = True
        new.size = n
        self._live = n
        self._dead = 0
        self._arrays = new
        logger.debug("compacted the vector index to %d chunks", n)

    # -- loading -------------------------------------------------------------------------------

    async def ensure_loaded(self, conn: aiosqlite.Connection) -> None:
        """Load the mirror from `vector_codes` through `conn`, once, under the write lock."""
        if self._arrays is not None:
            return
        async with self._write_lock, self.untimed(conn):
            if self._arrays is not None:
                return
            # Read first: a commit slipping in after it is caught up on the next search.
            self.changes = await read_changes(conn)
            async with conn.execute("SELECT count(*) FROM vector_codes") as cursor:
                row = await cursor.fetchone()
            total = int(row[0]) if row is not None else 0
            # Rows arrive in batches straight into the arrays: no million-item Python lists.
            small = total < self.tuning.exact_below
            arrays = _Arrays(self._words, max(1024, total * 5 // 4), self.dimension, small)
            # A big store's int8 copies are filled after publishing, in the background: reading
            # every float copy (1.5 GB at a million 384-d chunks) made the first search wait.
            inline = small or self.borrow is None
            sql = (
                "SELECT c.chunk_id, c.code, c.kind, c.granularity, f.embedding "
                "FROM vector_codes c LEFT JOIN vector_floats f USING (chunk_id)"
                if inline
                else "SELECT chunk_id, code, kind, granularity, NULL FROM vector_codes"
            )
            async with conn.execute(sql) as cursor:
                while rows := list(await cursor.fetchmany(_MIRROR_BATCH)):
                    if arrays.size + len(rows) > arrays.capacity:
                        arrays = arrays.grown(len(rows))  # rows committed since the count
                    await asyncio.to_thread(self._fill, arrays, rows, inline)
            # Published last, whole: a search never sees a half-built mirror.
            self._live = arrays.size
            self._max_id = int(arrays.ids[: arrays.size].max(initial=-1))
            self._dead = 0
            self._arrays = arrays
            self._loads += 1
            logger.info("loaded the vector index: %d chunks", arrays.size)
            if not inline:
                self._filling = asyncio.create_task(self._fill_int8(self._loads))

    def _fill(self, arrays: _Arrays, rows: Sequence[Any], quantized: bool) -> None:
        width = code_bytes(self.dimension)
        start, end = arrays.size, arrays.size + len(rows)
        matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.uint8)
        arrays.put_codes(start, matrix.reshape(len(rows), width))
        arrays.ids[start:end] = [r[0] for r in rows]
        arrays.kinds[start:end] = [self._label(r[2]) for r in rows]
        arrays.grans[start:end] = [self._label(r[3]) for r in rows]
        arrays.alive[start:end] = True
        arrays.size = end
        if not quantized:
            return  # scales stay 0 ("no int8 copy yet") until _fill_int8 reaches the rows
        # A chunk without a float copy (never written so) stays a zero vector: unfindable.
        width = 4 * self.dimension
        blob = b"".join(r[4] if r[4] and len(r[4]) == width else bytes(width) for r in rows)
        floats = np.frombuffer(blob, dtype=np.float32).reshape(-1, self.dimension)
        copies, arrays.scales[start:end] = quantize(floats, self.dimension)
        arrays.int8.put_range(start, copies)
        if arrays.floats is not None:
            arrays.floats[start:end] = floats

    async def _fill_int8(self, load: int) -> None:
        """Quantise the float copies of every row without an int8 copy (scale 0), in batches
        read by chunk id range on a borrowed reader; until a row has its copy, the bit stages
        rank it and their best go to the exact stage in SQLite, so searches stay exact
        meanwhile, only slower.

        Rows are written on the event loop's thread, where commits apply, so a compaction or
        growth never copies a half-written row; a pass repeats on the arrays' new generation.
        """
        assert self.borrow is not None
        started = asyncio.get_running_loop().time()
        try:
            while self._loads == load and (a := self._arrays) is not None:
                n = a.size
                need = np.flatnonzero((a.scales[:n] == 0) & a.alive[:n])
                if not len(need):
                    break
                need = need[np.argsort(a.ids[need], kind="stable")]
                for lo in range(0, len(need), _MIRROR_BATCH):
                    if self._loads != load or self._arrays is not a:
                        break  # unloaded or a new generation: the next pass finds what is left
                    slots = need[lo : lo + _MIRROR_BATCH]
                    await self._fill_batch(a, slots)
        except Exception:  # the searches stay exact without the copies: log, do not raise
            logger.exception("filling the vector index's int8 copies failed")
        else:
            took = asyncio.get_running_loop().time() - started
            logger.info("the vector index's int8 copies are filled (%.1f s)", took)

    async def _fill_batch(self, a: _Arrays, slots: npt.NDArray[np.intp]) -> None:
        assert self.borrow is not None
        ids = a.ids[slots]
        # A dense run of ids is one range scan; scattered ids (a later pass) are looked up.
        dense = int(ids[-1]) - int(ids[0]) < 4 * len(ids)
        sql, params = (
            (
                "SELECT chunk_id, embedding FROM vector_floats WHERE chunk_id BETWEEN ? AND ?",
                (int(ids[0]), int(ids[-1])),
            )
            if dense
            else (
                "SELECT chunk_id, embedding FROM vector_floats "
                "WHERE chunk_id IN (SELECT value FROM json_each(?))",
                (json.dumps(ids.tolist()),),
            )
        )
        async with self.borrow() as conn, self.untimed(conn):
            rows = list(await conn.execute_fetchall(sql, params))
        width = 4 * self.dimension

        def quantized() -> tuple[npt.NDArray[np.int8], FloatArray]:
            # A chunk without a float copy (never written so) stays a zero vector: unfindable.
            found = {int(r[0]): r[1] for r in rows if r[1] and len(r[1]) == width}
            blob = b"".join(found.get(int(cid), bytes(width)) for cid in ids)
            floats = np.frombuffer(blob, dtype=np.float32).reshape(-1, self.dimension)
            return quantize(floats, self.dimension)

        codes, scales = await asyncio.to_thread(quantized)
        # The copy first, then its scale: a search reads a row's scale before its copy.
        a.int8.put(slots, codes)
        a.scales[slots] = scales

    async def wait_filled(self) -> None:
        """Wait for the background int8 fill, if one runs (benchmarks and tests)."""
        if self._filling is not None:
            await asyncio.shield(self._filling)

    async def stop(self) -> None:
        """Stop the background int8 fill (the store is closing)."""
        task, self._filling = self._filling, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- searching -----------------------------------------------------------------------------

    def use_for(self, kinds: Sequence[str], granularities: Sequence[str]) -> bool:
        """Whether the cascade should answer (the store is big enough, the mirror is loaded)."""
        del kinds, granularities  # both filters run inside the cascade
        return self._arrays is not None and self._live >= self.tuning.exact_below

    def nearest(
        self, query: FloatArray, k: int, kinds: Sequence[str], granularities: Sequence[str]
    ) -> list[tuple[int, float]] | None:
        """The exact `k` nearest `(chunk_id, cosine distance)` from the float copies, nearest
        first, ties by id (blocking numpy; run in a thread). Vectors are unit length, so the
        distance is 1 - dot, as sqlite-vec's cosine distance up to float rounding.

        The int8 copies rank every row first (a quarter of the bytes a float pass reads, one
        SIMD pass), and only the best `_EXACT_MARGIN` x k of them are scored from the float
        copies: an int8 score is within ~1e-3 of the float one (each value within half a step
        of 1/127 of its row's largest), far less than the gap between the k-th and the
        `_EXACT_MARGIN` x k-th neighbour, so the k nearest are the float pass's. Rows without
        an int8 copy (scale 0) always go to the float stage.

        Returns:
            None when there are no float copies (any more): the store is big.
        """
        a = self._arrays
        if a is None:
            return None
        # Read once: a commit may drop the copies (a.floats = None) while this runs.
        n, floats, ids = a.size, a.floats, a.ids
        if floats is None:
            return None
        q = np.asarray(query, dtype=np.float32).reshape(-1)[: self.dimension]
        valid = self._valid(a, n, kinds, granularities)
        eligible = int(np.count_nonzero(valid))
        if eligible == 0:
            return []
        take = min(k, eligible)
        keep = max(_EXACT_MIN, _EXACT_MARGIN * take)
        if keep < eligible:
            approx = self._int8_scores(a, q, n)
            if eligible < n:
                approx[~valid] = -np.inf
            rows = np.argpartition(-approx, keep - 1)[:keep]
        else:
            rows = np.flatnonzero(valid)
        # One BLAS thread: the product is small, and OpenBLAS's extra threads spin.
        with _blas().limit(limits=1, user_api="blas"):
            scores = floats[rows] @ q
        order = np.lexsort((ids[rows], -scores))[:take]
        return [(int(ids[rows[i]]), float(1.0 - scores[i])) for i in order]

    def _valid(
        self, a: _Arrays, n: int, kinds: Sequence[str], granularities: Sequence[str]
    ) -> npt.NDArray[np.bool_]:
        """Which of the first `n` slots are live and match the kind and granularity filters."""
        valid = a.alive[:n]
        for values, column in ((kinds, a.kinds), (granularities, a.grans)):
            if values:
                labels = [self._vocab[v] for v in values if v in self._vocab]
                valid = valid & np.isin(column[:n], labels)
        return valid

    @staticmethod
    def _int8_scores(a: _Arrays, q: FloatArray, n: int) -> FloatArray:
        """Every one of the first `n` rows' int8 copy against the quantised query, scaled;
        +inf where a row has no copy yet."""
        query, _ = quantize(q, len(q))
        dots = a.int8.dot_first(n, query[0])
        scales = a.scales[:n]
        approx: FloatArray = dots * scales
        approx[scales == 0] = np.inf
        return approx

    def candidates(
        self, query: FloatArray, k: int, kinds: Sequence[str], granularities: Sequence[str]
    ) -> list[int]:
        """Stages 1-2 (and the bit stages for rows without an int8 copy): the chunk ids to
        rescore exactly (blocking; run in a thread)."""
        a = self._arrays
        if a is None:
            return []
        n = a.size
        signs, ids, alive = a.signs, a.ids, a.alive
        # Fewer bits rank worse: the tuning was measured at 384 dimensions (MiniLM), so
        # smaller vectors keep proportionally more candidates.
        live = self._live * max(1.0, 384 / self.dimension)
        t = self.tuning
        words = self._words
        q = np.asarray(query, dtype=np.float32).reshape(-1)[: self.dimension]
        qcode = encode(q, self.dimension).view(np.uint64).reshape(-1)[:words]

        # Stage 1: Hamming distance over every row; big stores in two halves on two threads
        # (simsimd releases the GIL).
        dist = np.empty(n, dtype=np.uint16)
        halves = [(0, n)] if n < _SPLIT_ABOVE else [(0, n // 2), (n // 2, n)]
        sentinel = words * 64 + 1
        if len(halves) == 1:
            # In this thread: a hop to the pool cost more than the stage (~1 ms at 100k).
            _hamming(signs, qcode, dist, 0, n)
        else:
            _in_two(lambda r: _hamming(signs, qcode, dist, r[0], r[1]), halves[0], halves[1])
        filtered = bool(kinds or granularities)
        if filtered or self._dead:
            valid = self._valid(a, n, kinds, granularities)
            eligible = int(np.count_nonzero(valid))
            dist[~valid] = sentinel
        else:
            valid, eligible = alive[:n], n
        if eligible == 0:
            return []
        keep1 = max(t.stage1_min, int(t.stage1_fraction * live))
        if eligible <= keep1:
            first = np.flatnonzero(valid)
        else:
            # Ties at the cut-off all stay in, so stage 1 never drops a row its equal neighbour
            # kept.
            first = _nearest_distances(dist, keep1, sentinel + 1)

        # Stage 2 on every survivor with an int8 copy; the bit stages narrow the rest.
        scales = a.scales[first]  # before the copies: a row's scale is written last
        ready = scales > 0
        chosen = self._int8_stage(a, q, k, first[ready], scales[ready])
        waiting = first[~ready]
        if len(waiting):
            # Each bit stage keeps the waiting rows' share of its count: as many of them as
            # would be among its survivors if it ranked every stage-1 survivor (as before
            # simsimd), so a half-filled index sends half as many rows to SQLite.
            share = len(waiting) / len(first)
            keep2 = max(t.stage2_min, t.per_k * k, int(t.stage2_fraction * live))
            keep3 = max(t.stage3_min, t.per_k * k, int(t.stage3_fraction * live))
            keep2 = max(t.per_k * k, math.ceil(share * keep2))
            keep3 = max(t.per_k * k, math.ceil(share * keep3))
            if len(waiting) > keep3:
                # One BLAS thread: these products are small, and OpenBLAS's extra threads
                # spin.
                with _blas().limit(limits=1, user_api="blas"):
                    waiting = self._bit_stages(a, q, waiting, keep2, keep3)
            chosen = np.concatenate([chosen, waiting])
        return [int(i) for i in ids[chosen]]

    def _bit_stages(
        self, a: _Arrays, q: FloatArray, rows: npt.NDArray[np.intp], keep2: int, keep3: int
    ) -> npt.NDArray[np.intp]:
        """The float query against the sign bits of `rows` (slots), then against two bits a
        dimension; returns the best `keep3` slots."""
        words = self._words
        # Lookup tables: tables[j, byte] = sum of q over the bits set in byte j.
        padded = np.zeros(words * 64, dtype=np.float32)
        padded[: self.dimension] = q
        tables = _BYTE_BITS.astype(np.float32) @ padded.reshape(-1, 8).T
        tables = np.ascontiguousarray(tables.T)

        def columns(plane: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint8]:
            # Byte j of each row's plane as row j (byte b of word w is j = 8w + b), so each
            # lookup is one small-table gather over a contiguous row.
            taken = plane.take(rows, axis=0).view(np.uint8)
            out: npt.NDArray[np.uint8] = np.ascontiguousarray(taken.T)
            return out

        def lookup(planes: npt.NDArray[np.uint8]) -> npt.NDArray[np.float32]:
            # Row by row: a gather from one 256-entry table each, summed in place. ~3x faster
            # than one gather over (rows, bytes) indices and a sum along the short axis.
            out: npt.NDArray[np.float32] = tables[0].take(planes[0])
            for j in range(1, len(planes)):
                out += tables[j].take(planes[j])
            return out

        # q . s, with s the +-1 signs (= 2 x lookup(signs) - sum(q); ranks alike).
        signs = columns(a.signs)
        score = lookup(signs)
        if len(rows) > keep2:
            best = np.argpartition(-score, keep2 - 1)[:keep2]
            rows, signs, score = rows[best], signs[:, best], score[best]

        # q . (s x (0.5 + m)), m the magnitude bit; up to constants that is
        # lookup(s) + 2 lookup(s & m) - lookup(m).
        mags = columns(a.magnitudes)
        score = score + 2 * lookup(signs & mags) - lookup(mags)
        if len(rows) <= keep3:
            return rows
        return rows[np.argpartition(-score, keep3 - 1)[:keep3]]

    def _int8_stage(
        self,
        a: _Arrays,
        q: FloatArray,
        k: int,
        rows: npt.NDArray[np.intp],
        scales: FloatArray,
    ) -> npt.NDArray[np.intp]:
        """Stage 2: the int8 query against the int8 copies of `rows` (slots with copies, and
        their `scales`); returns the best few, which go to the exact stage."""
        t = self.tuning
        keep = max(t.final_min, t.final_per_k * k)
        if len(rows) <= keep:
            return rows
        # Ascending slots, so each segment is read in one run (the order is free: the exact
        # stage sorts). The query's own scale is one factor for every row: left out.
        order = np.argsort(rows)
        rows, scales = rows[order], scales[order]
        query, _ = quantize(q, self.dimension)
        if len(rows) < _SPLIT_INT8_ABOVE:
            dots = a.int8.dot(rows, query[0])
        else:
            # Two halves on two threads: the gather of scattered rows waits on memory (~3 ms
            # of ~4.5 for 33k rows at a million chunks), and simsimd releases the GIL.
            middle = len(rows) // 2
            dots = np.concatenate(
                _in_two(lambda r: a.int8.dot(r, query[0]), rows[:middle], rows[middle:])
            )
        score = dots * scales
        return rows[np.argpartition(-score, keep - 1)[:keep]]


_SPLIT_ABOVE = 200_000
# The exact search of a small store scores this many times k rows from the float copies (at
# least _EXACT_MIN), chosen by their int8 scores (`VectorIndex.nearest`).
_EXACT_MARGIN, _EXACT_MIN = 4, 200
_HAMMING_BLOCK = 65_536
_SPLIT_INT8_ABOVE = 8_192
# The cut-off's guess: every 16th distance, two more than its estimate (see _nearest_distances).
_SAMPLE_STEP, _SAMPLE_MARGIN = 16, 2
_POOL: ThreadPoolExecutor | None = None
_Part = TypeVar("_Part")
_Result = TypeVar("_Result")
_BLAS: ThreadpoolController | None = None


def _blas() -> ThreadpoolController:
    # Built once: it inspects the loaded libraries (~ms); each limit after that costs ~60 us.
    global _BLAS
    if _BLAS is None:
        _BLAS = ThreadpoolController()
    return _BLAS


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(2, thread_name_prefix="recalld-vectors")
    return _POOL


def _in_two(work: Callable[[_Part], _Result], first: _Part, second: _Part) -> list[_Result]:
    """`[work(first), work(second)]`, the second on the pool's thread meanwhile (one hop, not
    two: the calling thread would only wait)."""
    later = _pool().submit(work, second)
    done = work(first)
    return [done, later.result()]


def _hamming(
    signs: npt.NDArray[np.uint64],
    qcode: npt.NDArray[np.uint64],
    out: npt.NDArray[np.uint16],
    start: int,
    end: int,
) -> None:
    """Hamming distances of rows [start, end) of `signs` into `out`."""
    query = qcode.view(np.uint8)
    for lo in range(start, end, _HAMMING_BLOCK):  # blocks: the kernel returns new buffers
        hi = min(end, lo + _HAMMING_BLOCK)
        kernels.hamming(query, signs[lo:hi].view(np.uint8), out[lo:hi])


def _nearest_distances(dist: npt.NDArray[np.uint16], keep: int, bins: int) -> npt.NDArray[np.intp]:
    """The rows (ascending) whose distance is at most the smallest cut-off that keeps at least
    `keep` of them; `dist` holds values below `bins`.

    Counting beats argpartition (distances are small integers), and counting only the rows
    near the cut-off beats counting all of them (a bincount over a million distances cost
    ~1.8 ms): every `_SAMPLE_STEP`th row guesses a cut-off with some margin, and the rows at
    or below it are counted exactly. The cumulative counts up to the guess are the same as
    over every row, so the cut-off is the same; a guess that keeps too few falls back to
    counting every row.
    """
    sample = np.cumsum(np.bincount(dist[::_SAMPLE_STEP], minlength=bins))
    guess = int(np.searchsorted(sample, -(-keep // _SAMPLE_STEP))) + _SAMPLE_MARGIN
    below = np.flatnonzero(dist <= guess)
    if len(below) >= keep:
        near = dist[below]
        cut = int(np.searchsorted(np.cumsum(np.bincount(near, minlength=bins)), keep))
        kept: npt.NDArray[np.intp] = below[near <= cut]
        return kept
    cut = int(np.searchsorted(np.cumsum(np.bincount(dist, minlength=bins)), keep))
    everything: npt.NDArray[np.intp] = np.flatnonzero(dist <= cut)
    return everything


async def read_changes(conn: aiosqlite.Connection) -> int:
    """The store's vector change counter (0 before the first change)."""
    # One trip to the connection's thread (execute + fetch + close would be three).
    rows = list(await conn.execute_fetchall("SELECT value FROM meta WHERE key = ?", (CHANGES_KEY,)))
    return int(rows[0][0]) if rows else 0


async def bump_changes(conn: aiosqlite.Connection) -> int:
    """Bump the counter inside the writer's open transaction; returns its new value."""
    async with conn.execute(_BUMP_CHANGES, (CHANGES_KEY,)) as cursor:
        row = await cursor.fetchone()
    assert row is not None  # an UPSERT ... RETURNING always returns its row
    return int(row[0])


async def insert(
    conn: aiosqlite.Connection,
    index: VectorIndex | None,
    rows: Sequence[tuple[int, FloatArray, str, str]],
    dimension: int,
) -> None:
    """Store codes and float copies for new chunks `(chunk_id, vector, kind, granularity)`,
    and stage them for the store's in-memory `index` (None: a connection without one)."""
    if rows:
        await on_thread(conn, partial(insert_rows, index=index, rows=rows, dimension=dimension))


def insert_rows(
    raw: RawConnection,
    index: VectorIndex | None,
    rows: Sequence[tuple[int, FloatArray, str, str]],
    dimension: int,
) -> None:
    """`insert` on the connection's own thread (`on_thread`), within a larger write."""
    if not rows:
        return
    matrix = np.stack([np.asarray(r[1], dtype=np.float32) for r in rows])
    codes = encode(matrix, dimension)
    ids = [int(r[0]) for r in rows]
    raw.executemany(
        "INSERT OR REPLACE INTO vector_codes (chunk_id, code, kind, granularity) "
        "VALUES (?, ?, ?, ?)",
        [
            (cid, codes[i].tobytes(), r[2], r[3])
            for i, (cid, r) in enumerate(zip(ids, rows, strict=True))
        ],
    )
    raw.executemany(
        "INSERT OR REPLACE INTO vector_floats (chunk_id, embedding) VALUES (?, ?)",
        [(cid, np.ascontiguousarray(matrix[i]).tobytes()) for i, cid in enumerate(ids)],
    )
    if index is not None:
        index.stage(("upsert", (ids, codes, [r[2] for r in rows], [r[3] for r in rows], matrix)))


async def delete(
    conn: aiosqlite.Connection, index: VectorIndex | None, chunk_ids: Sequence[int]
) -> None:
    """Remove the codes and float copies of deleted chunks (and stage that for `index`)."""
    if not chunk_ids:
        return
    params = [(int(cid),) for cid in chunk_ids]
    await conn.executemany("DELETE FROM vector_codes WHERE chunk_id = ?", params)
    await conn.executemany("DELETE FROM vector_floats WHERE chunk_id = ?", params)
    if index is not None:
        index.stage(("delete", [p[0] for p in params]))


async def rebuild(conn: aiosqlite.Connection, index: VectorIndex | None, dimension: int) -> int:
    """Refill both tables from `chunks_vec` (after its vectors were replaced, e.g. by reindex).

    Runs in the caller's write transaction; the mirror reloads after it commits.

    Returns:
        The number of chunks indexed.
    """
    await conn.execute("DELETE FROM vector_codes")
    await conn.execute("DELETE FROM vector_floats")
    total = 0
    # One pass over chunks_vec: vec0 cannot seek by rowid range, so paging would rescan it.
    async with conn.execute(
        "SELECT chunk_id, embedding, kind, granularity FROM chunks_vec"
    ) as cursor:
        while rows := list(await cursor.fetchmany(_LOAD_BATCH)):
            await _insert_raw(conn, rows, dimension)
            total += len(rows)
    if index is not None:
        index.stage(("reload", dimension))
    return total


async def _insert_raw(conn: aiosqlite.Connection, rows: Sequence[Any], dimension: int) -> None:
    matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(-1, dimension)
    codes = encode(matrix, dimension)
    await conn.executemany(
        "INSERT INTO vector_codes (chunk_id, code, kind, granularity) VALUES (?, ?, ?, ?)",
        [(r[0], codes[i].tobytes(), r[2], r[3]) for i, r in enumerate(rows)],
    )
    await conn.executemany(
        "INSERT INTO vector_floats (chunk_id, embedding) VALUES (?, ?)",
        [(r[0], r[1]) for r in rows],
    )


def backfill(conn: sqlite3.Connection) -> int:
    """Fill both tables from an existing `chunks_vec` (migration m002; blocking).

    Returns:
        The number of chunks indexed (0 for a store whose vector table does not exist yet).
    """
    exists = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'chunks_vec'").fetchone()
    meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    if not exists or "dimension" not in meta:
        return 0
    dimension = int(meta["dimension"])
    total = 0
    cursor = conn.execute("SELECT chunk_id, embedding, kind, granularity FROM chunks_vec")
    while rows := cursor.fetchmany(_LOAD_BATCH):
        matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32)
        codes = encode(matrix.reshape(-1, dimension), dimension)
        conn.executemany(
            "INSERT INTO vector_codes (chunk_id, code, kind, granularity) VALUES (?, ?, ?, ?)",
            [(r[0], codes[i].tobytes(), r[2], r[3]) for i, r in enumerate(rows)],
        )
        conn.executemany(
            "INSERT INTO vector_floats (chunk_id, embedding) VALUES (?, ?)",
            [(r[0], r[1]) for r in rows],
        )
        total += len(rows)
    return total


async def search(
    conn: aiosqlite.Connection,
    index: VectorIndex,
    vector: FloatArray,
    k: int,
    kinds: Sequence[str] = (),
    granularities: Sequence[str] = (),
) -> list[tuple[int, float]] | None:
    """The cascade's `k` nearest chunks as `(chunk_id, cosine distance)`, nearest first.

    Returns:
        None when sqlite-vec's exact KNN should answer instead.
    """
    found: list[tuple[int, float]] = []
    for _ in range(2):  # again, once, after another process's writes dropped the mirror
        if not index.use_for(kinds, granularities):
            # Not loaded or small: check for other processes' writes before searching.
            await index.catch_up(conn)
            await index.ensure_loaded(conn)
            if index.exact:
                nearest = await asyncio.to_thread(index.nearest, vector, k, kinds, granularities)
                if nearest is not None:
                    return nearest
            if not index.use_for(kinds, granularities):
                return None
        ids = await asyncio.to_thread(index.candidates, vector, k, kinds, granularities)
        found, changes = await _rescore(conn, vector, ids, k)
        # The cascade checks after searching, in the exact stage's statement: one round trip
        # to the connection's thread fewer, and the counter comes from the rows' snapshot.
        if not index.note_changes(changes):
            break
    return found


# The exact stage and the change counter in one statement (the counter's row has no id).
_RESCORE_SQL = (
    "SELECT chunk_id, vec_distance_cosine(embedding, ?) FROM vector_floats "
    "WHERE chunk_id IN (SELECT value FROM json_each(?)) "
    "UNION ALL SELECT NULL, CAST(value AS INTEGER) FROM meta WHERE key = ?"
)


async def _rescore(
    conn: aiosqlite.Connection, vector: FloatArray, ids: Sequence[int], k: int
) -> tuple[list[tuple[int, float]], int]:
    """The `k` nearest of `ids` by exact cosine distance from `vector_floats`, nearest first
    (ties by id), and the store's vector change counter, in one round trip."""
    rows = await conn.execute_fetchall(_RESCORE_SQL, _rescore_params(vector, ids))
    return _rescored(rows, k)


def search_now(
    raw: RawConnection,
    index: VectorIndex,
    vector: FloatArray,
    k: int,
    kinds: Sequence[str] = (),
    granularities: Sequence[str] = (),
) -> tuple[list[tuple[int, float]], int] | None:
    """`search` in the calling thread, on a reader's own connection `raw` (in its thread:
    storage/sqlite/routes.py): `(hits, the store's vector change counter)`, which
    the caller hands to `index.note_changes` (on the event loop) before trusting the hits.

    Returns:
        None when `search` must answer: the mirror is not loaded, or the store is small and
        searched by sqlite-vec.
    """
    if index.use_for(kinds, granularities):
        ids = index.candidates(vector, k, kinds, granularities)
        return _rescored(raw.execute(_RESCORE_SQL, _rescore_params(vector, ids)).fetchall(), k)
    if not index.exact:
        return None
    # As `search` checks for other processes' writes before the exact search (catch_up).
    rows = raw.execute("SELECT value FROM meta WHERE key = ?", (CHANGES_KEY,)).fetchall()
    nearest = index.nearest(vector, k, kinds, granularities)
    return None if nearest is None else (nearest, int(rows[0][0]) if rows else 0)


def _rescore_params(vector: FloatArray, ids: Sequence[int]) -> tuple[bytes, str, str]:
    blob = np.ascontiguousarray(vector, dtype=np.float32).tobytes()
    return blob, json.dumps(list(ids)), CHANGES_KEY


def _rescored(rows: Iterable[Any], k: int) -> tuple[list[tuple[int, float]], int]:
    """`_RESCORE_SQL`'s rows as the `k` nearest, nearest first (ties by id), and the change
    counter."""
    changes = 0
    found: list[tuple[int, float]] = []
    for cid, value in rows:
        if cid is None:
            changes = int(value)
        else:
            found.append((int(cid), float(value)))
    found.sort(key=lambda hit: (hit[1], hit[0]))
    return found[:k], changes
