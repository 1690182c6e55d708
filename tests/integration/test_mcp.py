"""`recalld mcp` (issue 8, part 7): a real daemon, driven through the MCP client of the `mcp`
package over stdio, the way an assistant or editor runs it."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import CallToolResult, TextContent

from tests.integration.conftest import Daemon

pytestmark = pytest.mark.integration

TOOLS = {"search", "remember", "forget", "get", "ingest", "list", "status"} | {
    "context",
    "edit",
    "history",
    "link",
    "sources",
}


@pytest.fixture
def daemon(make_daemon: Callable[..., Daemon]) -> Iterator[Daemon]:
    running = make_daemon()
    running.start()
    running.wait_ready()
    yield running
    running.stop()


def server_params(daemon: Daemon) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "recalld", "mcp"], env=daemon.env
    )


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    assert isinstance(result, CallToolResult)
    assert not result.is_error, result.content
    data = result.structured_content
    assert isinstance(data, dict)
    # The text block carries the same JSON, for clients that ignore structured content.
    block = result.content[0]
    assert isinstance(block, TextContent) and json.loads(block.text) == data
    return data


async def error_text(session: ClientSession, tool: str, **arguments: Any) -> str:
    result = await session.call_tool(tool, arguments)
    assert isinstance(result, CallToolResult) and result.is_error
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def test_tools_against_a_running_daemon(daemon: Daemon, tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "boat.md").write_text("# Boat\n\nThe dinghy's oars are stored in the blue shed.\n")
    async with (
        stdio_client(server_params(daemon)) as (read, write),
        ClientSession(read, write) as session,
    ):
        init = await session.initialize()
        assert init.server_info.name == "recalld"
        listed = await session.list_tools()
        tools = {tool.name: tool for tool in listed.tools}
        assert set(tools) == TOOLS
        for tool in tools.values():
            assert tool.description and len(tool.description) > 60, tool.name
        assert set(tools["search"].input_schema["required"]) == {"query"}
        assert tools["search"].annotations is not None
        assert tools["search"].annotations.read_only_hint

        saved = await call(
            session,
            "remember",
            text="The harbour master's name is Ines Duarte",
            type="semantic",
            tags=["people", "harbour"],
            importance=0.8,
            event_time="2024-03-01",
        )
        assert saved["status"] == "ingested" and saved["source"].startswith("memory:")

        found = await call(session, "search", query="who is the harbour master", tags=["people"])
        assert found["hits"][0]["id"] == saved["id"]
        assert found["hits"][0]["event_time"] == "2024-03-01T00:00:00+00:00"
        explained = await call(session, "search", query="harbour master", explain=True, limit=1)
        assert "routes" in explained["hits"][0]["explain"] and "tier" in explained["explain"]

        chunk = await call(session, "get", id=saved["id"])
        assert chunk["text"] == "The harbour master's name is Ines Duarte"
        assert chunk["tags"] == ["people", "harbour"] and chunk["importance"] == 0.8

        report = await call(session, "ingest", path=str(notes))
        assert report["ingested"] == 1 and report["failed"] == 0
        found = await call(session, "search", query="where are the oars")
        assert found["hits"][0]["source"] == str((notes / "boat.md").resolve())

        status = await call(session, "status")
        assert status["state"] == "ready" and status["counts"]["documents"] == 2

        assert (await call(session, "forget", id=saved["id"]))["forgotten"] is True
        hits = (await call(session, "search", query="harbour master Ines", tags=["people"]))["hits"]
        assert all(h["id"] != saved["id"] for h in hits)

        # The daemon's errors come back as tool errors with its message.
        assert "NotFoundError: no chunk with id 999999" in await error_text(
            session, "get", id=999999
        )
        assert "NotFoundError" in await error_text(session, "ingest", path=str(tmp_path / "nope"))
        assert "exactly one" in await error_text(session, "forget")
        assert "QueryError" in await error_text(session, "search", query="   ")

        # Without the daemon: a clear error, and the MCP server keeps serving.
        daemon.stop()
        assert "recalld is not available" in await error_text(session, "status")
        assert "recalld serve" in await error_text(session, "search", query="oars")
        daemon.start()
        daemon.wait_ready()
        assert (await call(session, "status"))["counts"]["documents"] == 1


async def test_list_tool_pages_documents_memories_and_sources(
    daemon: Daemon, tmp_path: Path
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    for name in ("a.md", "b.md", "c.md"):
        (notes / name).write_text(f"# {name}\n\nA note called {name}.\n")
    daemon.client.sources_add(notes)
    daemon.wait_for(lambda s: s["counts"]["documents"] == 3)
    daemon.client.remember("Ines prefers tea", tags=["drinks"], event_time="2024-03-01")
    async with (
        stdio_client(server_params(daemon)) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert tools["list"].annotations is not None and tools["list"].annotations.read_only_hint

        first = await call(session, "list", limit=2)
        assert first["total"] == 3 and first["next_offset"] == 2
        rest = await call(session, "list", limit=2, offset=2)
        assert [d["source"] for d in first["items"] + rest["items"]] == [
            str((notes / n).resolve()) for n in ("a.md", "b.md", "c.md")
        ]
        assert rest["next_offset"] is None and rest["items"][0]["updated_at"].endswith("+00:00")

        memories = await call(session, "list", what="memories", tags=["drinks"])
        assert [m["text"] for m in memories["items"]] == ["Ines prefers tea"]
        assert memories["items"][0]["event_time"] == "2024-03-01T00:00:00+00:00"

        sources = await call(session, "list", what="sources")
        mine = next(s for s in sources["items"] if s["path"] == str(notes.resolve()))
        assert (mine["documents"], mine["errors"]) == (3, 0) and mine["chunks"] >= 3

        assert "is not one of episodic" in await error_text(
            session, "list", what="memories", kinds=["x"]
        )

        # forget with a path removes what it holds and keeps it out.
        gone = await call(session, "forget", source=str((notes / "b.md").resolve()))
        assert gone["forgotten"] == 1 and gone["kept_out"] is True
        (notes / "b.md").write_text("# b.md\n\nTouched after the forget.\n")
        (notes / "d.md").write_text("# d.md\n\nA note written after the forget.\n")
        daemon.wait_for(lambda s: s["counts"]["documents"] == 4)  # a, c, d + the memory
        listed = await call(session, "list")
        assert [d["source"] for d in listed["items"]] == [
            str((notes / n).resolve()) for n in ("a.md", "c.md", "d.md")
        ]
