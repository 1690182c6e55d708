"""Document frequencies of keyword terms, counted once per store generation.

A hybrid search asks PostgreSQL for the same terms' document frequencies three times: for the
BM25 IDF of `fts`, again for `keyword_scores` (score completion) and for the retrieval layer's
`document_frequencies`. Each count visits every matching chunk's heap page (about 7 ms a term
at 100k chunks), so the store keeps them here. Like the retrieval layer's own cache they are
valid while `PgStore.generation` stays (it moves on each commit of this store and every few
seconds, for other daemons' commits). Concurrent searches asking for the same term share one
count in flight.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from recalld.storage.pg.handle import PgConn

# One count per term; terms made only of stopwords (an empty tsquery) count 0 without a scan.
COUNT_SQL = (
    "SELECT CASE WHEN numnode(recalld_term(t)) > 0 "
    "THEN (SELECT count(*) FROM chunks WHERE tsv @@ recalld_term(t)) ELSE 0 END "
    "FROM unnest(%s::text[]) WITH ORDINALITY AS u(t, n) ORDER BY n"
)
# The chunk total for IDF: the planner's row estimate (kept fresh by autovacuum's ANALYZE;
# counted only before the first ANALYZE), as count(*) scans the whole table on PostgreSQL.
TOTAL_SQL = (
    "SELECT CASE WHEN reltuples < 0 THEN (SELECT count(*) FROM chunks) "
    "ELSE reltuples::bigint END FROM pg_class WHERE oid = 'chunks'::regclass"
)


async def count(conn: PgConn, terms: Sequence[str]) -> list[int]:
    """Each term's document frequency (chunks whose `tsv` matches `recalld_term(term)`)."""
    if not terms:
        return []
    return [int(r[0]) for r in await conn.fetch(COUNT_SQL, [list(terms)])]


async def total(conn: PgConn) -> int:
    """The chunk total IDF is computed against."""
    rows = await conn.fetch(TOTAL_SQL)
    return int(rows[0][0])


class TermStats:
    """Document frequencies and the chunk total, cached per store generation."""

    def __init__(self, generation: Callable[[], int]) -> None:
        self._generation = generation
        self._seen = -1
        self._counts: dict[str, asyncio.Future[int]] = {}
        self._total: asyncio.Future[int] | None = None

    def _current(self) -> None:
        generation = self._generation()
        if generation != self._seen:
            self._seen, self._counts, self._total = generation, {}, None

    async def frequencies(self, conn: PgConn, terms: Sequence[str]) -> list[int]:
        """`count(conn, terms)`, counting only the terms no search has counted yet."""
        self._current()
        counts = self._counts
        missing = list(dict.fromkeys(t for t in terms if t not in counts))
        if missing:
            mine = self._claim(missing)
            try:
                found = await count(conn, missing)
            except BaseException as exc:
                self.abandon(mine, exc)
                raise
            self.settle(mine, found)
        return [await asyncio.shield(counts[t]) for t in terms]

    def unclaimed(self, terms: Sequence[str]) -> dict[str, asyncio.Future[int]] | None:
        """When no search has counted, or is counting, any of `terms`: their counts, claimed
        as in flight for a caller that counts them itself (`readers.fts` counts them in its
        own pass over the matches) and then calls `settle` or `abandon`. Else None."""
        self._current()
        if any(t in self._counts for t in terms):
            return None
        return self._claim(list(dict.fromkeys(terms)))

    def _claim(self, terms: Sequence[str]) -> dict[str, asyncio.Future[int]]:
        loop = asyncio.get_running_loop()
        mine = {t: loop.create_future() for t in terms}
        self._counts.update(mine)
        return mine

    @staticmethod
    def settle(mine: dict[str, asyncio.Future[int]], found: Sequence[int]) -> None:
        """The claimed counts, in `mine`'s order."""
        for future, n in zip(mine.values(), found, strict=True):
            future.set_result(n)

    def abandon(self, mine: dict[str, asyncio.Future[int]], exc: BaseException) -> None:
        """The claimed counts failed: forget them and pass `exc` on to their waiters."""
        for term, future in mine.items():
            if self._counts.get(term) is future:
                del self._counts[term]
            _fail(future, exc)

    async def chunk_total(self, conn: PgConn) -> int:
        """`total(conn)`, once per generation."""
        self._current()
        future = self._total
        if future is None:
            # Kept in a local: a search that sees a new generation while this one counts
            # empties `_total`, and this count is still the answer for the caller.
            future = asyncio.get_running_loop().create_future()
            self._total = future
            try:
                future.set_result(await total(conn))
            except BaseException as exc:
                if self._total is future:
                    self._total = None
                _fail(future, exc)
                raise
        return await asyncio.shield(future)


def _fail(future: asyncio.Future[int], exc: BaseException) -> None:
    """Pass a failed count on to the searches waiting for it (a cancelled one cancels them)."""
    if isinstance(exc, Exception):
        future.set_exception(exc)
        future.exception()  # marked retrieved: maybe nobody else was waiting
    else:
        future.cancel()
