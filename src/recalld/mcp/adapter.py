"""The MCP tools: search, remember, forget, get, ingest, list and status, each one socket
call (`recalld.mcp.agent_tools` adds context, edit, history, link and sources).

Tool descriptions are what an assistant reads to decide when and how to call a tool, so they
say what the tool is for, not how it works. Errors from the daemon come back as MCP tool
errors carrying the daemon's message (`isError: true`), and a daemon that is not running is a
tool error too: the MCP server keeps running and reconnects on the next call.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
from collections.abc import Awaitable, Mapping
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from recalld import __version__
from recalld.client import AsyncClient
from recalld.errors import DaemonNotRunning, RecalldError
from recalld.projects import project_of

logger = logging.getLogger(__name__)

INSTRUCTIONS = """\
recalld is the user's long-term memory: their notes, documents, code and past conversations,
plus facts and preferences remembered on purpose. Call `context` when you start work in a
project. Search it before answering questions about the user, their projects or earlier
conversations; remember durable facts, decisions and preferences the user states (`edit` or
`link ... supersedes` when they change); forget what the user asks you to forget."""

Kind = Literal["text", "code", "conversation", "memory"]
Granularity = Literal["chunk", "session", "round", "window", "fact", "memory"]

_READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
_ADD = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
_REMOVE = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
)


def iso(stamp: float | None) -> str | None:
    """A unix time as an ISO 8601 UTC string (what a model reads best)."""
    if stamp is None:
        return None
    return dt.datetime.fromtimestamp(stamp, dt.UTC).isoformat(timespec="seconds")


def _hit(hit: dict[str, Any]) -> dict[str, Any]:
    out = {
        "id": hit["id"],
        "score": round(float(hit["score"]), 4),
        "source": hit["source"],
        "text": hit["text"],
        "kind": hit["kind"],
        "granularity": hit["granularity"],
        "event_time": iso(hit.get("event_time")),
        "tags": hit.get("tags", []),
    }
    for key in ("context", "explain"):
        if key in hit:
            out[key] = hit[key]
    return out


async def _call(request: Awaitable[Any]) -> Any:
    """Await a client call; the daemon's errors become tool errors with its message."""
    try:
        return await request
    except DaemonNotRunning as exc:
        raise ToolError(f"recalld is not available: {exc.message}") from None
    except RecalldError as exc:
        raise ToolError(f"{type(exc).__name__}: {exc.message}") from None


def build_server(
    client: AsyncClient, search_settings: Mapping[str, Any] | None = None
) -> MCPServer:
    """An MCP server whose tools call the daemon through `client`; `search_settings` go with
    every search (`recalld mcp --set search.limit=5`, issue 17)."""
    server: MCPServer = MCPServer(
        name="recalld", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
    )

    @server.tool(annotations=_READ)
    async def search(
        query: Annotated[str, Field(description="What to look for, in natural language.")],
        limit: Annotated[
            int | None, Field(ge=1, le=100, description="How many results (default 10).")
        ] = None,
        tags: Annotated[
            list[str] | None, Field(description="Only memories with all of these tags.")
        ] = None,
        kinds: Annotated[
            list[Kind] | None,
            Field(description="Only these kinds: text, code, conversation, memory."),
        ] = None,
        granularities: Annotated[
            list[Granularity] | None,
            Field(description="Only these levels: chunk, session, round, fact, memory."),
        ] = None,
        sources: Annotated[
            list[str] | None,
            Field(description="Only sources under these path prefixes (or memory:)."),
        ] = None,
        since: Annotated[
            str | None, Field(description="Only things that happened at or after this ISO date.")
        ] = None,
        until: Annotated[
            str | None, Field(description="Only things that happened before this ISO date.")
        ] = None,
        explain: Annotated[bool, Field(description="Say why each result matched.")] = False,
    ) -> dict[str, Any]:
        """Search the user's long-term memory (notes, documents, code, past conversations and
        remembered facts) by meaning and keywords. Returns the best matches with their
        source, text, time and an id for `get`. `tier` says how confident the match is;
        `rejected: true` means nothing relevant was found."""
        filters = {
            "tags": tags,
            "kinds": kinds,
            "granularities": granularities,
            "sources": sources,
            "since": since,
            "until": until,
        }
        result = await _call(
            client.search(
                query, limit=limit, filters=filters, explain=explain, settings=search_settings
            )
        )
        out = {
            "hits": [_hit(h) for h in result["hits"]],
            "tier": result["tier"],
            "rejected": result["rejected"],
        }
        if explain:
            out["explain"] = result.get("explain")
        return out

    @server.tool(annotations=_ADD)
    async def remember(
        text: Annotated[
            str, Field(description="The fact, decision or preference, stated plainly.")
        ],
        type: Annotated[
            str,
            Field(description="episodic, semantic, procedural or preference."),
        ] = "semantic",
        tags: Annotated[list[str] | None, Field(description="Labels to filter by later.")] = None,
        importance: Annotated[
            float, Field(ge=0, le=1, description="0 (trivia) to 1 (essential).")
        ] = 0.5,
        event_time: Annotated[
            str | None, Field(description="When it happened, as an ISO date (default: now).")
        ] = None,
        project: Annotated[
            bool,
            Field(
                description="True: only for the project worked in (its git root); false: "
                "for every project (user facts, preferences)."
            ),
        ] = False,
    ) -> dict[str, Any]:
        """Store something in long-term memory so it can be found in later conversations:
        a fact about the user, a decision, a preference or how something is done. The same
        text stored twice is kept once. Returns the memory's id and source."""
        result: dict[str, Any] = await _call(
            client.remember(
                text,
                memory_type=type,
                tags=tags or (),
                importance=importance,
                event_time=event_time,
                project=project_of(os.getcwd()) if project else None,
            )
        )
        return result

    @server.tool(annotations=_REMOVE)
    async def forget(
        source: Annotated[
            str | None,
            Field(
                description="What to remove: a memory:… source, or an absolute file or folder "
                "path or glob (removed with all it holds, and kept out from then on)."
            ),
        ] = None,
        id: Annotated[
            int | None, Field(description="A result id: removes the memory or document holding it.")
        ] = None,
    ) -> dict[str, Any]:
        """Remove a remembered memory or ingested documents from long-term memory, by source
        or by the id of one of its search results. Pass exactly one of them. A path stays out
        afterwards (the user can let it in again with `recalld unforget PATH`)."""
        if (source is None) == (id is None):
            raise ToolError("pass exactly one of 'source' or 'id'")
        if source is not None and source.startswith(("/", "~")):
            kept_out: dict[str, Any] = await _call(client.forget_path(source))
            return kept_out
        result: dict[str, Any] = await _call(client.forget(source, chunk_id=id))
        return result

    @server.tool(annotations=_READ)
    async def get(
        id: Annotated[int, Field(ge=1, description="The id of a search result.")],
    ) -> dict[str, Any]:
        """Read one stored item in full by the id a search returned, with its metadata
        (source, time, tags, type, importance, parent)."""
        chunk: dict[str, Any] = await _call(client.get(id))
        for key in ("event_time", "created_at"):
            chunk[key] = iso(chunk.get(key))
        return chunk

    @server.tool(annotations=_ADD)
    async def ingest(
        path: Annotated[
            str, Field(description="An absolute path to a file or folder on this machine.")
        ],
        ctx: Context,
    ) -> dict[str, Any]:
        """Add a file or a folder (documents, code, conversation logs) to long-term memory
        now. Unchanged files are skipped. Returns how many files were ingested or failed."""

        # The client reports progress synchronously; each report is sent as its own task.
        reports: list[asyncio.Future[None]] = []

        def on_progress(params: dict[str, Any]) -> None:
            done, total = params.get("done", 0), params.get("total")
            reports.append(asyncio.ensure_future(ctx.report_progress(done, total)))

        try:
            result: dict[str, Any] = await _call(client.ingest(path, on_progress=on_progress))
        finally:
            await asyncio.gather(*reports, return_exceptions=True)
        return result

    @server.tool(name="list", annotations=_READ)
    async def list_items(
        what: Annotated[
            Literal["documents", "memories", "sources"],
            Field(description="documents, memories, or sources (watched folders with counts)."),
        ] = "documents",
        sources: Annotated[
            list[str] | None, Field(description="Only under these path prefixes (or memory:).")
        ] = None,
        kinds: Annotated[
            list[str] | None,
            Field(description="Documents: text, code, conversation; memories: their type."),
        ] = None,
        tags: Annotated[list[str] | None, Field(description="Only with all of these tags.")] = None,
        since: Annotated[
            str | None, Field(description="Stored (memories: happened) at or after this ISO date.")
        ] = None,
        until: Annotated[
            str | None, Field(description="Stored (memories: happened) before this ISO date.")
        ] = None,
        limit: Annotated[int, Field(ge=1, le=200, description="How many per page.")] = 50,
        offset: Annotated[int, Field(ge=0, description="Skip this many (the next page).")] = 0,
    ) -> dict[str, Any]:
        """Browse what long-term memory holds, a page at a time: the documents stored (by
        source), the memories remembered (newest first), or the watched folders with how
        many documents, chunks and errors each has. `next_offset` gives the next page."""
        page: dict[str, Any] = await _call(
            client.browse(
                what,
                sources=sources or (),
                kinds=kinds or (),
                tags=tags or (),
                since=since,
                until=until,
                limit=limit,
                offset=offset,
            )
        )
        for item in page["items"]:
            for key in ("created_at", "updated_at", "event_time", "last_scan"):
                if key in item:
                    item[key] = iso(item[key])
        return page

    @server.tool(annotations=_READ)
    async def status() -> dict[str, Any]:
        """Whether long-term memory is running, with its model, size (documents, chunks)
        and pending work."""
        result: dict[str, Any] = await _call(client.status())
        return result

    # context, edit, history, link and sources (issue 21); imported here, as that module
    # builds on this one's helpers.
    from recalld.mcp import agent_tools

    agent_tools.register(server, client)
    return server


# The helpers other tool modules share (recalld.mcp.agent_tools).
READ, ADD, REMOVE, call_daemon = _READ, _ADD, _REMOVE, _call


async def serve_stdio(
    client: AsyncClient, search_settings: Mapping[str, Any] | None = None
) -> None:
    """Serve MCP on stdin/stdout until the client closes them."""
    server = build_server(client, search_settings)
    try:
        await server.run_stdio_async()
    finally:
        await client.close()
