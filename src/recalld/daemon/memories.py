"""Socket methods for memory edits, links and forgetting by query (issue 8).

`forget` by query is two calls, so that a query alone never deletes anything: the first
(`query`) searches and answers the matches with a confirmation token; the second (`token`)
removes exactly the sources listed under that token, once, within `CONFIRM_TTL_S`.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from recalld.daemon.params import InvalidParams, Params
from recalld.errors import NotFoundError
from recalld.storage.records import RELATIONS, MemoryEdit
from recalld.types import MEMORY_TYPES, Filters

if TYPE_CHECKING:
    from recalld.daemon.methods import Context, Progress

CONFIRM_TTL_S = 300.0
MAX_PENDING = 64


@dataclass(frozen=True, slots=True)
class _Plan:
    """What a confirmation token stands for: `(source, document id)` pairs."""

    targets: tuple[tuple[str, int], ...]
    expires: float


class PendingForgets:
    """Forget-by-query plans waiting for their confirmation, oldest dropped first."""

    def __init__(self) -> None:
        self._plans: OrderedDict[str, _Plan] = OrderedDict()

    def add(self, targets: tuple[tuple[str, int], ...]) -> tuple[str, float]:
        """Keep a plan; returns its token and expiry time."""
        now = time.time()
        for token in [t for t, p in self._plans.items() if p.expires < now]:
            del self._plans[token]
        while len(self._plans) >= MAX_PENDING:
            self._plans.popitem(last=False)
        token = secrets.token_urlsafe(16)
        plan = _Plan(targets, now + CONFIRM_TTL_S)
        self._plans[token] = plan
        return token, plan.expires

    def take(self, token: str) -> tuple[tuple[str, int], ...]:
        """The plan's targets, once.

        Raises:
            NotFoundError: The token is unknown, used or expired.
        """
        plan = self._plans.pop(token, None)
        if plan is None or plan.expires < time.time():
            raise NotFoundError(
                "no pending forget has this token (unknown, already used, or older than "
                f"{CONFIRM_TTL_S:.0f} s); run `forget` with the query again",
                data={"token": token},
            )
        return plan.targets


async def forget_by_query(ctx: Context, params: Params) -> dict[str, Any]:
    """Step one: the matches of `query` and a token that confirms their removal."""
    query = params.string("query")
    limit = params.integer("limit", 10, low=1, high=100)
    filters = params.filters()
    params.done()
    if filters.is_empty():
        # Without filters only memories are candidates: a query should not take files along.
        filters = Filters(kinds=("memory",))
    # The searcher itself: a preview is not a retrieval, so it is not counted as one.
    searcher = ctx.memory.searcher
    result = await searcher.search(query, limit=limit, filters=filters)
    # Each match must stand on its own as the gate's evidence does (a keyword hit, or a vector
    # closer than tau): a vector search always returns neighbours, related or not. A keyword
    # score that score completion looked up (no rank) is no keyword hit of the route.
    tau = searcher.settings.tau or searcher.calibration.tau
    hits = [
        h
        for h in result.hits
        if "rank" in h.explain.get("routes", {}).get("bm25", {})
        or h.explain.get("routes", {}).get("vector", {}).get("similarity", 0.0) >= tau
    ]
    matches = [
        {
            "id": h.chunk.id,
            "source": h.chunk.source,
            "document_id": h.chunk.document_id,
            "kind": h.chunk.kind,
            "granularity": h.chunk.granularity,
            "text": h.chunk.text,
            "score": h.score,
        }
        for h in hits
    ]
    targets = tuple(dict.fromkeys((h.chunk.source, h.chunk.document_id) for h in hits))
    out: dict[str, Any] = {"matches": matches, "sources": [s for s, _ in targets], "token": None}
    if targets:
        out["token"], out["expires_at"] = ctx.forgets.add(targets)
    return out


async def forget_confirmed(ctx: Context, token: str) -> dict[str, Any]:
    """Step two: remove exactly the sources the token stands for (those still the same)."""
    forgotten: list[str] = []
    skipped: list[str] = []
    for source, document_id in ctx.forgets.take(token):
        async with ctx.memory.store.reading() as reader:
            doc = await reader.document_by_source(source)
        # A source re-created since the preview is another document: it was not shown.
        if doc is not None and doc.id == document_id and await ctx.memory.forget(source):
            forgotten.append(source)
        else:
            skipped.append(source)
    return {"forgotten": forgotten, "skipped": skipped}


async def memories_update(ctx: Context, params: Params, progress: Progress) -> Any:
    """Edit a memory in place; the replaced version goes to its history."""
    chunk_id = params.integer("id", low=1)
    text = params.string("text", None, longest=None)
    memory_type = params.string("type", None)
    if memory_type is not None and memory_type not in MEMORY_TYPES:
        raise InvalidParams(f"param 'type' must be one of {', '.join(MEMORY_TYPES)}", "type")
    tags = params.strings("tags") if "tags" in params.raw else None
    importance = params.number("importance", None)
    if importance is not None and not 0.0 <= importance <= 1.0:
        raise InvalidParams("param 'importance' must be between 0 and 1", "importance")
    event_time = params.time("event_time")
    params.done()
    edit = MemoryEdit(text, memory_type, tags, importance, event_time)
    if edit == MemoryEdit():
        raise InvalidParams("pass at least one of text, type, tags, importance, event_time", "text")
    version = await ctx.memory.update(chunk_id, edit)
    chunk = await ctx.memory.store.read(lambda c: c.chunks_by_id([chunk_id]))
    return {"id": chunk_id, "version": version, "source": chunk[chunk_id].source}


async def memories_history(ctx: Context, params: Params, progress: Progress) -> Any:
    """A memory's current text and its earlier versions."""
    chunk_id = params.integer("id", low=1)
    params.done()
    versions = await ctx.memory.history(chunk_id)
    chunk = (await ctx.memory.store.read(lambda c: c.chunks_by_id([chunk_id])))[chunk_id]
    return {
        "id": chunk_id,
        "version": len(versions) + 1,
        "text": chunk.text,
        "history": versions,
    }


def _relation(params: Params, required: bool) -> str | None:
    relation: str | None = (
        params.string("relation") if required else params.string("relation", None)
    )
    if relation is not None and relation not in RELATIONS:
        raise InvalidParams(f"param 'relation' must be one of {', '.join(RELATIONS)}", "relation")
    return relation


async def links_add(ctx: Context, params: Params, progress: Progress) -> Any:
    """Link two chunks."""
    src = params.integer("src", low=1)
    dst = params.integer("dst", low=1)
    relation = _relation(params, True)
    weight = params.number("weight", 1.0)
    params.done()
    if src == dst:
        raise InvalidParams("a chunk cannot be linked to itself", "dst")
    if not 0.0 <= weight <= 1.0:
        raise InvalidParams("param 'weight' must be between 0 and 1", "weight")
    assert relation is not None
    await ctx.memory.link(src, dst, relation, weight)
    return {"src": src, "dst": dst, "relation": relation, "weight": weight}


async def links_list(ctx: Context, params: Params, progress: Progress) -> Any:
    """The links of a chunk."""
    chunk_id = params.integer("id", low=1)
    relation = _relation(params, False)
    direction = params.string("direction", "both")
    if direction not in ("in", "out", "both"):
        raise InvalidParams("param 'direction' must be one of in, out, both", "direction")
    params.done()
    return {"links": await ctx.memory.links(chunk_id, relation, direction)}


async def links_remove(ctx: Context, params: Params, progress: Progress) -> Any:
    """Remove the links from `src` to `dst` (one relation, or all)."""
    src = params.integer("src", low=1)
    dst = params.integer("dst", low=1)
    relation = _relation(params, False)
    params.done()
    removed = await ctx.memory.unlink(src, dst, relation)
    if not removed:
        raise NotFoundError(
            f"no link from {src} to {dst}" + (f" ({relation})" if relation else ""),
            data={"src": src, "dst": dst},
        )
    return {"removed": removed}


METHODS = {
    "memories/update": memories_update,
    "memories/history": memories_history,
    "links/add": links_add,
    "links/list": links_list,
    "links/remove": links_remove,
}
