"""`check`: verify the store's invariants without changing anything.

- every chunk has exactly one vector and one FTS row (vector / FTS / chunk count parity);
- no orphan vectors, no chunk without its document;
- each document's `chunk_count` matches its chunks;
- no document is left `partial`;
- `PRAGMA integrity_check` (https://sqlite.org/pragma.html#pragma_integrity_check).

It opens its own read-only connection without the reader pool's time limit: an integrity check
of a large file can take longer than any search should. Blocking; run it in a thread.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from recalld.errors import StoreError
from recalld.storage.connection import DatabaseError, connect

# Each check: a name, one query returning a single number that must be 0, and what it means.
_ZERO_CHECKS: tuple[tuple[str, str, str], ...] = (
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
        "documents left half-written (re-ingested on start-up)",
    ),
)


def _scalar(conn: Any, sql: str) -> int:
    return int(conn.execute(sql).fetchone()[0])


def check_store(path: Path) -> dict[str, Any]:
    """Run every check on the store file at `path`.

    Returns:
        `{"ok": bool, "counts": {...}, "checks": [{"name", "ok", "value", "detail"}], ...}`.

    Raises:
        StoreError: The file does not exist or cannot be read as a store.
    """
    if not path.exists():
        raise StoreError(
            f"no store at {path}; start `recalld serve` once to create it", data={"path": str(path)}
        )
    started = time.perf_counter()
    try:
        conn = connect(path, readonly=True)
    except DatabaseError as exc:
        raise StoreError(f"cannot open store {path}: {exc}") from exc
    try:
        counts = {
            "documents": _scalar(conn, "SELECT count(*) FROM documents"),
            "chunks": _scalar(conn, "SELECT count(*) FROM chunks"),
            "vectors": _scalar(conn, "SELECT count(*) FROM chunks_vec"),
            # External-content FTS5 keeps one docsize row per indexed chunk.
            "fts_rows": _scalar(conn, "SELECT count(*) FROM chunks_fts_docsize"),
        }
        checks: list[dict[str, Any]] = []
        for name, sql, detail in _ZERO_CHECKS:
            value = _scalar(conn, sql)
            checks.append({"name": name, "ok": value == 0, "value": value, "detail": detail})
        fts_gap = abs(counts["fts_rows"] - counts["chunks"])
        checks.append(
            {
                "name": "fts_parity",
                "ok": fts_gap == 0,
                "value": fts_gap,
                "detail": "difference between FTS rows and chunks",
            }
        )
        vec_gap = abs(counts["vectors"] - counts["chunks"])
        checks.append(
            {
                "name": "vector_parity",
                "ok": vec_gap == 0,
                "value": vec_gap,
                "detail": "difference between vectors and chunks",
            }
        )
        problems = [str(r[0]) for r in conn.execute("PRAGMA integrity_check").fetchall()]
        sane = problems == ["ok"]
        checks.append(
            {
                "name": "integrity_check",
                "ok": sane,
                "value": 0 if sane else len(problems),
                "detail": "; ".join(problems[:10]),
            }
        )
    except DatabaseError as exc:
        raise StoreError(f"cannot check store {path}: {exc}") from exc
    finally:
        conn.close()
    return {
        "ok": all(c["ok"] for c in checks),
        "path": str(path),
        "counts": counts,
        "checks": checks,
        "elapsed_ms": round((time.perf_counter() - started) * 1000, 1),
    }
