"""Which backend serves a store location, and the one place a store is opened.

A location with a scheme (`postgresql://...`) names its backend by that scheme; anything else
is a SQLite file. Each backend folder offers a `StoreBackend`; its factory here imports it only
when a location needs it, so a backend's driver (psycopg) stays an optional dependency, as
`embeddings.base` does for models. Adding a backend is one folder and one line in `_BACKENDS`.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

from recalld.extras import require
from recalld.storage import exporter, portable
from recalld.storage.contract import Store, StoreBackend
from recalld.storage.records import SPEC_KEY


def _sqlite() -> StoreBackend:
    from recalld.storage.sqlite.backend import SqliteBackend

    return SqliteBackend()


def _postgres() -> StoreBackend:
    require(("psycopg", "psycopg_pool"), "postgres", "a PostgreSQL store (store.path)")
    from recalld.storage.pg.backend import PgBackend  # psycopg is an optional dependency

    return PgBackend()


# Location scheme -> backend; "" is a location without a scheme: a file path.
_BACKENDS: dict[str, Callable[[], StoreBackend]] = {
    "": _sqlite,
    "postgresql": _postgres,
    "postgres": _postgres,
}


def _scheme(location: Path | str) -> str:
    if isinstance(location, str) and "://" in location:
        scheme = location.split("://", 1)[0]
        if scheme in _BACKENDS:
            return scheme
    return ""  # a file path (that may hold "://")


def _full(location: Path | str) -> str:
    # A PostgreSQL store's `path` reads without its password and carries the URL in `url`.
    return str(getattr(location, "url", location))


def backend_for(location: Path | str) -> StoreBackend:
    """The backend that serves `location`."""
    return _BACKENDS[_scheme(location)]()


async def open_store(
    location: Path | str,
    *,
    model_id: str,
    dimension: int,
    readers: int = 4,
    query_timeout_ms: int = 5000,
    model_spec: str | None = None,
    isolate_users: bool = False,
    vector_index: str = "hnsw",
) -> Store:
    """Open (creating or migrating) the store at `location`: a SQLite file or a database URL.

    `model_spec` (as `embed.model` names the model) is recorded with a new store, so a daemon
    whose config names no model can find it again (`stored_model`). `isolate_users` and
    `vector_index` apply to PostgreSQL alone.

    Raises:
        SchemaTooNewError: The store comes from a newer recalld.
        ModelMismatchError: The store was embedded with another model.
        StoreError: The store cannot be opened.
    """
    return await backend_for(location).open(
        _full(location),
        model_id=model_id,
        dimension=dimension,
        readers=readers,
        query_timeout_ms=query_timeout_ms,
        model_spec=model_spec,
        isolate_users=isolate_users,
        vector_index=vector_index,
    )


def stored_meta(location: Path | str) -> dict[str, str] | None:
    """The `meta` table of the store at `location` (model, dimension, spec, reindex state), or
    None when there is no store yet. Blocking; run in a thread."""
    return backend_for(location).stored_meta(_full(location))


def stored_model(location: Path | str) -> tuple[str | None, str, int] | None:
    """`(spec, model_id, dimension)` recorded in the store at `location`, or None (no store or
    no model stamped yet). Blocking; run in a thread."""
    meta = stored_meta(location)
    if meta is None or "model_id" not in meta or "dimension" not in meta:
        return None
    return meta.get(SPEC_KEY), meta["model_id"], int(meta["dimension"])


def check_store(location: Path | str) -> dict[str, Any]:
    """Check the store at `location` without changing it (see `storage.sqlite.check`).

    Raises:
        StoreError: There is no store there, or it cannot be read.
    """
    return backend_for(location).check_store(_full(location))


def export_lines(
    location: Path | str, *, vectors: bool = True, recalld_version: str = ""
) -> Generator[str, None, None]:
    """The store at `location` as JSONL lines (`storage.portable`). Blocking.

    Raises:
        StoreError: No store at `location`, or it cannot be read.
        SchemaTooNewError: The store comes from a newer recalld.
    """
    with backend_for(location).export_snapshot(_full(location)) as snapshot:
        yield from exporter.lines(snapshot, vectors, recalld_version)


def target_tables(location: Path | str) -> dict[str, portable.Table]:
    """The tables of the store that imports, by name (blocking)."""
    return backend_for(location).target_tables(_full(location))
