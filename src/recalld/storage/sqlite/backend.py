"""The SQLite backend as `storage.registry` opens it: a store in one file."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from recalld.storage import portable
from recalld.storage.contract import ExportSnapshot, Store, StoreBackend
from recalld.storage.sqlite import check, export_snapshot, store
from recalld.storage.sqlite.connection import connect


class SqliteBackend(StoreBackend):
    """Stores in SQLite files (`location` is the file's path)."""

    async def open(
        self,
        location: str,
        *,
        model_id: str,
        dimension: int,
        readers: int,
        query_timeout_ms: int,
        model_spec: str | None,
        isolate_users: bool,
        vector_index: str,
    ) -> Store:
        return await store.SqliteStore.open(
            Path(location),
            model_id=model_id,
            dimension=dimension,
            readers=readers,
            query_timeout_ms=query_timeout_ms,
            model_spec=model_spec,
        )

    def stored_meta(self, location: str) -> dict[str, str] | None:
        return store.stored_meta(Path(location))

    def check_store(self, location: str) -> dict[str, Any]:
        return check.check_store(Path(location))

    def export_snapshot(self, location: str) -> AbstractContextManager[ExportSnapshot]:
        return export_snapshot.export_snapshot(Path(location))

    def target_tables(self, location: str) -> dict[str, portable.Table]:
        conn = connect(location, readonly=True)
        try:
            return {t.name: t for t in portable.discover(conn)}
        finally:
            conn.close()
