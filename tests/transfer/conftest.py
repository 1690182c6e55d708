"""Export and import (issue 8, part 9) reuse the in-process daemon of `tests/pipeline`; the
daemons here run on each backend (SQLite, and PostgreSQL with its own fresh databases)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers.postgres import VECTOR_INDEX
from tests.pipeline.conftest import Running, daemon_env, short_dir, start, stop

__all__ = ["Running", "daemon", "short_dir", "store_env"]

StoreEnv = Callable[[], dict[str, str]]


@pytest.fixture(params=["sqlite", "postgresql"])
def store_env(request: pytest.FixtureRequest) -> Iterator[StoreEnv]:
    """Makes the environment of a new, empty store: on SQLite nothing (each home has its own
    file); on PostgreSQL a fresh database per call, dropped afterwards."""
    if request.param == "sqlite":
        yield dict
        return
    server = request.getfixturevalue("pg_server")
    made: list[str] = []

    def fresh() -> dict[str, str]:
        made.append(server.new_database())
        url = server.url(made[-1])
        return {"RECALLD_STORE__PATH": url, "RECALLD_STORE__VECTOR_INDEX": VECTOR_INDEX}

    yield fresh
    for name in made:
        server.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
async def daemon(
    isolated_home: Path, short_dir: Path, store_env: StoreEnv
) -> AsyncIterator[Running]:
    """A running daemon on an isolated home, on each backend."""
    env = daemon_env(isolated_home, short_dir / "s.sock", **store_env())
    server, task = await start(env)
    try:
        yield Running(server, task, short_dir / "s.sock", isolated_home, env)
    finally:
        assert await stop(server, task) == 0
