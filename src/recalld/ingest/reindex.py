"""Online re-embedding: build the new model's vectors beside the old ones, then switch.

    recalld reindex --model hash:32
      start ─▶ record the target in meta ─▶ [read a batch of chunks without a new vector ─▶
      embed it in a thread ─▶ stage it in one short write] ... ─▶ final catch-up + swap in one
      write transaction ─▶ switch the embedder, gate calibration, query cache and searcher

The daemon keeps answering with the old model the whole time: ingest goes on writing old-model
vectors to the live index, and the job picks up whatever is still missing from the staging
table on its next pass. A store holds one reindex at a time; its state lives in `meta`, so a
daemon stopped or killed half-way resumes from what is staged (`Reindexer.resume`). The SQL is
in `storage.sqlite.reindex`; this module only schedules it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from recalld.embeddings.base import Embedder
from recalld.errors import RecalldError, ReindexError
from recalld.storage import records
from recalld.storage.contract import Store, Writer

logger = logging.getLogger(__name__)

Progress = Callable[[dict[str, Any]], Awaitable[None]]
# Texts per embedding call and per staging transaction (AsyncMemory passes embed.batch_size):
# short write locks, little work lost to a kill.
BATCH = 32
# The swap embeds at most this many late chunks inside its own transaction (ingest waits for
# it: ~1 s with MiniLM on 2 cores); more, and it lets go of the write lock and catches up
# outside first.
CATCHUP_MAX = 32
RETRY_MAX_S = 60.0
COUNT_EVERY_S = 2.0


class _TooManyLeft(Exception):
    pass


class Reindexer:
    """Runs at most one reindex of a store in the background.

    Args:
        store: The open store.
        load: Builds the embedder a spec names (off the event loop).
        prepare: Readies what depends on the model (the gate calibration) before the swap.
        switch: Installs the new embedder everywhere, called right after the swap commits,
            before any other task runs.
        batch: Chunks per embedding call and staging transaction.
    """

    def __init__(
        self,
        store: Store,
        load: Callable[[str], Awaitable[Embedder]],
        prepare: Callable[[Embedder], Awaitable[object]],
        switch: Callable[[Embedder], None],
        batch: int = BATCH,
    ) -> None:
        self.store = store
        self._load = load
        self._prepare = prepare
        self._switch = switch
        self.batch = batch
        self.state: records.ReindexState | None = None
        self.task: asyncio.Task[dict[str, Any]] | None = None
        self.last: dict[str, Any] | None = None
        self._embedder: Embedder | None = None
        self._done = 0
        self._total = 0
        self._embedded = 0  # in this process, for the rate
        self._run_started = 0.0
        self._phase = "idle"
        self._error: str | None = None
        # start / resume / cancel one at a time: two starts must not both record a target.
        self._control = asyncio.Lock()

    @property
    def running(self) -> bool:
        """Whether a reindex job runs in this process."""
        return self.task is not None and not self.task.done()

    async def start(self, spec: str) -> dict[str, Any]:
        """Start re-embedding the store with the model `spec` names (or resume the same one).

        Raises:
            ReindexError: The store already uses that model, or another reindex is under way.
            ConfigError, EmbeddingError: The model cannot be loaded.
        """
        async with self._control:
            return await self._start(spec)

    async def _start(self, spec: str) -> dict[str, Any]:
        current = await self.store.read(lambda r: r.reindex_state())
        if current is not None and current.spec == spec:
            await self._resume()
            return self.status() or {}
        embedder = await self._load(spec)
        if current is not None and current.model_id != embedder.model_id:
            await _close(embedder)
            raise ReindexError(
                f"a reindex to {current.spec} ({current.model_id}) is under way; wait for it "
                "or stop it with `recalld reindex --cancel` first (one model per index)",
                data={"running": current.as_dict(), "requested": spec},
            )
        if current is None and embedder.model_id == self.store.model_id:
            await _close(embedder)
            raise ReindexError(
                f"the store already uses {embedder.model_id}; nothing to re-embed",
                data={"model": embedder.model_id},
            )
        if current is None:
            model_id, dimension = embedder.model_id, embedder.dimension
            state = await self.store.write(lambda c: c.begin_reindex(spec, model_id, dimension))
            logger.info("reindex to %s (%d dims) started", model_id, dimension)
        else:
            state = current  # the same model under another spelling: resume it
        self._launch(state, embedder)
        return self.status() or {}

    async def resume(self) -> dict[str, Any] | None:
        """Resume the reindex recorded in the store, if any and not already running here.

        Raises:
            ReindexError: The recorded spec no longer gives the recorded model.
        """
        async with self._control:
            return await self._resume()

    async def _resume(self) -> dict[str, Any] | None:
        if self.running:
            return self.status()
        state = await self.store.read(lambda r: r.reindex_state())
        if state is None:
            return None
        try:
            embedder = await self._load(state.spec)
        except RecalldError as exc:
            # Shown by `status`; `reindex --model` with the same spec tries again.
            self.state, self._phase, self._error = state, "failed", exc.message
            raise
        if embedder.model_id != state.model_id or embedder.dimension != state.dimension:
            await _close(embedder)
            raise ReindexError(
                f"the reindex in progress was started for {state.model_id}, but {state.spec} "
                f"now gives {embedder.model_id}; cancel it with `recalld reindex --cancel`",
                data={"running": state.as_dict()},
            )
        logger.info("resuming the reindex to %s", state.model_id)
        self._launch(state, embedder)
        return self.status()

    async def cancel(self) -> dict[str, Any]:
        """Stop the reindex and drop its staged vectors.

        Raises:
            ReindexError: No reindex is in progress.
        """
        async with self._control:
            return await self._cancel()

    async def _cancel(self) -> dict[str, Any]:
        if self.task is not None and not self.task.done():
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        state = await self.store.read(lambda r: r.reindex_state())
        if state is None:
            raise ReindexError("no reindex is in progress; nothing to cancel")
        dropped = await self.store.write(lambda r: r.cancel_reindex())
        if self._embedder is not None:
            await _close(self._embedder)
        self._reset()
        logger.info("reindex to %s cancelled; %d staged vectors dropped", state.model_id, dropped)
        return {"cancelled": True, **state.as_dict(), "dropped": dropped}

    async def close(self) -> None:
        """Stop the job (the state stays in the store; the next start resumes it)."""
        if self.task is not None and not self.task.done():
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
        if self._embedder is not None and self.state is not None:
            await _close(self._embedder)

    def status(self) -> dict[str, Any] | None:
        """The reindex in progress: target, done / total, rate, phase; None when idle."""
        if self.state is None:
            return None
        elapsed = time.monotonic() - self._run_started
        return {
            **self.state.as_dict(),
            "state": self._phase,
            "done": self._done,
            "total": self._total,
            "rate": round(self._embedded / elapsed, 1) if elapsed > 0 else 0.0,
            "error": self._error,
        }

    async def wait(self, progress: Progress, every: float = 0.5) -> dict[str, Any]:
        """Wait for the running reindex to finish, reporting progress every `every` s.

        Raises:
            ReindexError: No reindex runs, or it was cancelled meanwhile.
        """
        task = self.task
        if task is None:
            raise ReindexError("no reindex is running; start one with `recalld reindex --model`")
        while not task.done():
            info = self.status()
            if info is not None:
                await progress(info)
            await asyncio.wait({task}, timeout=every)
        if task.cancelled():
            raise ReindexError("the reindex was cancelled")
        return task.result()

    # -- the job -------------------------------------------------------------------------------

    def _launch(self, state: records.ReindexState, embedder: Embedder) -> None:
        self.state, self._embedder = state, embedder
        self._embedded, self._run_started = 0, time.monotonic()
        self._phase, self._error = "embedding", None
        self.task = asyncio.get_running_loop().create_task(
            self._run(state, embedder), name="recalld-reindex"
        )
        self.task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[dict[str, Any]]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            # Unexpected: the state stays in the store, a restart resumes the reindex.
            logger.error("the reindex stopped on an unexpected error", exc_info=exc)
            self._phase, self._error = "failed", f"{type(exc).__name__}: {exc}"

    def _reset(self) -> None:
        self.state, self._embedder, self.task = None, None, None
        self._phase, self._error, self._done, self._total = "idle", None, 0, 0

    async def _run(self, state: records.ReindexState, embedder: Embedder) -> dict[str, Any]:
        started = time.monotonic()
        delay = 1.0
        while True:
            self._phase = "embedding"
            try:
                await self._catch_up(state, embedder)
                self._phase = "switching"
                await self._prepare(embedder)
                # Shielded, like every write of the job: a cancel (or shutdown) must never
                # land between BEGIN and COMMIT, nor between the swap and the switch.
                count = await asyncio.shield(self._swap(state, embedder))
                break
            except _TooManyLeft:
                continue  # ingest got ahead while the swap waited: another pass first
            except ReindexError:
                raise  # the state changed under the job (a cancel): nothing to retry
            except RecalldError as exc:
                # E.g. the endpoint is down: what is staged stays; try again later.
                self._phase, self._error = "waiting", exc.message
                logger.warning("reindex paused (%s); retrying in %.0f s", exc.message, delay)
                await asyncio.sleep(delay)
                delay = min(RETRY_MAX_S, delay * 2)
        elapsed = time.monotonic() - started
        result = {
            "model": state.model_id,
            "spec": state.spec,
            "dimension": state.dimension,
            "chunks": count,
            "embedded": self._embedded,
            "elapsed_s": round(elapsed, 3),
            "rate": round(self._embedded / elapsed, 1) if elapsed > 0 else 0.0,
        }
        self.last = result
        self._reset()
        logger.info(
            "reindex to %s done: %d chunks, %d embedded here in %.1f s",
            state.model_id,
            count,
            result["embedded"],
            elapsed,
        )
        return result

    async def _catch_up(self, state: records.ReindexState, embedder: Embedder) -> None:
        """Embed and stage every chunk without a new vector; passes repeat until none is left
        (chunks ingested meanwhile may take ids below the first pass's position)."""
        after = 0
        counted = 0.0
        while True:
            # Counting is a scan of both tables: once a pass and every few seconds, not per
            # batch (a million chunks are 30k batches).
            if after == 0 or time.monotonic() - counted > COUNT_EVERY_S:
                self._done, self._total = await self.store.read(lambda r: r.reindex_progress())
                counted = time.monotonic()
            async with self.store.reading() as reader:
                batch = await reader.reindex_missing(after, self.batch)
            if not batch:
                if after == 0:
                    return
                after = 0
                continue
            ids = [cid for cid, _ in batch]
            matrix = await asyncio.to_thread(embedder.embed, [text for _, text in batch])

            async def stage(
                w: Writer, ids: list[int] = ids, matrix: npt.NDArray[np.float32] = matrix
            ) -> int:
                return await w.stage_vectors(ids, matrix, state.model_id)

            staged = await asyncio.shield(self.store.write(stage))
            self._embedded += len(ids)
            self._done += staged
            after = ids[-1]

    async def _swap(self, state: records.ReindexState, embedder: Embedder) -> int:
        async def final(conn: Writer) -> int:
            late = await conn.reindex_missing(0, CATCHUP_MAX + 1)
            if len(late) > CATCHUP_MAX:
                raise _TooManyLeft
            if late:
                ids = [cid for cid, _ in late]
                matrix = await asyncio.to_thread(embedder.embed, [t for _, t in late])
                await conn.stage_vectors(ids, matrix, state.model_id)
                self._embedded += len(ids)
            # From here until `end_switch` searches wait for the new model, and one that
            # overlapped starts again. Before the swap, not after it: on PostgreSQL the swap
            # locks the vector table until COMMIT, and a search queued on that lock would use
            # up its statement_timeout there and fail rather than start again.
            self.store.begin_switch()
            return await conn.swap_model(state)

        try:
            count = await self.store.write(final)
        except BaseException:
            if self.store.switching:
                self.store.end_switch()
            raise
        self._switch(embedder)
        self.store.end_switch(state.model_id, state.dimension)
        return count


async def _close(embedder: Embedder) -> None:
    close = getattr(embedder, "close", None)
    if close is not None:
        await asyncio.to_thread(close)
