"""Settings mean what they say (issue 17): a client's `--set search.*` and `RECALLD_SEARCH__*`
shape its searches (CLI and `recalld mcp`), and `config show` says who reads each setting."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import CallToolResult, TextContent

from tests.integration.conftest import Daemon

pytestmark = pytest.mark.integration


@pytest.fixture
def daemon(make_daemon: Callable[..., Daemon]) -> Iterator[Daemon]:
    running = make_daemon()
    running.start()
    running.wait_ready()
    for i in range(6):
        running.client.remember(f"Deploy note {i}: we deploy the harbour app on Thursdays.")
    yield running
    running.stop()


def search(daemon: Daemon, *args: str, **env: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "recalld", "search", "deploy", "--json", *args],
        env={**daemon.env, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_search_settings_from_set_and_env_reach_the_daemon(daemon: Daemon) -> None:
    assert len(search(daemon)["hits"]) == 6
    assert len(search(daemon, "--set", "search.limit=2")["hits"]) == 2
    assert len(search(daemon, RECALLD_SEARCH__LIMIT="2")["hits"]) == 2
    # The command's own flag is more specific than the setting.
    assert len(search(daemon, "--limit", "3", RECALLD_SEARCH__LIMIT="2")["hits"]) == 3
    # Any search option, not only the limit: bm25 alone has no vector route.
    explained = search(daemon, "--explain", RECALLD_SEARCH__MODE="bm25")
    assert all(set(h["explain"]["routes"]) == {"bm25"} for h in explained["hits"])


def test_a_bad_search_setting_is_a_usage_error_not_ignored(daemon: Daemon) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "recalld", "search", "deploy", "--set", "search.limit=many"],
        env=daemon.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "'search.limit' must be a whole number" in done.stderr


async def test_recalld_mcp_honours_set(daemon: Daemon) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "recalld", "mcp", "--set", "search.limit=2"],
        env=daemon.env,
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool("search", {"query": "deploy"})
        assert isinstance(result, CallToolResult) and not result.is_error
        assert result.structured_content is not None
        assert len(result.structured_content["hits"]) == 2
        result = await session.call_tool("search", {"query": "deploy", "limit": 4})
        assert result.structured_content is not None
        assert len(result.structured_content["hits"]) == 4


def test_config_show_says_who_reads_each_setting(daemon: Daemon) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "recalld", "config", "show", "--json", "--set", "search.limit=2"],
        env={**daemon.env, "RECALLD_CHUNK__MAX_TOKENS": "100"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    shown = json.loads(done.stdout)
    assert shown["search.limit"] == {"value": 2, "source": "flag", "applies": "request"}
    assert shown["chunk.max_tokens"]["applies"] == "daemon"
    assert shown["client.timeout_s"]["applies"] == "client"
    assert shown["daemon.socket"]["applies"] == "both"
    table = subprocess.run(
        [sys.executable, "-m", "recalld", "config", "show"],
        env={**daemon.env, "RECALLD_CHUNK__MAX_TOKENS": "100", "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert "Not in effect until a daemon starts with them: " in table
    assert "chunk.max_tokens." in table
    assert "request = sent with every search" in table
    # The daemon's own view: what it was started with.
    assert daemon.client.config_show()["settings"]["search.limit"]["applies"] == "request"


async def test_recalld_mcp_with_the_sdks_default_environment_finds_the_daemon(
    make_daemon: Callable[..., Daemon], short_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An editor starts `recalld mcp` with only HOME, PATH, USER and the like (the MCP SDK's
    default environment): no XDG_RUNTIME_DIR, no RECALLD_*. The daemon, started from a session
    that has XDG_RUNTIME_DIR (as under systemd), listens where that client looks (issue 17)."""
    home = short_dir / "h"
    socket = home / ".cache" / "recalld" / "run" / "recalld.sock"
    daemon = make_daemon(home=home, socket=socket)
    for name in ("RECALLD_HOME", "RECALLD_DAEMON__SOCKET"):
        del daemon.env[name]  # the defaults, derived from the user's home
    daemon.env.update(HOME=str(home), XDG_RUNTIME_DIR=str(short_dir / "xdg-run"))
    daemon.start()
    status = daemon.wait_ready()
    assert status["socket"] == str(socket)
    monkeypatch.setenv("HOME", str(home))  # what the SDK passes on, with PATH, USER, ...
    params = StdioServerParameters(command=sys.executable, args=["-m", "recalld", "mcp"])
    assert params.env is None
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool("status", {})
        assert not result.is_error, result.content
        assert result.structured_content is not None
        assert result.structured_content["socket"] == str(socket)
    daemon.stop()
    # Nobody answers: the error names every place it looked.
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool("status", {})
        assert result.is_error
        block = result.content[0]
        assert isinstance(block, TextContent)
        assert str(socket) in block.text and "also looked at" in block.text
        assert "/run/user/" in block.text


def test_status_wait_answers_once_a_starting_daemon_is_up(
    make_daemon: Callable[..., Daemon],
) -> None:
    daemon = make_daemon()
    daemon.start()  # not waited for: `status --wait` does it
    done = subprocess.run(
        [sys.executable, "-m", "recalld", "status", "--wait", "60", "--json"],
        env=daemon.env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["state"] == "ready"
    daemon.stop()
    gone = subprocess.run(
        [sys.executable, "-m", "recalld", "status", "--wait", "0.5", "--json"],
        env=daemon.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert gone.returncode == 3 and json.loads(gone.stdout)["error"]["type"] == "DaemonNotRunning"


def test_stop_stops_the_daemon(make_daemon: Callable[..., Daemon]) -> None:
    daemon = make_daemon()
    proc = daemon.start()
    daemon.wait_ready()
    done = subprocess.run(
        [sys.executable, "-m", "recalld", "stop", "--json"],
        env=daemon.env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "stopped": True,
        "pid": proc.pid,
        "socket": str(daemon.socket),
    }
    assert proc.wait(30) == 0  # a clean SIGTERM shutdown
    again = subprocess.run(
        [sys.executable, "-m", "recalld", "stop"], env=daemon.env, capture_output=True, timeout=60
    )
    assert again.returncode == 3
