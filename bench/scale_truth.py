"""Exact nearest neighbours for many queries in one pass over a store's vectors: the ground
truth of `bench scale`'s Recall@10.

sqlite-vec's exact KNN reads every vector once per query (~1 s a query at a million 384-d
chunks on a quiet 2-core machine, past the store's 5 s query limit on a loaded one). Here
`chunks_vec` is read once, in batches, and every query is scored against each batch with one
matrix product, keeping each query's best `k` so far: the same cosine distances, a few
seconds for all queries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import aiosqlite
import numpy as np
import numpy.typing as npt

_BATCH = 16_384  # rows a read (24 MB of 384-d float32), so memory stays flat


@dataclass
class _Best:
    """One query set's best `k` so far: distances and ids, (queries, k)."""

    k: int
    queries: int
    distances: npt.NDArray[np.float64] = field(init=False)
    ids: npt.NDArray[np.int64] = field(init=False)

    def __post_init__(self) -> None:
        self.distances = np.full((self.queries, 0), np.inf)
        self.ids = np.zeros((self.queries, 0), dtype=np.int64)

    def merge(self, distances: npt.NDArray[np.float64], ids: npt.NDArray[np.int64]) -> None:
        """Fold one batch's distances (queries, rows) for the rows `ids` into the best `k`."""
        if not len(ids):
            return
        all_d = np.concatenate([self.distances, distances], axis=1)
        all_i = np.concatenate([self.ids, np.broadcast_to(ids, distances.shape)], axis=1)
        # Nearest first, ties by id (as the store orders them).
        order = np.lexsort((all_i, all_d), axis=1)[:, : self.k]
        self.distances = np.take_along_axis(all_d, order, axis=1)
        self.ids = np.take_along_axis(all_i, order, axis=1)

    def ranked(self) -> list[list[int]]:
        return [[int(i) for i in row] for row in self.ids]


async def exact_top(
    conn: aiosqlite.Connection,
    queries: npt.NDArray[np.float32],
    k: int,
    dimension: int,
    granularities: Sequence[str] = (),
) -> tuple[list[list[int]], list[list[int]]]:
    """Each query's exact `k` nearest chunk ids by cosine distance, nearest first (ties by id):
    over every chunk, and over the chunks whose granularity is one of `granularities`.

    `conn` reads the whole of `chunks_vec` (lift its query time limit first).
    """
    q = np.asarray(queries, dtype=np.float64)
    q = q / np.linalg.norm(q, axis=1, keepdims=True)
    every, some = _Best(k, len(q)), _Best(k, len(q))
    wanted = set(granularities)
    async with conn.execute("SELECT chunk_id, embedding, granularity FROM chunks_vec") as cursor:
        while rows := list(await cursor.fetchmany(_BATCH)):
            ids = np.fromiter((int(r[0]) for r in rows), dtype=np.int64, count=len(rows))
            blob = b"".join(r[1] for r in rows)
            matrix = np.frombuffer(blob, dtype=np.float32).reshape(len(rows), dimension)
            norms = np.linalg.norm(matrix.astype(np.float64), axis=1)
            # Cosine distance as sqlite-vec computes it; a zero vector is never near.
            with np.errstate(divide="ignore", invalid="ignore"):
                distances = 1.0 - (q @ matrix.T.astype(np.float64)) / norms
            distances[:, norms == 0] = np.inf
            every.merge(distances, ids)
            if wanted:
                chosen = np.fromiter((r[2] in wanted for r in rows), dtype=bool, count=len(rows))
                some.merge(distances[:, chosen], ids[chosen])
    return every.ranked(), some.ranked()
