"""The PostgreSQL backend as `storage.registry` opens it: a store in one database."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import psycopg

from recalld.storage import portable
from recalld.storage.contract import ExportSnapshot, Store, StoreBackend
from recalld.storage.pg import check, export_snapshot, store


class PgBackend(StoreBackend):
    """Stores in PostgreSQL databases (`location` is the database URL)."""

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
        return await store.PgStore.open_url(
            location,
            model_id=model_id,
            dimension=dimension,
            readers=readers,
            query_timeout_ms=query_timeout_ms,
            isolate_users=isolate_users,
            vector_index=vector_index,
            model_spec=model_spec,
        )

    def stored_meta(self, location: str) -> dict[str, str] | None:
        return store.stored_meta(location)

    def check_store(self, location: str) -> dict[str, Any]:
        return check.check_store(location)

    def export_snapshot(self, location: str) -> AbstractContextManager[ExportSnapshot]:
        return export_snapshot.export_snapshot(location)

    def target_tables(self, location: str) -> dict[str, portable.Table]:
        with psycopg.connect(location) as conn:
            return {t.name: t for t in export_snapshot.discover(conn)}
