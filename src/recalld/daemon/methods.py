"""The JSON-RPC method table, and the one place where exceptions become error objects.

Every method is `async def m(ctx, params, progress) -> result`. `Dispatcher.handle` runs it and
maps what it raises:

- `InvalidParams` → -32602 with `data.param`;
- any `RecalldError` → its own `code` and message, with `data: {"type": ClassName, ...}`;
- anything else → -32603, with the traceback logged here and nowhere else.

The methods, their params, results and errors are documented in `docs/protocol.md`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recalld import __version__, protocol
from recalld.config import (
    LoadedSettings,
    search_overrides,
    setting_scope,
    settings_as_dict,
)
from recalld.daemon import browse, context, jobs, memories, models, transfer
from recalld.daemon.params import InvalidParams, Params
from recalld.daemon.sources import SourceRegistry, source_dict
from recalld.errors import ConfigError, NotFoundError, RecalldError
from recalld.ingest.watcher import SOURCE_KINDS
from recalld.projects import elsewhere
from recalld.retrieval.search import MODES
from recalld.storage import checks, registry, repair
from recalld.storage.sqlite.connection import UNREADABLE, damaged_error, is_damaged
from recalld.storage.sqlite.guard import is_disk_full, os_disk_full_error, write_state
from recalld.types import MEMORY_TYPES, Chunk, Hit

if TYPE_CHECKING:
    # Only for annotations: importing them pulls in the chunkers and the embedders.
    from recalld.api import AsyncMemory
    from recalld.ingest.scheduler import Scheduler

logger = logging.getLogger(__name__)

Progress = Callable[[dict[str, Any]], Awaitable[None]]
Method = Callable[["Context", Params, Progress], Awaitable[Any]]


@dataclass
class Context:
    """What methods act on: the open memory, the scheduler, the sources and daemon facts.

    Attributes:
        loaded: The effective settings and where each came from.
        memory: The open store, embedder, ingestor and searcher.
        scheduler: The watcher-fed ingest queue.
        sources: The watched folders.
        socket_path: Where the daemon listens.
        sources_changed: Called after `sources/add|remove`, to restart the watcher.
        watching: How the folders are watched (`Watcher.state`), for `status`.
    """

    loaded: LoadedSettings
    memory: AsyncMemory
    scheduler: Scheduler
    sources: SourceRegistry
    socket_path: Path
    sources_changed: Callable[[], None]
    started: float = field(default_factory=time.monotonic)
    started_at: float = field(default_factory=time.time)
    forgets: memories.PendingForgets = field(default_factory=memories.PendingForgets)
    agents: context.AgentSessions = field(default_factory=context.AgentSessions)
    jobs: jobs.JobRegistry = field(default_factory=jobs.JobRegistry)
    watching: Callable[[], dict[str, Any]] | None = None


def chunk_dict(chunk: Chunk) -> dict[str, Any]:
    """A stored chunk as the protocol returns it."""
    return {
        "id": chunk.id,
        "source": chunk.source,
        "document_id": chunk.document_id,
        "position": chunk.position,
        "kind": chunk.kind,
        "granularity": chunk.granularity,
        "key": chunk.key,
        "parent_id": chunk.parent_id,
        "text": chunk.text,
        "token_count": chunk.token_count,
        "tags": list(chunk.tags),
        "memory_type": chunk.memory_type,
        "importance": chunk.importance,
        "event_time": chunk.event_time,
        "created_at": chunk.created_at,
        "access_count": chunk.access_count,
        "retrieval_count": chunk.retrieval_count,
        "status": chunk.status,
        "meta": chunk.meta,
    }


def hit_dict(hit: Hit, explain: bool) -> dict[str, Any]:
    """One search hit as the protocol returns it."""
    chunk = hit.chunk
    out: dict[str, Any] = {
        "id": chunk.id,
        "source": chunk.source,
        "text": chunk.text,
        "score": hit.score,
        "kind": chunk.kind,
        "granularity": chunk.granularity,
        "meta": chunk.meta,
        "event_time": chunk.event_time,
        "tags": list(chunk.tags),
        "document_id": chunk.document_id,
        "position": chunk.position,
        "parent_id": chunk.parent_id,
    }
    if hit.context is not None:
        out["context"] = hit.context
    if explain:
        out["explain"] = hit.explain
    return out


def _absolute(params: Params, name: str) -> Path:
    return Path(params.path(name))


def _search_settings(raw: Params) -> dict[str, Any]:
    try:
        return search_overrides(raw.raw)
    except ConfigError as exc:
        name = exc.data.get("setting")
        raise InvalidParams(exc.message, f"settings.{name}" if name else "settings") from None


# -- methods ---------------------------------------------------------------------------------


async def search(ctx: Context, params: Params, progress: Progress) -> Any:
    """Hybrid search; see docs/protocol.md for params and result."""
    query = params.string("query", blank=True)  # a blank query is the searcher's QueryError
    limit = params.integer("limit", None, low=1, high=1000)
    mode = params.string("mode", None)
    if mode is not None and mode not in MODES:
        raise InvalidParams(f"param 'mode' must be one of {', '.join(MODES)}", "mode")
    explain = params.boolean("explain", False)
    expand = params.integer("expand", None, low=0, high=20)
    budget = params.integer("budget_tokens", None, low=1, high=1_000_000)
    time_aware = params.boolean("time_aware", None)
    filters = params.filters()
    # The client's own search settings (`--set search.x=`, RECALLD_SEARCH__X): params win.
    overrides: dict[str, Any] = _search_settings(params.object("settings"))
    params.done()
    setting_limit = overrides.pop("limit", None)
    limit = setting_limit if limit is None else limit
    if mode is not None:
        overrides["mode"] = mode
    if expand is not None:
        overrides["expand"] = expand
    if budget is not None:
        overrides["budget_tokens"] = budget
    if time_aware is not None:
        overrides["time_aware"] = time_aware
    result = await ctx.memory.search(query, limit=limit, filters=filters, **overrides)
    if filters.project is not None:
        # Files carry the project of the git repository they live in (issue 21).
        project = filters.project
        result.hits = await asyncio.to_thread(
            lambda: [h for h in result.hits if not elsewhere(h.chunk.source, project)]
        )
    out: dict[str, Any] = {
        "hits": [hit_dict(h, explain) for h in result.hits],
        "tier": result.tier,
        "rejected": result.rejected,
    }
    if result.packing is not None:
        out["packing"] = result.packing
    if explain:
        out["explain"] = result.explain
    return out


async def get(ctx: Context, params: Params, progress: Progress) -> Any:
    """One chunk by id (counted as an access)."""
    chunk_id = params.integer("id", low=1)
    params.done()
    return chunk_dict(await ctx.memory.get(chunk_id))


async def remember(ctx: Context, params: Params, progress: Progress) -> Any:
    """Store a memory written directly; returns its chunk id."""
    text = params.string("text", longest=None)
    memory_type = params.string("type", "semantic")
    if memory_type not in MEMORY_TYPES:
        raise InvalidParams(f"param 'type' must be one of {', '.join(MEMORY_TYPES)}", "type")
    tags = params.strings("tags")
    importance = params.number("importance", 0.5)
    if not 0.0 <= importance <= 1.0:
        raise InvalidParams("param 'importance' must be between 0 and 1", "importance")
    event_time = params.time("event_time")
    project = params.project("project")
    params.done()
    report = await ctx.memory.remember(
        text, memory_type=memory_type, tags=tags, importance=importance, event_time=event_time
    )
    # Every remember says where the memory belongs, so the same text remembered globally
    # after a project's becomes global (issue 21).
    await ctx.memory.store.write(lambda r: r.set_project(source=report.source, project=project))
    ids: list[Chunk] = []
    if report.document_id is not None:
        doc_id = report.document_id
        ids = await ctx.memory.store.read(lambda c: c.neighbours(doc_id, 0, 0))
    return {
        "id": ids[0].id if ids else None,
        "source": report.source,
        "document_id": report.document_id,
        "status": report.status,
    }


async def forget(ctx: Context, params: Params, progress: Progress) -> Any:
    """Remove a document or memory by `source`, or the one holding chunk `id`; or, by `query`,
    preview the matches with a token that a second call (`token`) confirms."""
    given = [
        name for name in ("source", "id", "query", "token") if params.raw.get(name) is not None
    ]
    if len(given) != 1:
        raise InvalidParams("pass exactly one of 'source', 'id', 'query' or 'token'", "source")
    if given == ["query"]:
        return await memories.forget_by_query(ctx, params)
    if given == ["token"]:
        token = params.string("token")
        params.done()
        return await memories.forget_confirmed(ctx, token)
    source = params.string("source", None)
    chunk_id = params.integer("id", None, low=1)
    params.done()
    if chunk_id is not None:
        source = (await ctx.memory.get(chunk_id)).source
    assert source is not None
    if not await ctx.memory.forget(source):
        raise NotFoundError(
            f"nothing is stored for {source}; see `recalld search` or `recalld status`",
            data={"source": source},
        )
    return {"forgotten": True, "source": source}


async def sources_list(ctx: Context, params: Params, progress: Progress) -> Any:
    """Every watched folder, the drop folder first, with its counts and last scan."""
    params.done()
    return {"sources": await browse.sources_with_counts(ctx)}


async def sources_add(ctx: Context, params: Params, progress: Progress) -> Any:
    """Watch a folder from now on (persisted) and scan it."""
    path = _absolute(params, "path")
    kind = params.string("kind", "auto")
    if kind not in SOURCE_KINDS:
        raise InvalidParams(f"param 'kind' must be one of {', '.join(SOURCE_KINDS)}", "kind")
    exclude = params.strings("exclude")
    params.done()
    source = ctx.sources.add(os.fspath(path), kind, exclude)
    ctx.sources_changed()
    ctx.scheduler.scan(source.path)
    return source_dict(source)


async def sources_remove(ctx: Context, params: Params, progress: Progress) -> Any:
    """Stop watching a run-time folder; `forget` also removes its documents."""
    path = _absolute(params, "path")
    forget_documents = params.boolean("forget", False)
    params.done()
    source = ctx.sources.remove(os.fspath(path))
    ctx.sources_changed()
    forgotten = 0
    if forget_documents:
        prefix = os.fspath(source.path) + os.sep
        for doc in await ctx.memory.store.read(lambda c: c.documents(prefix, 10**9)):
            forgotten += int(await ctx.memory.forget(doc.source))
    return {**source_dict(source), "forgotten": forgotten}


async def status(ctx: Context, params: Params, progress: Progress) -> Any:
    """Versions, model, counts, queue depths, errors, uptime, paths."""
    params.done()
    memory = ctx.memory
    counts = await memory.counts()
    redacted = await memory.store.read(lambda r: r.redacted_chunks())
    skipped = await memory.store.read(lambda r: r.skipped_files())
    # No await from here on: the answer is one moment's state. A reindex that switched models
    # during an await above would otherwise show the old model beside `last_reindex`.
    depths = ctx.scheduler.depths()
    settings = ctx.loaded.settings
    return {
        "state": "ready",
        "version": __version__,
        "protocol_version": protocol.PROTOCOL_VERSION,
        "backend": memory.store.backend,
        "schema_version": memory.store.schema_version,
        "model": memory.embedder.model_id,
        "dimension": memory.embedder.dimension,
        "pid": os.getpid(),
        "uptime_s": round(time.monotonic() - ctx.started, 3),
        "started_at": ctx.started_at,
        "store": os.fspath(memory.store.path),
        "socket": os.fspath(ctx.socket_path),
        "drop_folder": os.fspath(settings.drop_folder),
        "sources": len(ctx.sources.all()),
        "counts": counts,
        "calibration": tuning.status() if (tuning := memory.searcher.tuning) else None,
        "self_tune": settings.search.self_tune,
        "answerability_self_tune": settings.search.answerability_self_tune,
        "queues": depths,
        "pending": sum(depths.values()),
        "errors": counts.get("errors", 0),
        "redacted_chunks": redacted,
        "skipped": skipped,
        "ingested": ctx.scheduler.totals.as_dict(),
        "reindex": memory.reindexer.status(),
        "last_reindex": memory.reindexer.last,
        "writes": write_state(memory.store.disk_full, memory.store.gone),
        "watch": ctx.watching() if ctx.watching is not None else None,
        "jobs": [job.as_dict() for job in ctx.jobs.all()],
    }


async def calibrate(ctx: Context, params: Params, progress: Progress) -> Any:
    """Calibrate the store's fusion on its own content now (retrieval/selftune.py)."""
    params.done()
    return (await ctx.memory.calibrate(progress=progress)).as_dict()


async def errors_list(ctx: Context, params: Params, progress: Progress) -> Any:
    """The most recent ingest errors."""
    limit = params.integer("limit", 100, low=1, high=10_000)
    params.done()
    return {"errors": await ctx.memory.store.read(lambda c: c.errors(limit))}


async def admin_check(ctx: Context, params: Params, progress: Progress) -> Any:
    """Verify the store's invariants; with `repair`, restore them (see `storage.sqlite.repair`)."""
    fix = params.boolean("repair", False)
    params.done()
    memory = ctx.memory
    if not fix:
        report = await asyncio.to_thread(registry.check_store, memory.store.path)
    else:
        if memory.store.backend == "sqlite":
            await memory.store.check_vector_index()  # drops a stale in-memory index
        report = await repair.check_and_repair(
            memory.store, memory.ingestor.embed, memory.add_file, memory.forget
        )
    if memory.store.backend != "sqlite":
        return report
    # The daemon's in-memory vector index, which the file checks cannot see.
    found = await memory.store.check_vector_index()
    return checks.with_check(report, checks.vector_index_result(found))


async def config_show(ctx: Context, params: Params, progress: Progress) -> Any:
    """The daemon's effective settings and where each came from."""
    params.done()
    values = settings_as_dict(ctx.loaded.settings)
    return {
        "settings": {
            key: {
                "value": value,
                "source": ctx.loaded.sources.get(key, "default"),
                "applies": setting_scope(key),
            }
            for key, value in values.items()
        }
    }


METHODS: dict[str, Method] = {
    "search": search,
    "get": get,
    "remember": remember,
    "forget": forget,
    "sources/list": sources_list,
    "list": browse.list_,
    "forget/path": browse.forget_path,
    "ignored/list": browse.ignored_list,
    "ignored/remove": browse.ignored_remove,
    "sources/add": sources_add,
    "sources/remove": sources_remove,
    "status": status,
    "calibrate": calibrate,
    "errors/list": errors_list,
    "admin/check": admin_check,
    "config/show": config_show,
    "context": context.context,
    "export": transfer.export,
    "import": transfer.import_,
    "models/list": models.models_list,
    "reindex": models.reindex,
    "reindex/cancel": models.reindex_cancel,
    "tune": models.tune,
    **memories.METHODS,
    **jobs.METHODS,
}


# -- dispatch --------------------------------------------------------------------------------


def error_object(exc: BaseException, method: str = "?") -> tuple[int, str, dict[str, Any] | None]:
    """Map an exception to `(code, message, data)`: the only such mapping in the daemon."""
    if isinstance(exc, InvalidParams):
        return protocol.INVALID_PARAMS, exc.message, {"param": exc.param} if exc.param else None
    if not isinstance(exc, RecalldError) and is_disk_full(exc):
        exc = os_disk_full_error(exc)
    if isinstance(exc, RecalldError):
        return exc.code, exc.message, {**exc.data, "type": type(exc).__name__}
    logger.error("internal error in %s", method, exc_info=exc)
    return (
        protocol.INTERNAL_ERROR,
        f"internal error ({type(exc).__name__}); see the daemon log",
        None,
    )


def _damaged_page(exc: BaseException) -> BaseException | None:
    """The SQLite error saying the store is damaged, in `exc` or in the group it heads (a
    search reads its routes in a TaskGroup), or None."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := _damaged_page(inner)) is not None:
                return found
        return None
    return exc if isinstance(exc, UNREADABLE) and is_damaged(exc) else None


class Dispatcher:
    """Routes requests to methods once the daemon is ready; refuses them while it is not."""

    def __init__(self) -> None:
        self.context: Context | None = None
        self.shutting_down = False

    async def handle(
        self, request: protocol.Request, send: Callable[[dict[str, Any]], Awaitable[None]]
    ) -> dict[str, Any] | None:
        """Run one request. Returns its response, or None for a notification."""
        response = await self._run(request, send)
        return None if request.is_notification else response

    async def _run(
        self, request: protocol.Request, send: Callable[[dict[str, Any]], Awaitable[None]]
    ) -> dict[str, Any]:
        method = METHODS.get(request.method)
        if method is None:
            return protocol.error_response(
                request.id,
                protocol.METHOD_NOT_FOUND,
                f"unknown method {request.method!r}; known: {', '.join(sorted(METHODS))}",
            )
        if self.shutting_down:
            return protocol.error_response(
                request.id,
                protocol.SHUTTING_DOWN,
                protocol.STANDARD_MESSAGES[protocol.SHUTTING_DOWN],
            )
        if self.context is None:
            return protocol.error_response(
                request.id, protocol.NOT_READY, "the daemon is starting up; retry in a moment"
            )

        async def progress(params: dict[str, Any]) -> None:
            if not request.is_notification:
                await send(
                    protocol.notification(protocol.PROGRESS, {"token": request.id, **params})
                )

        started = time.perf_counter()
        try:
            result = await method(self.context, Params(request.params), progress)
        except Exception as exc:
            if (damaged := _damaged_page(exc)) is not None:
                # A damaged page met by a read: a StoreError saying what to do, not a -32603.
                logger.error("%s met a damaged page in the store: %s", request.method, damaged)
                exc = damaged_error(self.context.memory.store.path, damaged)
            code, message, data = error_object(exc, request.method)
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("%s failed with %d: %s", request.method, code, message)
            return protocol.error_response(request.id, code, message, data)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "%s answered in %.1f ms", request.method, (time.perf_counter() - started) * 1000
            )
        return protocol.result_response(request.id, result)
