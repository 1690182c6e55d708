"""The Python API: `AsyncMemory` and its thin synchronous twin `Memory`.

    async with await AsyncMemory.open(settings) as memory:
        await memory.add_file(Path("notes.md"))
        result = await memory.search("how do I rotate the keys?")

The daemon serves this same object over its socket; tests and benchmarks use it directly.

Opened while a daemon runs on the same store, it says so (a warning, and `daemon_pid`) and
works on: the store is one SQLite file in WAL mode, so each process sees the other's commits,
and the daemon's in-memory vector index catches up with this process's writes before its next
search (a change counter in the store, see `storage.sqlite.vectors`).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from recalld import private
from recalld.config import Settings
from recalld.embeddings import catalog
from recalld.embeddings.base import Embedder, load_embedder
from recalld.errors import IngestError, NotFoundError, QueryError, RecalldError
from recalld.ingest.admission import secret_file
from recalld.ingest.facts_llm import fact_extractor
from recalld.ingest.pipeline import Ingestor, IngestReport
from recalld.ingest.reindex import Reindexer
from recalld.ingest.supersede_llm import supersession_detector
from recalld.retrieval import answerability_tune, gate, selftune
from recalld.retrieval.search import Searcher
from recalld.storage import records
from recalld.storage.contract import Store
from recalld.storage.registry import open_store, stored_model
from recalld.storage.use_counts import UseCounts
from recalld.types import NO_FILTERS, Chunk, Filters, SearchResult

T = TypeVar("T")

logger = logging.getLogger(__name__)

_CALIBRATIONS: dict[str, gate.Calibration] = {}


async def calibrate(embedder: Embedder) -> gate.Calibration:
    """The gate thresholds for a model, measured once per model id and process."""
    if embedder.model_id not in _CALIBRATIONS:
        vectors = await asyncio.to_thread(embedder.embed, list(gate.PROBE_SENTENCES))
        _CALIBRATIONS[embedder.model_id] = gate.calibrate(vectors)
    return _CALIBRATIONS[embedder.model_id]


def daemon_pid(store_path: Path) -> str | None:
    """The pid of another process's recalld daemon serving `store_path` (it holds the lock
    file `daemon.server.StoreLock` keeps beside the store), or None. Blocking."""
    lock = store_path.with_name(store_path.name + ".lock")
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        return None if holder == str(os.getpid()) else holder
    finally:
        os.close(fd)  # closing drops a lock taken just now
    return None


def _at_stored_graph(embedder: Embedder, stored_id: str, spec: str) -> Embedder:
    """`embedder` as the older graph version the store was embedded with computed it, when
    recalld still computes that version: a store from before a graph change opens as it was,
    with the same vectors, instead of being refused."""
    at_graph = getattr(embedder, "at_graph", None)
    version = catalog.older_graph(embedder.model_id, stored_id)
    if at_graph is None or version is None:
        return embedder
    logger.warning(
        "the store was embedded with %s; using that graph as it is. `recalld reindex --model "
        "%s` moves it to %s (the current graph, faster)",
        stored_id,
        spec,
        embedder.model_id,
    )
    older: Embedder = at_graph(version)
    return older


class AsyncMemory:
    """A recalld store opened in this process: ingest, remember, search, get, forget.

    Attributes:
        daemon_pid: The pid of a recalld daemon running on the same store when this opened,
            or None. Both may write: each sees the other's commits (see the module docstring).
    """

    daemon_pid: str | None = None

    def __init__(
        self,
        settings: Settings,
        store: Store,
        embedder: Embedder,
        calibration: gate.Calibration,
        *,
        owns_embedder: bool = False,
    ) -> None:
        self.settings = settings
        self.store = store
        self.embedder = embedder
        self._owns_embedder = owns_embedder
        self._facts = fact_extractor(settings)
        self._supersession = supersession_detector(settings)
        self.ingestor = Ingestor(
            store,
            embedder,
            settings.chunk,
            settings.daemon.max_file_mb * 2**20,
            settings.embed.batch_size,
            read_timeout_s=settings.daemon.read_timeout_s,
            facts=self._facts,
            links=settings.links,
            supersession=self._supersession,
            privacy=settings.privacy,
        )
        self.searcher = Searcher(
            store, embedder, settings.search, calibration, settings.embed.query_cache
        )
        self._background: set[asyncio.Task[None]] = set()
        self.use_counts = UseCounts(store)
        self._calibrating = asyncio.Lock()
        self.reindexer = Reindexer(
            store, self._load_embedder, calibrate, self._use_model, settings.embed.batch_size
        )

    async def _load_embedder(self, spec: str) -> Embedder:
        return await asyncio.to_thread(
            load_embedder,
            spec,
            self.settings.model_cache_dir,
            self.settings.embed,
            self.settings.tuned_model_dir,
        )

    def _use_model(self, embedder: Embedder) -> None:
        """Switch to a reindex's new model (synchronous: runs right after the swap commits)."""
        old, owned = self.embedder, self._owns_embedder
        self.embedder, self._owns_embedder = embedder, True
        self.ingestor.use_model(embedder)
        self.searcher.use_model(embedder, _CALIBRATIONS[embedder.model_id])
        close = getattr(old, "close", None)
        if owned and close is not None:
            self._spawn(asyncio.to_thread(close))

    @classmethod
    async def open(
        cls, settings: Settings, *, embedder: Embedder | None = None, follow_store: bool = False
    ) -> AsyncMemory:
        """Open the store named by `settings` with its embedding model.

        Args:
            settings: Resolved settings (`config.load_settings`).
            embedder: An already-loaded model to share (tests, benchmarks); default: the one
                `settings.embed.model` names.
            follow_store: Load the model the store records (after a `reindex`) rather than
                `settings.embed.model`; for when the user did not choose a model explicitly.

        Raises:
            ModelMismatchError: The store was embedded with another model.
            SchemaTooNewError: The store comes from a newer recalld.
        """
        owns_embedder = embedder is None
        spec = settings.embed.model
        await asyncio.to_thread(private.private_dir, settings.data_dir)
        if embedder is None:
            stored = await asyncio.to_thread(stored_model, settings.store_location)
            if follow_store and stored is not None and stored[0] is not None and stored[0] != spec:
                logger.info("using %s, the store's model (embed.model is not set)", stored[0])
                spec = stored[0]
            embedder = await asyncio.to_thread(
                load_embedder,
                spec,
                settings.model_cache_dir,
                settings.embed,
                settings.tuned_model_dir,
            )
            if stored is not None:
                embedder = _at_stored_graph(embedder, stored[1], spec)
        running = (
            None if settings.store_url else await asyncio.to_thread(daemon_pid, settings.store_path)
        )
        if running is not None:
            logger.warning(
                "recalld is running on %s (pid %s): this process writes the same store; the "
                "daemon sees its writes (its vector index catches up before its next search). "
                "recalld.client.Client talks to the daemon instead.",
                settings.store_path,
                running,
            )
        store = await open_store(
            settings.store_location,
            model_id=embedder.model_id,
            dimension=embedder.dimension,
            readers=settings.store.readers,
            query_timeout_ms=settings.store.query_timeout_ms,
            model_spec=spec if owns_embedder else None,
            isolate_users=settings.store.isolate_users,
            vector_index=settings.store.vector_index,
        )
        try:
            calibration = await calibrate(embedder)
            tuning = await selftune.load(store)
        except BaseException:
            # An open store keeps threads alive that would keep the process from exiting.
            await store.close()
            raise
        memory = cls(settings, store, embedder, calibration, owns_embedder=owns_embedder)
        memory.searcher.tuning = tuning
        memory.daemon_pid = running
        return memory

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def add_file(self, path: Path, *, allow_secrets: bool = False) -> IngestReport:
        """Ingest a file (skipped when its content is already stored).

        As with `recalld ingest FILE`, a secret-bearing file (`.env`, a private key, ...; see
        `ingest.admission`) is refused and secrets in the text are redacted, unless
        `allow_secrets`.

        Raises:
            IngestError: The file is on the deny-list, or cannot be read or parsed.
        """
        if not allow_secrets and self.settings.privacy.deny_secret_files:
            if await asyncio.to_thread(secret_file, path):
                raise IngestError(
                    f"{path} is a secret-bearing file (deny-list); pass allow_secrets=True "
                    "to ingest it",
                    data={"path": str(path), "reason": "deny-list"},
                )
        return await self.ingestor.ingest_file(path, redact=not allow_secrets)

    async def add_text(self, text: str, *, source: str, name: str = "text.md") -> IngestReport:
        """Ingest text as a document under `source`; `name`'s extension picks the format."""
        return await self.ingestor.ingest_bytes(source, name, text.encode("utf-8"))

    async def remember(
        self,
        text: str,
        *,
        memory_type: str = "semantic",
        tags: Sequence[str] = (),
        importance: float = 0.5,
        event_time: float | None = None,
    ) -> IngestReport:
        """Store a memory written directly."""
        return await self.ingestor.remember(
            text, memory_type=memory_type, tags=tags, importance=importance, event_time=event_time
        )

    async def search(
        self,
        query: str,
        *,
        limit: int | None = None,
        filters: Filters = NO_FILTERS,
        **overrides: Any,
    ) -> SearchResult:
        """Hybrid search; see `Searcher.search`. Returned chunks count as retrieved."""
        result = await self._search_one_model(query, limit, filters, overrides)
        # Counted later, in one write for many searches (storage/use_counts.py): a search
        # never waits for an ingest holding the writer, nor runs beside its own count's write.
        self.use_counts.note([h.chunk.id for h in result.hits], retrieval=True)
        return result

    async def _search_one_model(
        self, query: str, limit: int | None, filters: Filters, overrides: dict[str, Any]
    ) -> SearchResult:
        # A reindex may swap the model while a search runs (its query vector would then meet
        # the other model's index): such a search starts again once the swap is done.
        for _ in range(3):
            version = await self.store.model_settled()
            try:
                result = await self.searcher.search(
                    query, limit=limit, filters=filters, **overrides
                )
            except Exception:
                if self.store.model_changed(version):
                    continue
                raise
            if not self.store.model_changed(version):
                return result
        raise QueryError("the embedding model changed during the search; search again")

    async def get(self, chunk_id: int) -> Chunk:
        """Read one chunk (counted as an access).

        Raises:
            NotFoundError: No chunk has this id.
        """
        found = await self.store.read(lambda c: c.chunks_by_id([chunk_id]))
        if chunk_id not in found:
            raise NotFoundError(f"no chunk with id {chunk_id}", data={"id": chunk_id})
        self.use_counts.note([chunk_id], retrieval=False)
        return found[chunk_id]

    async def update(self, chunk_id: int, edit: records.MemoryEdit) -> int:
        """Edit a memory; its earlier version is kept (see `history`). Returns the new version.

        Raises:
            NotFoundError: No memory has this id.
            IngestError: Empty text, unknown type, or another memory holds the new text.
        """
        return await self.ingestor.update_memory(chunk_id, edit)

    async def history(self, chunk_id: int) -> list[dict[str, Any]]:
        """A memory's earlier versions, oldest first (empty for one never edited).

        Raises:
            NotFoundError: No chunk has this id.
        """
        await self._require(chunk_id)
        return await self.store.read(lambda c: c.history_of(chunk_id))

    async def link(self, src: int, dst: int, relation: str, weight: float = 1.0) -> None:
        """Link two chunks (`src` <relation> `dst`); `supersedes` / `contradicts` set the
        target's status.

        Raises:
            NotFoundError: Either chunk does not exist.
            QueryError: Unknown relation, a weight outside 0..1, or a chunk linked to itself.
        """
        if relation not in records.RELATIONS or not 0.0 <= weight <= 1.0 or src == dst:
            raise QueryError(
                f"a link needs two different chunks, a relation among "
                f"{', '.join(records.RELATIONS)} and a weight between 0 and 1",
                data={"relation": relation, "weight": weight},
            )
        await self._require(src, dst)
        await self.store.write(lambda c: c.add_links([(src, dst, relation, weight)]))

    async def unlink(self, src: int, dst: int, relation: str | None = None) -> int:
        """Remove the links from `src` to `dst` (one relation, or all). Returns how many."""
        return await self.store.write(lambda c: c.remove_links(src, dst, relation))

    async def links(
        self, chunk_id: int, relation: str | None = None, direction: str = "both"
    ) -> list[dict[str, Any]]:
        """The links of a chunk (`out`, `in` or `both`).

        Raises:
            NotFoundError: No chunk has this id.
        """
        await self._require(chunk_id)
        return await self.store.read(lambda c: c.links_of(chunk_id, relation, direction))

    async def _require(self, *chunk_ids: int) -> None:
        found = await self.store.read(lambda c: c.chunks_by_id(list(chunk_ids)))
        for chunk_id in chunk_ids:
            if chunk_id not in found:
                raise NotFoundError(f"no chunk with id {chunk_id}", data={"id": chunk_id})

    async def forget(self, source: str) -> bool:
        """Remove a document or memory by its source. Returns whether it existed."""
        return await self.ingestor.forget(source)

    async def forget_chunk(self, chunk_id: int) -> bool:
        """Remove the document (or memory) that holds a chunk."""
        chunk = await self.get(chunk_id)
        return await self.forget(chunk.source)

    async def calibrate(
        self,
        *,
        queries: int = 200,
        seed: int = 0,
        progress: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
    ) -> selftune.StoreTuning:
        """Choose the store's fusion per content kind from its own content, record it in the
        store and search with it (when `search.self_tune` is on); see retrieval/selftune.py.
        Then learn its answerability threshold the same way (retrieval/answerability_tune.py),
        used when `search.answerability_self_tune` is on."""
        async with self._calibrating:
            started = time.perf_counter()
            tuning = await selftune.calibrate(
                self.store,
                self.embedder,
                self.settings.search,
                queries=queries,
                seed=seed,
                progress=progress,
            )
            tuning.answerability = await answerability_tune.calibrate(
                self.store, self._pseudo_search, seed=seed, progress=progress
            )
            tuning.seconds = time.perf_counter() - started
            await selftune.record(self.store, tuning)
            self.searcher.tuning = tuning
            return tuning

    async def _pseudo_search(self, text: str, limit: int, granularity: str | None) -> list[Chunk]:
        """One answerability pseudo-question, searched as configured (in one granularity, or
        all) but never rejected by answerability: the calibration reads the ownership of what
        comes back."""
        found = await self.searcher.search(
            text,
            limit=limit,
            filters=Filters(granularities=(granularity,)) if granularity else NO_FILTERS,
            answerability_threshold=0.0,
            budget_tokens=0,
            expand=0,
        )
        return [hit.chunk for hit in found.hits]

    async def keep_calibrated(self, stop: asyncio.Event, every_s: float = 5.0) -> None:
        """Calibrate whenever the store has none or has changed enough, until `stop` is set
        (the daemon runs this beside its other tasks; searches go on meanwhile)."""
        seen = -1
        while not stop.is_set():
            try:
                if self.store.generation != seen:  # nothing written: nothing to look at
                    seen = self.store.generation
                    total = (await self.counts())["chunks"]
                    if selftune.is_stale(self.searcher.tuning, total):
                        tuning = await self.calibrate()
                        logger.info(
                            "store calibrated in %.1f s: %s", tuning.seconds, tuning.summary()
                        )
            except RecalldError as exc:
                logger.warning("fusion calibration failed: %s", exc.message)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(every_s):
                    await stop.wait()

    async def counts(self) -> dict[str, int]:
        """Documents, chunks, partial documents, errors and links in the store."""
        return await self.store.read(lambda r: r.counts())

    def _spawn(self, coro: Coroutine[Any, Any, object]) -> None:
        async def run() -> None:
            await coro

        task = asyncio.get_running_loop().create_task(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def close(self) -> None:
        """Stop a reindex (it resumes on the next start), finish background writes and close
        the store."""
        await self.reindexer.close()
        await self.use_counts.close()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        await self.store.close()
        if self._facts is not None:
            await self._facts.aclose()
        if self._supersession is not None:
            await self._supersession.aclose()
        close = getattr(self.embedder, "close", None)
        if self._owns_embedder and close is not None:
            await asyncio.to_thread(close)


class Memory:
    """The synchronous twin of `AsyncMemory`, running it on a private event loop thread.

    Usable from any code, including code that already runs an event loop.
    """

    def __init__(self, settings: Settings, *, embedder: Embedder | None = None) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, daemon=True, name="recalld-memory"
        )
        self._thread.start()
        try:
            self._memory = self._run(AsyncMemory.open(settings, embedder=embedder))
            self.daemon_pid = self._memory.daemon_pid  # see AsyncMemory
        except BaseException:
            self._stop()
            raise

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def add_file(self, path: Path, *, allow_secrets: bool = False) -> IngestReport:
        """See `AsyncMemory.add_file`."""
        return self._run(self._memory.add_file(path, allow_secrets=allow_secrets))

    def add_text(self, text: str, *, source: str, name: str = "text.md") -> IngestReport:
        """See `AsyncMemory.add_text`."""
        return self._run(self._memory.add_text(text, source=source, name=name))

    def remember(self, text: str, **kwargs: Any) -> IngestReport:
        """See `AsyncMemory.remember`."""
        return self._run(self._memory.remember(text, **kwargs))

    def search(self, query: str, **kwargs: Any) -> SearchResult:
        """See `AsyncMemory.search`."""
        return self._run(self._memory.search(query, **kwargs))

    def get(self, chunk_id: int) -> Chunk:
        """See `AsyncMemory.get`."""
        return self._run(self._memory.get(chunk_id))

    def update(self, chunk_id: int, edit: records.MemoryEdit) -> int:
        """See `AsyncMemory.update`."""
        return self._run(self._memory.update(chunk_id, edit))

    def history(self, chunk_id: int) -> list[dict[str, Any]]:
        """See `AsyncMemory.history`."""
        return self._run(self._memory.history(chunk_id))

    def link(self, src: int, dst: int, relation: str, weight: float = 1.0) -> None:
        """See `AsyncMemory.link`."""
        self._run(self._memory.link(src, dst, relation, weight))

    def unlink(self, src: int, dst: int, relation: str | None = None) -> int:
        """See `AsyncMemory.unlink`."""
        return self._run(self._memory.unlink(src, dst, relation))

    def links(
        self, chunk_id: int, relation: str | None = None, direction: str = "both"
    ) -> list[dict[str, Any]]:
        """See `AsyncMemory.links`."""
        return self._run(self._memory.links(chunk_id, relation, direction))

    def forget(self, source: str) -> bool:
        """See `AsyncMemory.forget`."""
        return self._run(self._memory.forget(source))

    def counts(self) -> dict[str, int]:
        """See `AsyncMemory.counts`."""
        return self._run(self._memory.counts())

    def close(self) -> None:
        """Close the store and stop the private loop."""
        if self._loop.is_closed():
            return
        try:
            self._run(self._memory.close())
        finally:
            self._stop()
