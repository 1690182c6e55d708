"""`check` on PostgreSQL: the SQLite checks' invariants, in the same report shape.

Foreign keys (`ON DELETE CASCADE`) and the generated `tsv` column make orphan vectors and
missing or stale full-text rows impossible here, but they are counted all the same, so the
report has the same checks on both backends; SQLite's `integrity_check` and FTS5's
`integrity-check` have no counterpart and are left out. Blocking; run it in a thread.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg

from recalld.errors import StoreError
from recalld.storage import checks as check_report
from recalld.storage import records
from recalld.storage.pg.store import redact

# The SQLite checks whose SQL is plain SQL on the same tables; FTS rows are the chunks' tsv.
_SHARED = {
    "chunks_without_vector",
    "orphan_vectors",
    "orphan_chunks",
    "chunk_count_mismatch",
    "partial_documents",
}


def check_store(url: str) -> dict[str, Any]:
    """Run every check on the PostgreSQL store at `url`; the report names it without password."""
    started = time.perf_counter()
    shown = redact(url)
    try:
        with psycopg.connect(url, autocommit=True) as conn:

            def scalar(sql: str) -> int:
                row = conn.execute(sql.encode()).fetchone()
                return int(row[0]) if row else 0

            if not scalar("SELECT count(*) FROM pg_class WHERE relname = 'chunks_vec'"):
                counts = dict.fromkeys(("documents", "chunks", "vectors", "fts_rows"), 0)
                checks = [
                    check_report.result("schema", 0, "an empty store; `recalld serve` creates it")
                ]
                return check_report.report(shown, counts, checks, started)
            counts = {
                "documents": scalar("SELECT count(*) FROM documents"),
                "chunks": scalar("SELECT count(*) FROM chunks"),
                "vectors": scalar("SELECT count(*) FROM chunks_vec"),
                "fts_rows": scalar("SELECT count(*) FROM chunks WHERE tsv IS NOT NULL"),
            }
            checks = [
                check_report.result(name, scalar(sql), detail)
                for name, sql, detail in check_report.ZERO_CHECKS
                if name in _SHARED
            ]
            checks.append(
                check_report.result(
                    "chunks_without_fts",
                    counts["chunks"] - counts["fts_rows"],
                    "chunks missing from the full-text index",
                )
            )
            checks.append(
                check_report.result(
                    "vector_parity",
                    abs(counts["vectors"] - counts["chunks"]),
                    "difference between vectors and chunks",
                )
            )
            stored = scalar("SELECT value::int FROM meta WHERE key = 'dimension'")
            actual = scalar(
                "SELECT atttypmod FROM pg_attribute WHERE attrelid = 'chunks_vec'::regclass "
                "AND attname = 'embedding'"
            )
            checks.append(
                check_report.result(
                    "model",
                    int(stored != actual),
                    f"meta says {stored} dimensions, the vector column holds {actual}",
                )
            )
            # Staged rows go with their chunk (foreign key), so none can be orphaned here.
            meta = {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta")}
            state = records.state_from_meta(meta)
            bad = 0
            if state is not None:
                bad = scalar(
                    "SELECT count(*) FROM reindex_vectors "
                    f"WHERE vector_dims(embedding) <> {int(state.dimension)}"
                )
            staged = scalar("SELECT count(*) FROM reindex_vectors")
            checks.append(check_report.reindex_result(state, staged, counts["chunks"], 0, bad))
    except psycopg.Error as exc:
        raise StoreError(f"cannot check store {shown}: {exc}") from exc
    return check_report.report(shown, counts, checks, started)
