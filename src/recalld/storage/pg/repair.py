"""`check --repair` on PostgreSQL: the schema's constraints prevent most of what SQLite's
repairs mend (`storage.sqlite.repair`), and what remains is reported, not guessed at, except
unusable staged vectors of a reindex, which are dropped as on SQLite."""

from __future__ import annotations

from recalld.storage.contract import Store
from recalld.storage.repair_report import RepairReport


async def repair_store(store: Store, failed: set[str]) -> RepairReport:
    """Drop bad staged vectors (`reindex`); report every other failed check as unrepaired."""
    # Only dropping staged vectors changes the store: anything else leaves the first check.
    report = RepairReport(recheck="reindex" in failed)
    if "reindex" in failed:
        dropped = await store.write(lambda r: r.drop_stray_vectors())
        report.did("reindex_rows_dropped", dropped, "bad staged vectors")
    report.unrepaired += [
        {"name": name, "detail": "repair on PostgreSQL is not built yet"}
        for name in sorted(failed - {"reindex"})
    ]
    return report
