"""SQL that both backends run word for word, written once (`?` placeholders: PostgreSQL's
`PgConn.fetchall` translates them). Only text that is really the same on both sides lives here;
the checks' shared queries are in `storage.checks`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# Row counts for `status`. Skipped files (kind 'skipped', no chunks) are counted apart:
# `skipped_files`.
STATUS_COUNTS = (
    "SELECT (SELECT count(*) FROM documents WHERE kind != 'skipped'), "
    "(SELECT count(*) FROM chunks), "
    "(SELECT count(*) FROM documents WHERE state = 'partial'), (SELECT count(*) FROM errors), "
    "(SELECT count(*) FROM links)"
)


def status_counts(row: Sequence[Any]) -> dict[str, int]:
    """The `STATUS_COUNTS` row by name."""
    documents, chunks, partial, errors, links = (int(v) for v in row)
    return {
        "documents": documents,
        "chunks": chunks,
        "partial_documents": partial,
        "errors": errors,
        "links": links,
    }


# A reindex: chunks without a vector from the new model yet, counted (a swap needs none) and
# listed after a chunk id (`?`), up to a limit (`?`), by id.
UNSTAGED_COUNT = (
    "SELECT count(*) FROM chunks c WHERE NOT EXISTS "
    "(SELECT 1 FROM reindex_vectors r WHERE r.chunk_id = c.id)"
)
UNSTAGED_AFTER = (
    "SELECT c.id, c.text FROM chunks c WHERE c.id > ? AND NOT EXISTS "
    "(SELECT 1 FROM reindex_vectors r WHERE r.chunk_id = c.id) ORDER BY c.id LIMIT ?"
)
