"""Socket methods for choosing and changing the embedding model: `models/list`, `reindex`,
`reindex/cancel` (registered in `daemon.methods`; documented in docs/protocol.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from recalld.daemon.params import Params
from recalld.embeddings import catalog, tuned
from recalld.errors import ReindexError
from recalld.extras import require
from recalld.storage.contract import Reader

if TYPE_CHECKING:
    from recalld.daemon.methods import Context

Progress = Callable[[dict[str, Any]], Awaitable[None]]


async def models_list(ctx: Context, params: Params, progress: Progress) -> Any:
    """The models one can choose, which one the store uses, and a reindex target if any."""
    params.done()
    memory = ctx.memory
    target = memory.reindexer.status()
    settings = ctx.loaded.settings.embed
    store_spec = await memory.store.read(_spec)
    extra = tuple(s for s in (store_spec, target and target["spec"]) if s)
    tuned_dir = ctx.loaded.settings.tuned_model_dir
    found = await asyncio.to_thread(tuned.list_tuned, tuned_dir)
    models = catalog.annotate(
        catalog.available(settings, extra, found),
        memory.store.model_id,
        memory.store.dimension,
        store_spec,
        target,
        settings.model,
    )
    return {
        "models": models,
        "store": {
            "model": memory.store.model_id,
            "dimension": memory.store.dimension,
            "spec": store_spec,
        },
        "reindex": target,
    }


async def _spec(conn: Reader) -> str | None:
    rows = await conn.fetchall("SELECT value FROM meta WHERE key = 'model_spec'")
    return str(rows[0][0]) if rows else None


async def reindex(ctx: Context, params: Params, progress: Progress) -> Any:
    """Start (or resume, or follow) re-embedding the store with `model`; unless `detach`,
    answer when the new model is live, with `progress` notifications meanwhile."""
    spec = params.string("model", None)
    detach = params.boolean("detach", False)
    params.done()
    reindexer = ctx.memory.reindexer
    if spec is not None:
        started = await reindexer.start(spec)
    elif reindexer.running:
        started = reindexer.status() or {}
    elif (resumed := await reindexer.resume()) is not None:
        # A request that reaches a starting daemon before its own resume does not miss the
        # reindex recorded in the store.
        started = resumed
    else:
        raise ReindexError(
            "no reindex is running; name the new model: `recalld reindex --model SPEC` "
            "(see `recalld models`)"
        )
    if detach:
        return {"detached": True, "reindex": started}
    return {"detached": False, "result": await reindexer.wait(progress)}


async def reindex_cancel(ctx: Context, params: Params, progress: Progress) -> Any:
    """Stop the reindex in progress and drop the vectors it made."""
    params.done()
    return await ctx.memory.reindexer.cancel()


_tuning: set[int] = set()  # ids of the stores a tune runs on (one at a time per store)


async def tune(ctx: Context, params: Params, progress: Progress) -> Any:
    """Tune the store's local model on its own content (the `tune` extra); with `switch`, start
    the reindex onto an accepted model. Training runs in a worker thread, with `progress`."""
    dry_run = params.boolean("dry_run", False)
    switch = params.boolean("switch", False)
    max_steps = params.integer("max_steps", 200, low=0, high=100_000)
    max_seconds = max(0.0, float(params.number("max_seconds", 900.0)))
    queries = params.integer("queries", 2000, low=10, high=1_000_000)
    params.done()
    require(("torch",), "tune", "recalld tune")
    # Imported only here: the daemon's other paths stay torch-free.
    from recalld.tune import run

    memory = ctx.memory
    if id(memory.store) in _tuning:
        raise ReindexError("a tune is already running on this store")
    settings = ctx.loaded.settings
    spec = await memory.store.read(_spec) or settings.embed.model
    options = run.with_budget(
        run.TuneOptions(queries=queries, dry_run=dry_run),
        max_steps=max_steps,
        max_seconds=max_seconds,
    )
    _tuning.add(id(memory.store))
    try:
        result = await run.tune(
            memory.store, memory.embedder, spec, settings.tuned_model_dir, options, progress
        )
    finally:
        _tuning.discard(id(memory.store))
    if switch and result.get("model"):
        result["reindex"] = await memory.reindexer.start(result["model"])
    return result
