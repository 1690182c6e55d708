"""`check --repair` on any backend: check the store, repair what failed, re-ingest the files
of partial documents, and check again.

The repairs themselves are each backend's (`Store.repair`): SQLite's are
`storage.sqlite.repair`; on PostgreSQL (`storage.pg.repair`) the constraints prevent most of
these problems, and what remains is reported.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from recalld.errors import RecalldError
from recalld.storage import checks, registry
from recalld.storage.contract import Embed, Store
from recalld.storage.repair_report import RepairReport
from recalld.storage.sqlite.connection import UNREADABLE, damaged_error, is_damaged


async def check_and_repair(
    store: Store,
    embed: Embed | None,
    ingest: Callable[[Path], Awaitable[object]],
    forget: Callable[[str], Awaitable[object]],
) -> dict[str, Any]:
    """Check the store, repair what failed, re-ingest partial files, and check again.

    Args:
        store: The open store.
        embed: Embeds texts with the store's model (see `Store.repair`).
        ingest: Ingests one file again (a partial document's).
        forget: Removes a document by source (a partial document whose file is gone).

    Returns:
        The `check_store` report made after the repair, with `repair`: what was done
        (`actions`, `reingest`, `unrepaired`) and `before`: `{"ok", "failed"}`.
    """
    try:
        return await _check_and_repair(store, embed, ingest, forget)
    except UNREADABLE as exc:
        if not is_damaged(exc):
            raise
        # A page that cannot be read, met halfway: only a rebuild, with the store closed, mends
        # that (`storage.sqlite.salvage`, run by `check --offline --repair`).
        raise damaged_error(store.path, exc) from exc


async def _check_and_repair(
    store: Store,
    embed: Embed | None,
    ingest: Callable[[Path], Awaitable[object]],
    forget: Callable[[str], Awaitable[object]],
) -> dict[str, Any]:
    before = await asyncio.to_thread(registry.check_store, store.path)
    problems = checks.failed(before)
    done = RepairReport()
    if "store" in problems:
        # A store the checks could not read (SQLite's damaged file): nothing here mends it.
        done.unrepaired.append({"name": "store", "detail": _damaged_detail(before)})
        problems = set()
    elif problems:
        done = await store.repair(embed, problems)
    for source in done.reingest:
        path = Path(source)
        try:
            if await asyncio.to_thread(path.is_file):
                await ingest(path)
            else:
                await forget(source)  # the file is gone: so is its document
        except RecalldError as exc:
            done.unrepaired.append({"name": "partial_documents", "detail": exc.message})
    repaired = problems and done.recheck
    after = await asyncio.to_thread(registry.check_store, store.path) if repaired else before
    if "integrity_check" in checks.failed(after):
        done.unrepaired.append(
            {
                "name": "integrity_check",
                "detail": "SQLite still finds the file damaged after REINDEX; stop recalld and "
                "run `recalld check --offline --repair`, which rebuilds the store from what can "
                "be read (the damaged file is kept beside it)",
            }
        )
    return {
        **after,
        "repair": {**done.as_dict(), "before": {"ok": before["ok"], "failed": sorted(problems)}},
    }


def _damaged_detail(report: dict[str, Any]) -> str:
    detail = next(c["detail"] for c in report["checks"] if c["name"] == "store")
    return str(detail)
