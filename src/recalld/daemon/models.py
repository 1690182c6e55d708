"""Socket methods for choosing and changing the embedding model: `models/list`, `reindex`,
`reindex/cancel` (registered in `daemon.methods`; documented in docs/protocol.md)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from recalld.daemon.params import Params
from recalld.embeddings import catalog
from recalld.errors import ReindexError
from recalld.storage import readers

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
    models = catalog.annotate(
        catalog.available(settings, extra),
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


async def _spec(conn: Any) -> str | None:
    rows = await readers.fetchall(conn, "SELECT value FROM meta WHERE key = 'model_spec'")
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
