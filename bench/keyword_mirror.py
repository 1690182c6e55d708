"""The keyword side of a search, statement by statement: FTS5 beside the in-memory mirror
(storage/sqlite/keywords.py), query by query interleaved, on one store file.

    python -m bench.keyword_mirror STORE.db [--data ../shared/data/scifact] [--limit 300]

For each judged query of the split: FTS5's ranked MATCH (`ORDER BY rank LIMIT 50`), the same
MATCH listing its rows unranked (how many rows an OR of the terms matches), the keyword
scores of 50 ids, the document-frequency counts and the coverage probes; then the mirror's
answer to each, which must be the same ids and scores (checked). Prints medians and p90s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from bench.perf import select
from recalld.storage.fts import match_expression, query_terms, quote_term
from recalld.storage.sqlite import keywords
from recalld.storage.sqlite.connection import sqlite

T = TypeVar("T")
RANKED = "SELECT rowid, rank FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY rank LIMIT 50"
LISTED = "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?"
SCORES = (
    "SELECT rowid, rank FROM chunks_fts WHERE chunks_fts MATCH ? "
    "AND +rowid IN (SELECT value FROM json_each(?))"
)
COUNT = "(SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?)"
PROBE = "EXISTS (SELECT 1 FROM chunks_fts WHERE chunks_fts MATCH ? AND rowid = ?)"


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    started = time.perf_counter()
    out = fn()
    return (time.perf_counter() - started) * 1000, out


def _one(
    db: Any,
    snapshot: keywords.Snapshot,
    tokens_of: keywords.Tokens,
    text: str,
    samples: dict[str, list[float]],
) -> int:
    """Time one query's statements into `samples`; 1 if a term is a phrase (FTS5 only)."""

    def add(name: str, value: float) -> None:
        samples.setdefault(name, []).append(value)

    terms = query_terms(text)
    expr = match_expression(terms)
    quoted = [quote_term(t) for t in terms]
    add("terms", len(terms))
    ms, rows = timed(lambda: db.execute(RANKED, (expr,)).fetchall())
    add("fts5 ranked MATCH", ms)
    ms, listed = timed(lambda: db.execute(LISTED, (expr,)).fetchall())
    add("fts5 rows listed, unranked", ms)
    add("rows matched", len(listed))
    ids = [int(r[0]) for r in rows]
    listing = json.dumps(ids)
    add("fts5 scores of 50 ids", timed(lambda: db.execute(SCORES, (expr, listing)).fetchall())[0])
    counts = "SELECT " + ", ".join([COUNT] * len(quoted))
    add("fts5 term counts", timed(lambda: db.execute(counts, quoted).fetchall())[0])
    chunk = ids[0] if ids else 0
    probes = "SELECT " + ", ".join([PROBE] * len(quoted))
    values = [v for q in quoted for v in (q, chunk)]
    add("fts5 coverage probes", timed(lambda: db.execute(probes, values).fetchall())[0])
    found = tokens_of.of(terms)
    if any(len(p) != 1 for p in found):
        return 1
    tokens = [p[0] for p in found]
    ms, top = timed(lambda: keywords.ranked(*snapshot.scores(tokens), 50))
    assert top == [(int(r[0]), -float(r[1])) for r in rows], text
    add("mirror ranked", ms)
    add("mirror scores of 50 ids", timed(lambda: keywords.scores_of(ids)(snapshot, [tokens]))[0])
    add("mirror term counts", timed(lambda: [snapshot.frequency([t]) for t in tokens])[0])
    add("mirror coverage probes", timed(lambda: [snapshot.contains(t, chunk) for t in tokens])[0])
    return 0


def run(path: Path, data: Path, limit: int) -> dict[str, Any]:
    db = sqlite.connect(f"file:{path.resolve()}?mode=ro", uri=True)
    _, queries, _ = select(data, "train", limit, None)
    build_ms, snapshot = timed(lambda: keywords.read_snapshot(path))
    assert snapshot is not None, "the store is above the mirror's size limit"
    tokens_of = keywords.Tokens()
    samples: dict[str, list[float]] = {}
    phrases = 0
    for text in queries.values():
        phrases += _one(db, snapshot, tokens_of, text, samples)
    return {
        "queries": len(queries),
        "with_a_phrase": phrases,
        "build_ms": round(build_ms, 1),
        "mirror_mb": round(snapshot.nbytes() / 2**20, 1),
        "postings": len(snapshot.rows),
        "p50": {k: round(statistics.median(v), 2) for k, v in samples.items()},
        "p90": {k: round(sorted(v)[int(len(v) * 0.9)], 2) for k, v in samples.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", type=Path)
    parser.add_argument("--data", type=Path, default=Path("../shared/data/scifact"))
    parser.add_argument("--limit", type=int, default=300)
    args = parser.parse_args()
    print(json.dumps(run(args.store, args.data, args.limit), indent=1))


if __name__ == "__main__":
    main()
