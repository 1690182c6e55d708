"""The in-process daemon (uvicorn's `run_server`): `Server.serve()` as a task on the test's loop,
over a real Unix socket, with the deterministic hash embedder."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from recalld.client import AsyncClient
from recalld.daemon.lifecycle import Config, Server


@dataclass
class Running:
    """A daemon serving in this process."""

    server: Server
    task: asyncio.Task[int]
    socket: Path
    home: Path
    env: dict[str, str]

    def client(self) -> AsyncClient:
        return AsyncClient(self.socket, timeout=20)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short temp dir for sockets: pytest's tmp_path can pass the 100-byte limit."""
    path = Path(tempfile.mkdtemp(prefix="rd-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def daemon_env(home: Path, socket: Path, **extra: str) -> dict[str, str]:
    """The environment of a test daemon."""
    return {
        "HOME": str(home),
        "RECALLD_HOME": str(home),
        "RECALLD_EMBED__MODEL": "hash:64",
        "RECALLD_DAEMON__SOCKET": str(socket),
        **extra,
    }


async def start(env: dict[str, str]) -> tuple[Server, asyncio.Task[int]]:
    """Start a daemon task and wait until it serves (or fails to start)."""
    server = Server(
        Config(env=env, install_signal_handlers=False, shutdown_timeout=5, debounce=0.05)
    )
    task = asyncio.create_task(server.serve())
    started = asyncio.create_task(server.started.wait())
    await asyncio.wait({task, started}, timeout=20, return_when=asyncio.FIRST_COMPLETED)
    started.cancel()
    if task.done():
        raise RuntimeError(f"the daemon exited with {task.result()}")
    assert server.started.is_set(), "the daemon did not start in time"
    return server, task


async def stop(server: Server, task: asyncio.Task[int]) -> int:
    """Stop a daemon task and return its exit code."""
    server.should_exit.set()
    return await asyncio.wait_for(task, 20)


@pytest.fixture
async def daemon(isolated_home: Path, short_dir: Path) -> AsyncIterator[Running]:
    """A running daemon on an isolated home."""
    env = daemon_env(isolated_home, short_dir / "s.sock")
    server, task = await start(env)
    try:
        yield Running(server, task, short_dir / "s.sock", isolated_home, env)
    finally:
        assert await stop(server, task) == 0


async def wait_until(predicate: object, limit: float = 10.0) -> None:
    """Await `predicate()` (sync or async) until it is true."""
    deadline = asyncio.get_running_loop().time() + limit
    while True:
        value = predicate()  # type: ignore[operator]
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)
