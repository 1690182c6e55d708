"""The MCP tools a coding agent uses beyond search and remember (issue 21): `context`, `edit`,
`history`, `link` and `sources`, each one socket call like the tools in `recalld.mcp.adapter`.

Descriptions say when a model should call the tool; schemas carry their limits, so a model
that sends a bad value gets a validation error before anything reaches the daemon.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from recalld.client import AsyncClient
from recalld.mcp.adapter import ADD, READ, REMOVE, call_daemon, iso
from recalld.projects import project_of

Relation = Literal[
    "similar", "related", "contradicts", "extends", "supersedes", "caused_by", "temporal"
]
MemoryType = Literal["episodic", "semantic", "procedural", "preference"]
SourceKind = Literal["auto", "documents", "code", "conversations"]


def register(server: MCPServer, client: AsyncClient) -> None:
    """Add the tools to `server`; each calls the daemon through `client`."""

    @server.tool(annotations=READ)
    async def context(
        prompt: Annotated[
            str | None,
            Field(
                max_length=20_000,
                description="The task or question at hand; leave out for a general briefing.",
            ),
        ] = None,
        project: Annotated[
            str | None,
            Field(
                max_length=4096,
                description="The project folder (absolute); default: where this server runs.",
            ),
        ] = None,
        budget_tokens: Annotated[
            int, Field(ge=1, le=8000, description="The most tokens the answer may hold.")
        ] = 800,
    ) -> dict[str, Any]:
        """Call this first when you start work in a project, before reading its code: it
        returns what long-term memory holds for this project (its remembered facts, the
        user's preferences, recent decisions) within a small token budget. With a `prompt`,
        it returns only memories confidently related to it, or nothing. Cheaper than several
        searches; each text appears once."""
        folder = project_of(project or os.getcwd())
        result: dict[str, Any] = await call_daemon(
            client.context(
                "prompt" if prompt else "start",
                project=folder,
                prompt=prompt,
                budget_tokens=budget_tokens,
            )
        )
        return {"project": folder, **result}

    @server.tool(annotations=ADD)
    async def edit(
        id: Annotated[int, Field(ge=1, description="The memory's id (from search or remember).")],
        text: Annotated[
            str | None, Field(min_length=1, max_length=20_000, description="The new text.")
        ] = None,
        type: Annotated[MemoryType | None, Field(description="A new memory type.")] = None,
        tags: Annotated[
            list[str] | None, Field(max_length=50, description="Replace the tags with these.")
        ] = None,
        importance: Annotated[
            float | None, Field(ge=0, le=1, description="0 (trivia) to 1 (essential).")
        ] = None,
        event_time: Annotated[
            str | None, Field(max_length=64, description="When it happened, as an ISO date.")
        ] = None,
    ) -> dict[str, Any]:
        """Correct or update a remembered memory in place when the user says it changed
        ("we moved the deploy to Wednesday") or it was wrong. Same id, links and counters; the
        old version is kept (see `history`). Prefer this to remembering a second, conflicting
        memory. Only memories can be edited, not ingested files."""
        if text is None and type is None and tags is None and importance is None:
            if event_time is None:
                raise ToolError("give at least one of text, type, tags, importance, event_time")
        result: dict[str, Any] = await call_daemon(
            client.update(
                id,
                text=text,
                memory_type=type,
                tags=tags,
                importance=importance,
                event_time=event_time,
            )
        )
        return result

    @server.tool(annotations=READ)
    async def history(
        id: Annotated[int, Field(ge=1, description="The memory's id.")],
    ) -> dict[str, Any]:
        """Show how a memory changed: its current text and each earlier version with when it
        was replaced. Call it when the user asks what something used to be, or before
        editing a memory that may have been corrected already."""
        result: dict[str, Any] = await call_daemon(client.history(id))
        for version in result.get("history", []):
            for key in ("event_time", "valid_from", "replaced_at"):
                version[key] = iso(version.get(key))
        return result

    @server.tool(annotations=ADD)
    async def link(
        src: Annotated[int, Field(ge=1, description="The id of the newer or dependent item.")],
        dst: Annotated[int, Field(ge=1, description="The id of the item it relates to.")],
        relation: Annotated[
            Relation,
            Field(description='Reads "src <relation> dst", e.g. 12 supersedes 7.'),
        ],
        weight: Annotated[float, Field(ge=0, le=1, description="How strong (default 1).")] = 1.0,
    ) -> dict[str, Any]:
        """Record how two stored items relate, by their ids: a new decision that
        `supersedes` an old one (the old one then ranks lower), one that `contradicts`
        another, or one `caused_by`, `extends` or `related` to another. Call it when the user
        replaces or disputes something already in memory. Linking again updates the weight."""
        if src == dst:
            raise ToolError("an item cannot be linked to itself")
        result: dict[str, Any] = await call_daemon(client.link(src, dst, relation, weight=weight))
        return result

    @server.tool(annotations=REMOVE)
    async def sources(
        action: Annotated[
            Literal["list", "add", "remove"],
            Field(description="list the watched folders, add one, or stop watching one."),
        ] = "list",
        path: Annotated[
            str | None,
            Field(max_length=4096, description="An absolute folder path (add, remove)."),
        ] = None,
        kind: Annotated[SourceKind, Field(description="What the folder holds (add).")] = "auto",
    ) -> dict[str, Any]:
        """The folders long-term memory keeps in sync. `list` shows them; `add` starts
        watching a folder (its documents, code or conversation logs are ingested and kept up
        to date); `remove` stops watching one and keeps what was stored. Call `add` when the
        user asks you to remember a folder, not for a single file (use `ingest`)."""
        if action == "list":
            return {"sources": await call_daemon(client.sources_list())}
        if not path or not os.path.isabs(path):
            raise ToolError(f"{action} needs an absolute folder path")
        if action == "add":
            added: dict[str, Any] = await call_daemon(client.sources_add(path, kind=kind))
            return added
        removed: dict[str, Any] = await call_daemon(client.sources_remove(path))
        return removed
