"""The Python API: `AsyncMemory` and its thin synchronous twin `Memory`.

    async with await AsyncMemory.open(settings) as memory:
        await memory.add_file(Path("notes.md"))
        result = await memory.search("how do I rotate the keys?")

The daemon serves this same object over its socket; tests and benchmarks use it directly.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from recalld.config import Settings
from recalld.embeddings.base import Embedder, load_embedder
from recalld.errors import NotFoundError
from recalld.ingest.facts_llm import fact_extractor
from recalld.ingest.pipeline import Ingestor, IngestReport
from recalld.retrieval import gate
from recalld.retrieval.search import Searcher
from recalld.storage import readers, writer
from recalld.storage.store import Store
from recalld.types import NO_FILTERS, Chunk, Filters, SearchResult

T = TypeVar("T")

_CALIBRATIONS: dict[str, gate.Calibration] = {}


async def calibrate(embedder: Embedder) -> gate.Calibration:
    """The gate thresholds for a model, measured once per model id and process."""
    if embedder.model_id not in _CALIBRATIONS:
        vectors = await asyncio.to_thread(embedder.embed, list(gate.PROBE_SENTENCES))
        _CALIBRATIONS[embedder.model_id] = gate.calibrate(vectors)
    return _CALIBRATIONS[embedder.model_id]


class AsyncMemory:
    """A recalld store opened in this process: ingest, remember, search, get, forget."""

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
        self.ingestor = Ingestor(
            store,
            embedder,
            settings.chunk,
            settings.daemon.max_file_mb * 2**20,
            settings.embed.batch_size,
            facts=self._facts,
        )
        self.searcher = Searcher(
            store, embedder, settings.search, calibration, settings.embed.query_cache
        )
        self._background: set[asyncio.Task[None]] = set()

    @classmethod
    async def open(cls, settings: Settings, *, embedder: Embedder | None = None) -> AsyncMemory:
        """Open the store named by `settings` with its embedding model.

        Args:
            settings: Resolved settings (`config.load_settings`).
            embedder: An already-loaded model to share (tests, benchmarks); default: the one
                `settings.embed.model` names.

        Raises:
            ModelMismatchError: The store was embedded with another model.
            SchemaTooNewError: The store comes from a newer recalld.
        """
        owns_embedder = embedder is None
        if embedder is None:
            embedder = await asyncio.to_thread(
                load_embedder, settings.embed.model, settings.model_cache_dir, settings.embed
            )
        store = await Store.open(
            settings.store_location,
            model_id=embedder.model_id,
            dimension=embedder.dimension,
            readers=settings.store.readers,
            query_timeout_ms=settings.store.query_timeout_ms,
            isolate_users=settings.store.isolate_users,
            vector_index=settings.store.vector_index,
        )
        return cls(
            settings, store, embedder, await calibrate(embedder), owns_embedder=owns_embedder
        )

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def add_file(self, path: Path) -> IngestReport:
        """Ingest a file (skipped when its content is already stored)."""
        return await self.ingestor.ingest_file(path)

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
        result = await self.searcher.search(query, limit=limit, filters=filters, **overrides)
        if result.hits:
            # Counting must not make the search wait for an ingest holding the writer.
            ids = [h.chunk.id for h in result.hits]
            self._spawn(self.store.write(lambda c: writer.count_use(c, ids, retrieval=True)))
        return result

    async def get(self, chunk_id: int) -> Chunk:
        """Read one chunk (counted as an access).

        Raises:
            NotFoundError: No chunk has this id.
        """
        found = await self.store.read(lambda c: readers.chunks_by_id(c, [chunk_id]))
        if chunk_id not in found:
            raise NotFoundError(f"no chunk with id {chunk_id}", data={"id": chunk_id})
        self._spawn(self.store.write(lambda c: writer.count_use(c, [chunk_id], retrieval=False)))
        return found[chunk_id]

    async def forget(self, source: str) -> bool:
        """Remove a document or memory by its source. Returns whether it existed."""
        return await self.ingestor.forget(source)

    async def forget_chunk(self, chunk_id: int) -> bool:
        """Remove the document (or memory) that holds a chunk."""
        chunk = await self.get(chunk_id)
        return await self.forget(chunk.source)

    async def counts(self) -> dict[str, int]:
        """Documents, chunks, partial documents, errors and links in the store."""
        return await self.store.read(readers.counts)

    def _spawn(self, coro: Coroutine[Any, Any, object]) -> None:
        async def run() -> None:
            await coro

        task = asyncio.get_running_loop().create_task(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def close(self) -> None:
        """Finish background writes and close the store."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        await self.store.close()
        if self._facts is not None:
            await self._facts.aclose()
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

    def add_file(self, path: Path) -> IngestReport:
        """See `AsyncMemory.add_file`."""
        return self._run(self._memory.add_file(path))

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
