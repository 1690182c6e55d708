"""A hybrid search's two routes in one trip to a reader's thread (`Reader.both_routes`).

Apart, each route is a chain of hops: the vector cascade in a worker thread, its exact stage
on the reader connection's thread, the keyword mirror's pass in another worker thread, the
keyword hits' vectors on a second reader's thread; each hop comes back to the event loop,
which then sends the next step. On two cores every step but the SIMD kernels and SQLite's own
work holds the GIL, so running the routes side by side mostly interleaved them, and each hop
waited for the GIL besides (the precomputed query vector's hop took ~1 ms beside the keyword
pass, 0.2 ms alone). Here both routes run one after the other in one trip to the borrowed
reader's thread (`on_thread`), after the query is embedded: one hop. On the synthetic 100k
store a full search took 0.84x the time at p50 (per-query median 0.88x) and 0.87x the CPU of
the routes apart, the same hits (`python -m bench.scale_trees STORE --tree OLD --tree NEW
--queries 1200 --blocks 24`, load average 6-7).

Only what the thread can answer alone runs here: the vector route when the in-memory mirror is
loaded (the cascade above `exact_below` chunks, the exact search from float copies below), the
keyword route when the keyword mirror is current and there are no filters. The rest is None,
and the caller runs it apart as before.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from recalld.storage.contract import KeywordAnswer
from recalld.storage.fts import match_expression
from recalld.storage.sqlite import keywords, readers, vectors
from recalld.storage.sqlite.on_thread import RawConnection
from recalld.types import Filters


@dataclass(slots=True)
class Routes:
    """What the thread answered (None: not here), with the vector route's change counter for
    `VectorIndex.note_changes`."""

    vector: list[tuple[int, float]] | None = None
    changes: int = 0
    keyword: KeywordAnswer | None = None
    keyword_vectors: dict[int, npt.NDArray[np.float32]] | None = None
    vector_ms: float = 0.0
    keyword_ms: float = 0.0


def run(
    raw: RawConnection,
    index: vectors.VectorIndex | None,
    keyword_index: keywords.KeywordIndex | None,
    vector: npt.NDArray[np.float32],
    terms: Sequence[str],
    k: int,
    filters: Filters,
    depth: int,
    keyword_vectors: bool,
) -> Routes:
    """Both routes, in this thread, on the reader's sqlite3 connection `raw` (blocking)."""
    out = Routes()
    started = time.perf_counter()
    simple = Filters(kinds=filters.kinds, granularities=filters.granularities)
    if index is not None and filters == simple:
        found = vectors.search_now(raw, index, vector, k, filters.kinds, filters.granularities)
        if found is not None:
            out.vector, out.changes = found
            out.vector_ms = (time.perf_counter() - started) * 1000
    if keyword_index is not None and filters.is_empty():
        started = time.perf_counter()
        expression = match_expression(list(terms))
        answer = keywords.lookup_now(keyword_index, [expression], keywords.search(k, depth))
        if answer is not None:
            out.keyword = answer
            if keyword_vectors:
                # Completion reads only the vectors of the keyword hits the vector route did
                # not return (~37 of 50 on the 100k store).
                known = {cid for cid, _ in out.vector or ()}
                ids = [cid for cid, _ in answer.hits if cid not in known]
                out.keyword_vectors = readers.vectors_by_id_now(raw, ids, len(vector))
            out.keyword_ms = (time.perf_counter() - started) * 1000
    return out
