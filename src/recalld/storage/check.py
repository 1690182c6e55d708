"""`check`: verify the store's invariants without changing anything.

- every chunk has exactly one vector and one FTS row, and every vector and FTS row a chunk;
- no chunk without its document; each document's `chunk_count` matches its chunks;
- no document is left `partial`;
- the vector cascade's tables (`vector_codes`, `vector_floats`) mirror `chunks_vec`;
- the embedding model and dimension in `meta` match the vector table;
- a reindex in progress (storage/sqlite/reindex.py) is reported, not flagged: its staging table is
  half-full by design; its rows must belong to live chunks, have the target's dimension, and
  exist only while a reindex is recorded;
- FTS5's own `integrity-check`, comparing the index with the chunks it was built from
  (https://sqlite.org/fts5.html#the_integrity_check_command);
- `PRAGMA integrity_check` (https://sqlite.org/pragma.html#pragma_integrity_check);
- every stored value can be read back and sent as JSON (`storage.sqlite.values`): the ids of rows
  holding an `inf` time, text that is not UTF-8 and the like are reported.

It opens its own connections without the reader pool's time limit: an integrity check of a
large file can take longer than any search should. FTS5 runs its integrity check as an
`INSERT`, which a read-only connection refuses, so that one runs on a writable connection
inside a transaction that is rolled back. Blocking; run it in a thread. `storage.sqlite.repair`
restores what this finds broken.
"""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path
from typing import Any

from recalld.errors import StoreError
from recalld.storage import records
from recalld.storage.backend import is_url
from recalld.storage.sqlite import values
from recalld.storage.sqlite.connection import UNREADABLE, DatabaseError, connect, damaged_error

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

# The vector cascade's copies of chunks_vec (storage/sqlite/vectors.py), checked when present. Table
# names cannot be bound as parameters; these are our own constants.
MIRROR_TABLES = ("vector_codes", "vector_floats")
_MIRROR_GAP = (
    "SELECT (SELECT count(*) FROM chunks_vec v WHERE NOT EXISTS "
    "(SELECT 1 FROM {table} m WHERE m.chunk_id = v.chunk_id)) + (SELECT count(*) FROM {table} m "
    "WHERE NOT EXISTS (SELECT 1 FROM chunks_vec v WHERE v.chunk_id = m.chunk_id))"
)
_FLOAT_DIMENSION = re.compile(r"float\[(\d+)\]")

# A damaged file fails a check with one of these (StoreError: a connection that cannot open).
_CHECK_ERRORS: tuple[type[Exception], ...] = (*UNREADABLE, StoreError)

FTS_INTEGRITY_SQL = "INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('integrity-check', 1)"


def _scalar(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...] = ()) -> int:
    return int(conn.execute(sql, params).fetchone()[0])


def _result(name: str, value: int, detail: str) -> dict[str, Any]:
    return {"name": name, "ok": value == 0, "value": value, "detail": detail}


def table_exists(conn: sqlite3.Connection, name: str) -> bool:
    """Whether the store has a table (or virtual table) called `name`."""
    return _scalar(conn, "SELECT count(*) FROM sqlite_master WHERE name = ?", (name,)) > 0


def vector_table_dimension(conn: sqlite3.Connection) -> int | None:
    """The dimension `chunks_vec` was created with (None before the first model stamped it)."""
    row = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'chunks_vec'").fetchone()
    found = _FLOAT_DIMENSION.search(str(row[0])) if row else None
    return int(found.group(1)) if found else None


def _model_check(conn: sqlite3.Connection) -> dict[str, Any]:
    meta = {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta").fetchall()}
    table = vector_table_dimension(conn)
    model, dimension = meta.get("model_id"), meta.get("dimension")
    if model is None and dimension is None and table is None:
        return _result("model", 0, "no model stamped yet (a new store)")
    if model is None or dimension is None or not dimension.isdigit():
        return _result(
            "model", 1, f"meta names no model or dimension; the vector table has {table}"
        )
    if table != int(dimension):
        return _result(
            "model",
            1,
            f"meta says {model} ({dimension} dims) but the vector table holds {table}-dim "
            "vectors; re-embed the store",
        )
    return _result("model", 0, f"{model} ({dimension} dims)")


def _reindex_check(conn: sqlite3.Connection, chunks: int) -> dict[str, Any]:
    meta = {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta").fetchall()}
    state = records.state_from_meta(meta)
    staged = _scalar(conn, "SELECT count(*) FROM reindex_vectors")
    orphans = _scalar(
        conn,
        "SELECT count(*) FROM reindex_vectors r WHERE NOT EXISTS "
        "(SELECT 1 FROM chunks c WHERE c.id = r.chunk_id)",
    )
    bad = 0
    if state is not None:
        bad = _scalar(
            conn,
            "SELECT count(*) FROM reindex_vectors WHERE length(embedding) != ?",
            (4 * state.dimension,),
        )
    return reindex_result(state, staged, chunks, orphans, bad)


def reindex_result(
    state: records.ReindexState | None, staged: int, chunks: int, orphans: int, bad: int
) -> dict[str, Any]:
    """The `reindex` check from its counts (shared with the PostgreSQL check)."""
    if state is None:
        return _result(
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
    return _result("reindex", orphans + bad, detail)


def _values_check(conn: sqlite3.Connection) -> dict[str, Any]:
    """Values that cannot be read back or sent as JSON (`storage.sqlite.values`), by table and
    id."""
    found = values.scan(conn)
    count = sum(len(rows) for rows in found.values())
    if not found:
        return _result("unreadable_values", 0, "every stored value can be read back")
    result = _result(
        "unreadable_values",
        count,
        f"values that cannot be read back: {values.describe(found)}; "
        "`recalld check --repair` resets them",
    )
    result["ids"] = {table: sorted(rows)[:1000] for table, rows in found.items()}
    return result


def _fts_integrity(path: Path) -> dict[str, Any]:
    conn = connect(path)
    try:
        # IMMEDIATE: take the write lock first, waiting for the daemon's writer (busy_timeout).
        # A deferred transaction upgraded mid-statement fails at once when a write slipped in.
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(FTS_INTEGRITY_SQL)
            return _result("fts_integrity", 0, "")
        except DatabaseError as exc:
            if "locked" in str(exc):
                raise
            return _result("fts_integrity", 1, f"{exc}; `recalld check --repair` rebuilds it")
        finally:
            conn.execute("ROLLBACK")
    finally:
        conn.close()


def check_store(path: Path | str) -> dict[str, Any]:
    """Run every check on the store file at `path` (or the PostgreSQL store its URL names).

    Returns:
        `{"ok": bool, "path", "counts": {...}, "checks": [{"name", "ok", "value", "detail"}],
        "elapsed_ms"}`.

    A file SQLite finds damaged (not a database, a malformed page) is reported by a failing
    `store` check, with what the checks found before it.

    Raises:
        StoreError: The file does not exist or cannot be read for another reason.
    """
    if is_url(path):  # a PostgreSQL store's `path` (see `storage.pg.store.StoreUrl`)
        from recalld.storage.pg.check import check_store as check_postgres

        return check_postgres(getattr(path, "url", str(path)))
    path = Path(path)
    if not path.exists():
        raise StoreError(
            f"no store at {path}; start `recalld serve` once to create it", data={"path": str(path)}
        )
    started = time.perf_counter()
    counts = dict.fromkeys(("documents", "chunks", "vectors", "fts_rows"), 0)
    checks: list[dict[str, Any]] = []
    try:
        conn = connect(path, readonly=True)
    except StoreError as exc:
        if exc.data.get("reason") != "damaged":
            raise
        # Reported, not raised: a damaged store is what `check` is for.
        return _report(path, counts, [_result("store", 1, exc.message)], started)
    except DatabaseError as exc:
        raise StoreError(f"cannot open store {path}: {exc}") from exc
    try:
        if not table_exists(conn, "documents"):
            # Created and never migrated (a first start that was killed): nothing to violate.
            counts = dict.fromkeys(("documents", "chunks", "vectors", "fts_rows"), 0)
            checks = [_result("schema", 0, "an empty store; `recalld serve` creates its tables")]
            return _report(path, counts, checks, started)
        # A first start killed before the model was stamped leaves no vector table yet.
        has_vectors = table_exists(conn, "chunks_vec")
        counts = {
            "documents": _scalar(conn, "SELECT count(*) FROM documents"),
            "chunks": _scalar(conn, "SELECT count(*) FROM chunks"),
            "vectors": _scalar(conn, "SELECT count(*) FROM chunks_vec") if has_vectors else 0,
            "fts_rows": _scalar(conn, "SELECT count(*) FROM chunks_fts_docsize"),
        }
        checks.clear()
        for name, sql, detail in ZERO_CHECKS:
            if has_vectors or "chunks_vec" not in sql:
                checks.append(_result(name, _scalar(conn, sql), detail))
            elif name == "chunks_without_vector":
                checks.append(_result(name, counts["chunks"], detail))
        checks.append(
            _result(
                "fts_parity",
                abs(counts["fts_rows"] - counts["chunks"]),
                "difference between FTS rows and chunks",
            )
        )
        checks.append(
            _result(
                "vector_parity",
                abs(counts["vectors"] - counts["chunks"]),
                "difference between vectors and chunks",
            )
        )
        mirrors = [t for t in MIRROR_TABLES if table_exists(conn, t)] if has_vectors else []
        if mirrors:
            gap = sum(_scalar(conn, _MIRROR_GAP.format(table=t)) for t in mirrors)
            checks.append(
                _result("vector_index", gap, "vectors missing from or extra in the vector index")
            )
        checks.append(_model_check(conn))
        checks.append(_values_check(conn))
        if table_exists(conn, "reindex_vectors"):
            checks.append(_reindex_check(conn, counts["chunks"]))
        checks.append(_fts_integrity(path))
        problems = [str(r[0]) for r in conn.execute("PRAGMA integrity_check").fetchall()]
        sane = problems == ["ok"]
        checks.append(
            _result("integrity_check", 0 if sane else len(problems), "; ".join(problems[:10]))
        )
    except _CHECK_ERRORS as exc:
        # In a read-only check, an error other than a lock means a page that cannot be read.
        damaged = "locked" not in str(exc) and (
            not isinstance(exc, StoreError) or exc.data.get("reason") == "damaged"
        )
        if not damaged and isinstance(exc, StoreError):
            raise
        if not damaged:
            raise StoreError(f"cannot check store {path}: {exc}") from exc
        message = exc.message if isinstance(exc, StoreError) else damaged_error(path, exc).message
        checks.append(_result("store", 1, message))
    finally:
        conn.close()
    return _report(path, counts, checks, started)


def _report(
    path: Path, counts: dict[str, int], checks: list[dict[str, Any]], started: float
) -> dict[str, Any]:
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
        return _result("vector_index_memory", 0, "not loaded (it loads on the first search)")
    missing, extra = found
    if missing or extra:
        return _result(
            "vector_index_memory",
            missing + extra,
            f"the in-memory vector index misses {missing} rows and holds {extra} gone ones "
            "(another process wrote the store since it loaded); dropped, the next search "
            "reloads it",
        )
    return _result("vector_index_memory", 0, "matches the store")


def with_check(report: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """`report` with one more check (and `ok` updated)."""
    return {**report, "ok": report["ok"] and result["ok"], "checks": [*report["checks"], result]}


def failed(report: dict[str, Any]) -> set[str]:
    """The names of the checks that failed in a `check_store` report."""
    return {c["name"] for c in report["checks"] if not c["ok"]}
