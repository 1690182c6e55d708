"""Seeing and undoing: `list`, `sources/list` with counts, `forget/path` and the forgotten
entries (`ignored/list`, `ignored/remove`).

`forget/path` records the path or glob in the store first, then removes what matches: the
admission check (`ingest.admission`) consults the same entries, so a file that is touched,
rescanned or found under a newly watched folder stays out until `ignored/remove`.
"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recalld.daemon.params import InvalidParams, Params
from recalld.daemon.sources import source_dict
from recalld.errors import NotFoundError
from recalld.ingest.forgotten import ForgottenPaths, fixed_prefix, normalise
from recalld.storage import forgotten, listing
from recalld.storage.contract import Writer
from recalld.types import KINDS, MEMORY_TYPES

if TYPE_CHECKING:
    from recalld.daemon.methods import Context, Progress

LIST_WHAT = ("documents", "memories", "sources")
MAX_PAGE = 1000
SHOWN_SOURCES = 100  # removed sources named in a `forget/path` result
FORGET_BATCH = 200  # documents removed per transaction


async def sources_with_counts(ctx: Context) -> list[dict[str, Any]]:
    """Every watched folder with its documents, chunks, errors and last completed scan."""
    out = []
    for source in ctx.sources.all():
        folder = os.fspath(source.path)
        counts = await ctx.memory.store.read(partial(listing.source_counts, folder=folder))
        row = {**source_dict(source), **counts}
        prefix = folder.rstrip(os.sep) + os.sep
        async with ctx.memory.store.reading() as reader:
            row["skipped"] = await reader.skipped_files(prefix)
        row["last_scan"] = ctx.scheduler.last_scan.get(source.path)
        out.append(row)
    return out


def _query(params: Params, what: str) -> listing.ListQuery:
    # `skipped`: files no chunker takes, recorded without chunks (see `status`).
    documents = (*(k for k in KINDS if k != "memory"), "skipped")
    allowed = MEMORY_TYPES if what == "memories" else documents
    return listing.ListQuery(
        sources=params.strings("sources"),
        kinds=params.strings("kinds", allowed),
        tags=params.strings("tags"),
        since=params.time("since"),
        until=params.time("until"),
        limit=params.integer("limit", 50, low=1, high=MAX_PAGE),
        offset=params.integer("offset", 0, low=0, high=2**62),
    )


async def list_(ctx: Context, params: Params, progress: Progress) -> Any:
    """A page of documents, memories or sources; see docs/protocol.md."""
    what = params.string("what", "documents")
    if what not in LIST_WHAT:
        raise InvalidParams(f"param 'what' must be one of {', '.join(LIST_WHAT)}", "what")
    query = _query(params, what)
    params.done()
    store = ctx.memory.store
    if what == "documents":
        items, total = await store.read(lambda c: listing.documents(c, query))
    elif what == "memories":
        items, total = await store.read(lambda c: listing.memories(c, query))
    else:
        every = await sources_with_counts(ctx)
        if query.sources:
            every = [s for s in every if s["path"].startswith(query.sources)]
        total = len(every)
        items = every[query.offset : query.offset + query.limit]
    end = query.offset + len(items)
    return {
        "what": what,
        "items": items,
        "total": total,
        "offset": query.offset,
        "next_offset": end if end < total else None,
    }


async def forget_path(ctx: Context, params: Params, progress: Progress) -> Any:
    """Keep a path or glob out of the store and remove what it already holds from there."""
    pattern = normalise(params.string("path"))
    params.done()
    store = ctx.memory.store
    # Recorded first: a scan or a touch racing this call is refused from here on.
    await store.write(lambda c: forgotten.add(c, pattern))
    ctx.scheduler.admission.forgotten.add(pattern)
    only = ForgottenPaths([pattern])
    prefix = fixed_prefix(pattern)
    docs = await store.read(lambda c: c.documents(prefix, 10**9))
    matched = [doc.source for doc in docs if only.match(doc.source)]
    removed: list[str] = []
    for start in range(0, len(matched), FORGET_BATCH):
        batch = matched[start : start + FORGET_BATCH]

        async def drop(conn: Writer, batch: list[str] = batch) -> list[str]:
            return [s for s in batch if await conn.delete_document(s)]

        removed += await store.write(drop)
    return {
        "pattern": pattern,
        "forgotten": len(removed),
        "sources": removed[:SHOWN_SOURCES],
        "kept_out": True,
    }


async def ignored_list(ctx: Context, params: Params, progress: Progress) -> Any:
    """The forgotten paths and globs kept out of the store."""
    params.done()
    return {"ignored": await ctx.memory.store.read(forgotten.entries)}


async def ignored_remove(ctx: Context, params: Params, progress: Progress) -> Any:
    """Let a forgotten path in again; the watched folders it touches are rescanned."""
    pattern = normalise(params.string("path"))
    params.done()
    if not await ctx.memory.store.write(lambda c: forgotten.remove(c, pattern)):
        raise NotFoundError(
            f"{pattern} is not forgotten; `recalld forget --list-ignored` shows what is",
            data={"path": pattern},
        )
    ctx.scheduler.admission.forgotten.remove(pattern)
    prefix = Path(fixed_prefix(pattern))
    rescanning = []
    for source in ctx.sources.all():
        if prefix.is_relative_to(source.path) or source.path.is_relative_to(prefix):
            ctx.scheduler.scan(source.path)
            rescanning.append(os.fspath(source.path))
    return {"pattern": pattern, "removed": True, "rescanning": rescanning}
