"""What a `check` report is, on every backend: the checks both run with the same SQL, and how
a report and its checks are built and read (`failed`, `with_check`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from recalld.storage import records

# Each check: a name, one query returning a single number that must be 0, and what it means.
ZERO_CHECKS: tuple[tuple[str, str, str], ...] = (
    (
        "chunks_without_vector",
        "SELECT count(*) FROM chunks c WHERE NOT EXISTS "
        "(SELECT 1 FROM chunks_vec v WHERE v.chunk_id = c.id)",
        "chunks that have no vector",
    ),
    (
        "orphan_vectors",
        "SELECT count(*) FROM chunks_vec v WHERE NOT EXISTS "
        "(SELECT 1 FROM chunks c WHERE c.id = v.chunk_id)",
        "vectors whose chunk is gone",
    ),
    (
        "chunks_without_fts",
        # External-content FTS5 keeps one docsize row per indexed chunk.
        "SELECT count(*) FROM chunks c WHERE NOT EXISTS "
        "(SELECT 1 FROM chunks_fts_docsize f WHERE f.id = c.id)",
        "chunks missing from the full-text index",
    ),
    (
        "orphan_fts_rows",
        "SELECT count(*) FROM chunks_fts_docsize f WHERE NOT EXISTS "
        "(SELECT 1 FROM chunks c WHERE c.id = f.id)",
        "full-text rows whose chunk is gone",
    ),
    (
        "orphan_chunks",
        "SELECT count(*) FROM chunks c WHERE NOT EXISTS "
        "(SELECT 1 FROM documents d WHERE d.id = c.document_id)",
        "chunks whose document is gone",
    ),
    (
        "chunk_count_mismatch",
        "SELECT count(*) FROM documents d WHERE d.chunk_count != "
        "(SELECT count(*) FROM chunks c WHERE c.document_id = d.id)",
        "documents whose chunk_count is wrong",
    ),
    (
        "partial_documents",
        "SELECT count(*) FROM documents WHERE state = 'partial'",
        "documents left half-written (re-ingested on start-up and by repair)",
    ),
)


def result(name: str, value: int, detail: str) -> dict[str, Any]:
    """One check: it passes when `value` (what it counted) is 0."""
    return {"name": name, "ok": value == 0, "value": value, "detail": detail}


def reindex_result(
    state: records.ReindexState | None, staged: int, chunks: int, orphans: int, bad: int
) -> dict[str, Any]:
    """The `reindex` check from its counts."""
    if state is None:
        return result(
            "reindex",
            staged,
            "staged vectors without a reindex in progress; `recalld check --repair` drops them"
            if staged
            else "no reindex in progress",
        )
    detail = f"in progress to {state.model_id} ({state.dimension} dims): {staged}/{chunks} staged"
    if orphans or bad:
        detail += (
            f"; {orphans} staged without a chunk, {bad} of the wrong size "
            "(`recalld check --repair` drops them; the reindex embeds them again)"
        )
    return result("reindex", orphans + bad, detail)


def report(
    path: Path | str, counts: dict[str, int], checks: list[dict[str, Any]], started: float
) -> dict[str, Any]:
    """The report of a check run that started at `started` (`time.perf_counter()`)."""
    return {
        "ok": all(c["ok"] for c in checks),
        "path": str(path),
        "counts": counts,
        "checks": checks,
        "elapsed_ms": round((time.perf_counter() - started) * 1000, 1),
    }


def vector_index_result(found: tuple[int, int] | None) -> dict[str, Any]:
    """The `vector_index_memory` check of a running daemon: its in-memory vector index against the
    store's rows (`Store.check_vector_index`; `found` is `(missing, extra)` or None)."""
    if found is None:
        return result("vector_index_memory", 0, "not loaded (it loads on the first search)")
    missing, extra = found
    if missing or extra:
        return result(
            "vector_index_memory",
            missing + extra,
            f"the in-memory vector index misses {missing} rows and holds {extra} gone ones "
            "(another process wrote the store since it loaded); dropped, the next search "
            "reloads it",
        )
    return result("vector_index_memory", 0, "matches the store")


def with_check(report: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """`report` with one more check (and `ok` updated)."""
    return {**report, "ok": report["ok"] and result["ok"], "checks": [*report["checks"], result]}


def failed(report: dict[str, Any]) -> set[str]:
    """The names of the checks that failed in a `check_store` report."""
    return {c["name"] for c in report["checks"] if not c["ok"]}
