"""The MCP tools of issue 21 (`context`, `edit`, `history`, `link`, `sources`) and `remember`'s
project scope, through the `mcp` package's own client against a real daemon."""

from __future__ import annotations

import sys
from pathlib import Path

from mcp import ClientSession, StdioServerParameters, stdio_client

from tests.integration.conftest import Daemon
from tests.integration.test_mcp import call, daemon, error_text  # noqa: F401 - fixture

PROJECT_FACT = "The heron service pins protobuf to version four"
GLOBAL_PREF = "I prefer tabs over spaces in every language"


def params(running: Daemon, cwd: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "recalld", "mcp"], env=running.env, cwd=str(cwd)
    )


async def test_agent_tools(daemon: Daemon, tmp_path: Path) -> None:  # noqa: F811
    project = tmp_path / "heron"
    (project / ".git").mkdir(parents=True)
    (project / "docs").mkdir()
    other = tmp_path / "egret"
    other.mkdir()
    async with (
        stdio_client(params(daemon, project / "docs")) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        tools = {t.name: t for t in (await session.list_tools()).tools}
        for name in ("context", "edit", "history", "link", "sources"):
            assert len(tools[name].description or "") > 100, name
        schema = tools["context"].input_schema["properties"]["budget_tokens"]
        assert schema["minimum"] == 1 and schema["maximum"] == 8000
        assert set(tools["link"].input_schema["required"]) == {"src", "dst", "relation"}

        fact = await call(session, "remember", text=PROJECT_FACT, project=True)
        await call(session, "remember", text=GLOBAL_PREF, type="preference")

        # context: this project's memory and the global preference, within the budget.
        brief = await call(session, "context", budget_tokens=200)
        assert brief["project"] == str(project)
        assert PROJECT_FACT in brief["text"] and GLOBAL_PREF in brief["text"]
        assert 0 < brief["tokens"] <= 200
        elsewhere = await call(session, "context", project=str(other))
        assert PROJECT_FACT not in elsewhere["text"] and GLOBAL_PREF in elsewhere["text"]
        unrelated = await call(session, "context", prompt="a sonnet about autumn leaves")
        assert unrelated["text"] == ""
        assert "budget_tokens" in await error_text(session, "context", budget_tokens=0)

        # edit and history.
        edited = await call(
            session, "edit", id=fact["id"], text="The heron service pins protobuf to version five"
        )
        assert edited["version"] == 2
        past = await call(session, "history", id=fact["id"])
        assert [v["text"] for v in past["history"]] == [PROJECT_FACT]
        assert past["history"][0]["replaced_at"].endswith("+00:00")
        assert "give at least one" in await error_text(session, "edit", id=fact["id"])

        # link: supersedes ranks the old one down; a self link is refused.
        old = await call(session, "remember", text="The heron service used protobuf three")
        linked = await call(session, "link", src=fact["id"], dst=old["id"], relation="supersedes")
        assert linked["relation"] == "supersedes"
        assert (await call(session, "get", id=old["id"]))["status"] == "superseded"
        assert "itself" in await error_text(
            session, "link", src=old["id"], dst=old["id"], relation="related"
        )
        assert "relation" in await error_text(
            session, "link", src=fact["id"], dst=old["id"], relation="likes"
        )

        # sources: add, list, remove.
        watched = tmp_path / "notes"
        watched.mkdir()
        added = await call(session, "sources", action="add", path=str(watched))
        assert added["path"] == str(watched)
        listed = await call(session, "sources")
        assert str(watched) in {s["path"] for s in listed["sources"]}
        removed = await call(session, "sources", action="remove", path=str(watched))
        assert removed["path"] == str(watched)
        assert "absolute" in await error_text(session, "sources", action="add", path="notes")
