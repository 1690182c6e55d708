"""BM25 in memory, mirrored from the FTS5 index: the same ranked ids and scores, in ~1 ms.

FTS5 ranks an OR of 15 terms by calling bm25() on every row that matches any of them (~4,000
rows on SciFact's 13,948 chunks), reading each row's position lists: ~30 ms a question, where
listing the matching rows alone takes ~7 ms (issue 20). This mirror holds, per token, the rows
that contain it and how often, and each row's length, read from FTS5 itself (`fts5vocab` and
the `_docsize` and `_data` shadow tables): FTS5 stays the store's keyword index and the source
of truth. Scores are computed as FTS5's built-in bm25() computes them (fts5_aux.c, k1 = 1.2,
b = 0.75, one IDF per phrase floored at 1e-6, summed in phrase order, in doubles), so the
ranked ids and scores are identical.

Staleness: every committed change to the FTS5 index rewrites its structure record (a new
segment, a larger write counter) and its averages record (`_data` rows 10 and 1). A snapshot
remembers both; every lookup first reads them (one point query on the mirror's own read-only
connection) and uses the snapshot only when they are unchanged, whichever process wrote.
Otherwise the lookup answers from FTS5 and a rebuild starts in a thread on its own
connection, reading everything in one transaction; rebuilds take at most a fifth of the
time (`_REBUILD_DUTY`), so a store being written to is searched through FTS5 until it
settles.

Memory: ~6 bytes a posting (a token once per chunk holding it), 7.5 MB for SciFact's 13,948
chunks, 38 MB for 100k synthetic chunks of 40-120 words and 356 MB (374 bytes a chunk) for 1M
of them (80M tokens, 59M postings, built in ~50 s while FTS5 answers, the build's anonymous
peak ~1.4x the arrays); above `MAX_OCCURRENCES` tokens in the index it is not built and FTS5
answers.

Terms are tokenised by FTS5 itself, on a private in-memory table with the store's tokenizer.
A term that is several tokens (a phrase, such as `don't`) needs positions the mirror does
not hold: such lookups answer from FTS5.
"""

from __future__ import annotations

import array
import asyncio
import ctypes
import ctypes.util
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from recalld.storage.contract import KeywordAnswer
from recalld.storage.sqlite.connection import DatabaseError, sqlite
from recalld.storage.sqlite.schema import FTS_TOKENIZE

logger = logging.getLogger(__name__)

# FTS5's bm25() constants (fts5_aux.c).
_K1 = 1.2
_B = 0.75
# The structure record and the averages record of an FTS5 index (fts5_index.c).
_KEY_SQL = "SELECT id, block FROM chunks_fts_data WHERE id IN (1, 10) ORDER BY id"
# A rebuild runs at most this share of the time (after one of t seconds, none for 4t).
_REBUILD_DUTY = 0.2
# After a failed build, the next waits this long (seconds).
_RETRY_S = 30.0
# Above this many tokens in the index the mirror is not built and FTS5 answers: postings take
# ~6 bytes each (a 4-byte row number and a 2-byte count; a token repeated in a chunk is one),
# so at most ~600 MB here; 1M synthetic chunks of 40-120 words hold 80M tokens in 59M
# postings, 356 MB, built in ~46 s (issue 20: there the mirror answers in ~0.15x FTS5's time).
MAX_OCCURRENCES = 100_000_000
# The largest count a posting holds (uint16).
_MAX_COUNT = 65_535
# Tokenised terms remembered (a few MB at most).
_TOKEN_CACHE = 20_000
# Scoring sums over the postings when they are fewer than 1/16 of the rows, else over an array
# of every row: on SciFact (~5,000 postings, 14k rows) the array took 0.8x the time of the
# postings' sort, at 100k rows (~700 postings) ~1.5x (a /tmp script, both on the same queries).
_SPARSE_BELOW = 16
# Occurrences read per statement while building (16 bytes of hex text each).
_READ_BATCH = 500_000

_QUOTED = re.compile(r'"((?:[^"]|"")*)"')

Key = tuple[bytes, ...]
T = TypeVar("T")
Phrases = list[tuple[str, ...]]


def expression_terms(expression: str) -> list[str] | None:
    """The terms of an expression built by `storage.fts.match_expression` (quoted terms joined
    by OR), or None for any other FTS5 syntax."""
    terms = [m.group(1).replace('""', '"') for m in _QUOTED.finditer(expression)]
    rebuilt = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
    return terms if terms and rebuilt == expression else None


def _varints(blob: bytes) -> list[int]:
    """SQLite varints (big-endian, 7 bits a byte, the ninth byte whole), as FTS5 stores."""
    out: list[int] = []
    i = 0
    while i < len(blob):
        value = 0
        for n in range(9):
            byte = blob[i]
            i += 1
            if n == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if not byte & 0x80:
                break
        out.append(value)
    return out


def _key(records: list[Any]) -> tuple[Key, int, int]:
    """`(key, rows, tokens)` from the rows of `_KEY_SQL`: FTS5's row and token counts come
    from its averages record (absent or empty: an empty index)."""
    blocks = {int(r[0]): bytes(r[1]) for r in records}
    averages = _varints(blocks.get(1, b"")) or [0]
    return tuple(blocks.values()), averages[0], sum(averages[1:])


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The FTS5 index at one commit: per token, its rows (row numbers, ascending) and counts.

    Attributes:
        key: The structure and averages records it was read with.
        terms: Token -> term number; term t's postings are `starts[t]:starts[t + 1]`.
        starts: Posting offsets per term (terms + 1).
        rows: Per posting, the row number (an index into `rowids`).
        counts: Per posting, the token's occurrences in that row.
        rowids: Chunk ids, ascending.
        lengths: Each row's length in tokens (FTS5's xColumnSize(-1)), as doubles.
        total_rows, avgdl: FTS5's xRowCount and xColumnTotalSize(-1) / xRowCount.
    """

    key: Key
    terms: dict[str, int]
    starts: npt.NDArray[np.int64]
    rows: npt.NDArray[np.int32]
    counts: npt.NDArray[np.uint16]
    rowids: npt.NDArray[np.int64]
    lengths: npt.NDArray[np.float64]
    total_rows: int
    avgdl: float

    def nbytes(self) -> int:
        """Memory held, roughly (arrays, and ~100 bytes a term in the dict)."""
        arrays = (self.starts, self.rows, self.counts, self.rowids, self.lengths)
        return sum(a.nbytes for a in arrays) + 100 * len(self.terms)

    def postings(self, token: str) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.uint16]]:
        """The rows holding `token` and its counts there (empty if none)."""
        term = self.terms.get(token)
        if term is None:
            return self.rows[:0], self.counts[:0]
        lo, hi = int(self.starts[term]), int(self.starts[term + 1])
        return self.rows[lo:hi], self.counts[lo:hi]

    def scores(
        self, tokens: Sequence[str]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """Every row matching any token, as `(chunk ids ascending, -bm25)`, computed as FTS5's
        bm25() does for an OR of these one-token phrases, in this order."""
        n_rows, avgdl = float(self.total_rows), self.avgdl
        term_rows: list[npt.NDArray[np.int32]] = []
        parts: list[npt.NDArray[np.float64]] = []
        for rows, counts in (self.postings(t) for t in tokens):
            if not len(rows):
                continue  # adds 0.0 to every row in FTS5: no change
            hits = float(len(rows))
            idf = math.log((n_rows - hits + 0.5) / (hits + 0.5))
            if idf <= 0.0:
                idf = 1e-6
            freq = counts.astype(np.float64)
            size = self.lengths[rows]
            # The expression of fts5Bm25Function, operation for operation.
            term_rows.append(rows)
            parts.append(idf * ((freq * (_K1 + 1.0)) / (freq + _K1 * (1 - _B + _B * size / avgdl))))
        if len(term_rows) <= 1:
            rows = term_rows[0] if term_rows else self.rows[:0]
            return self.rowids[rows], parts[0] if parts else np.zeros(0, dtype=np.float64)
        postings = sum(len(rows) for rows in term_rows)
        if postings * _SPARSE_BELOW >= len(self.rowids):
            # Many postings for the rows there are (SciFact's long questions: ~5,000 in
            # 14k rows): one array of every row is cheaper than sorting the postings.
            score = np.zeros(len(self.rowids), dtype=np.float64)
            hit = np.zeros(len(self.rowids), dtype=bool)
            for rows, part in zip(term_rows, parts, strict=True):
                score[rows] += part
                hit[rows] = True
            found = np.flatnonzero(hit)
            return self.rowids[found], score[found]
        # Few (a short query at 100k rows: ~700): over the postings only. bincount adds each
        # row's parts in the order given, the terms' order, from 0.0, as the loop above and
        # FTS5 sum them, so the scores are the same doubles.
        matched, at = np.unique(np.concatenate(term_rows), return_inverse=True)
        summed = np.bincount(at, weights=np.concatenate(parts), minlength=len(matched))
        score = np.asarray(summed, dtype=np.float64)  # already is
        return self.rowids[matched], score

    def frequency(self, tokens: Sequence[str]) -> int:
        """How many rows hold any of `tokens` (FTS5's count of an OR of them)."""
        if len(tokens) == 1:
            return len(self.postings(tokens[0])[0])
        return len(self.scores(tokens)[0])

    def contains(self, token: str, rowid: int) -> bool:
        """Whether row `rowid` holds `token`."""
        at = int(np.searchsorted(self.rowids, rowid))
        if at >= len(self.rowids) or int(self.rowids[at]) != rowid:
            return False
        rows, _ = self.postings(token)
        i = int(np.searchsorted(rows, at))
        return i < len(rows) and int(rows[i]) == at


def ranked(
    ids: npt.NDArray[np.int64], scores: npt.NDArray[np.float64], k: int
) -> list[tuple[int, float]]:
    """The `k` best `(id, score)`, best first; equal scores by ascending id (as FTS5's
    `ORDER BY rank` returns them)."""
    if len(ids) > 4 * k:
        part = np.argpartition(-scores, k - 1)[:k]
        cut = scores[part].min()
        keep = np.flatnonzero(scores >= cut)  # every row tied with the k-th stays in the sort
        ids, scores = ids[keep], scores[keep]
    order = np.lexsort((ids, -scores))[:k]
    return [(int(ids[i]), float(scores[i])) for i in order]


# A lookup's answer, from a snapshot and each expression's tokens (see `lookup`).
Answer = Callable[[Snapshot, list[list[str]]], T]


def best(k: int) -> Answer[list[tuple[int, float]]]:
    """The `k` best rows for an OR of the tokens, as FTS5's `ORDER BY rank LIMIT k`."""
    return lambda snapshot, tokens: ranked(*snapshot.scores(tokens[0]), k)


@dataclass(frozen=True, slots=True)
class Matches:
    """Every row matching an OR of one-token terms, scored in one pass (`Snapshot.scores`),
    and what a search reads besides its best rows, from the same snapshot and scores.

    Attributes:
        snapshot: The snapshot scored.
        tokens: The terms' tokens, one a term, in the terms' order.
        ids: The matching chunk ids, ascending.
        scores: Their scores (-bm25).
    """

    snapshot: Snapshot
    tokens: list[str]
    ids: npt.NDArray[np.int64]
    scores: npt.NDArray[np.float64]

    def frequencies(self) -> list[int]:
        """Each term's document frequency (rows holding its token)."""
        return [len(self.snapshot.postings(t)[0]) for t in self.tokens]

    def matched(self, chunk_id: int) -> list[bool]:
        """Which terms row `chunk_id` holds."""
        return [self.snapshot.contains(t, chunk_id) for t in self.tokens]

    def scores_of(self, ids: Sequence[int]) -> dict[int, float]:
        """The scores of those of `ids` that match (as `scores_of` computes them)."""
        return _scores_of(self.ids, self.scores, ids)

    def answer(self, hits: list[tuple[int, float]], depth: int) -> KeywordAnswer:
        """The keyword route's answer whose best rows are `hits` (`depth`: how many of them
        report their matched terms)."""
        matched = [self.matched(cid) for cid, _ in hits[:depth]]
        total = self.snapshot.total_rows
        return KeywordAnswer(hits, matched, self.frequencies(), total, self.scores_of)

    def filtered(self, allowed: set[int], k: int, depth: int) -> KeywordAnswer:
        """`answer` whose best rows are the `k` best that a filter allows."""
        hits = best_allowed(self.ids, self.scores, allowed, k) if allowed else []
        return self.answer(hits, depth)


def matches(snapshot: Snapshot, tokens: list[list[str]]) -> Matches:
    """Every row matching an OR of the tokens, and its score (see `Snapshot.scores`)."""
    return Matches(snapshot, tokens[0], *snapshot.scores(tokens[0]))


def search(k: int, depth: int) -> Answer[KeywordAnswer]:
    """The keyword route's answer without filters: the `k` best rows, as `best(k)` ranks them,
    with everything else a search reads from the same pass."""

    def answer(snapshot: Snapshot, tokens: list[list[str]]) -> KeywordAnswer:
        found = matches(snapshot, tokens)
        return found.answer(ranked(found.ids, found.scores, k), depth)

    return answer


def best_allowed(
    ids: npt.NDArray[np.int64], scores: npt.NDArray[np.float64], allowed: set[int], k: int
) -> list[tuple[int, float]]:
    """The `k` best of the matching rows `ids` that a filter allows."""
    keep = np.isin(ids, np.array(sorted(allowed), dtype=np.int64))
    return ranked(ids[keep], scores[keep], k)


def scores_of(ids: Sequence[int]) -> Answer[dict[int, float]]:
    """The scores of those of `ids` that match, by ascending id (FTS5's order)."""
    return lambda snapshot, tokens: _scores_of(*snapshot.scores(tokens[0]), ids)


def _scores_of(
    found: npt.NDArray[np.int64], scores: npt.NDArray[np.float64], ids: Sequence[int]
) -> dict[int, float]:
    """The scores of those of `ids` among the matching rows `found` (ascending)."""
    wanted = np.unique(np.asarray(ids, dtype=np.int64))
    at = np.minimum(np.searchsorted(found, wanted), max(len(found) - 1, 0))
    hit = found[at] == wanted if len(found) else np.zeros(len(wanted), dtype=bool)
    return {int(i): float(s) for i, s in zip(wanted[hit], scores[at[hit]], strict=True)}


def frequencies(snapshot: Snapshot, per_expression: list[list[str]]) -> list[int]:
    """How many rows each expression matches."""
    return [snapshot.frequency(tokens) for tokens in per_expression]


def matched_in(chunk_id: int) -> Answer[list[bool]]:
    """Whether row `chunk_id` matches each expression."""
    return lambda snapshot, per_expression: [
        any(snapshot.contains(t, chunk_id) for t in tokens) for tokens in per_expression
    ]


class Stopped(Exception):
    """The store closed during a build."""


class TooLarge(Exception):
    """The index holds more than the mirror does."""


def read_snapshot(path: Path, stopped: threading.Event | None = None) -> Snapshot | None:
    """Read the FTS5 index of the store at `path` in one read transaction (None: more than
    `MAX_OCCURRENCES` tokens). Raises `Stopped` soon after `stopped` is set."""
    conn = _open_readonly(path)
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.kw_rows USING fts5vocab(main, chunks_fts, row)")
        conn.execute(
            "CREATE VIRTUAL TABLE temp.kw_instances USING fts5vocab(main, chunks_fts, instance)"
        )
        conn.execute("BEGIN")
        try:
            return _read(conn, stopped or threading.Event())
        except TooLarge:
            return None
        finally:
            conn.execute("COMMIT")
    finally:
        conn.close()


def _open_readonly(path: Path) -> Any:
    """A read-only connection of the mirror's own (builds and staleness checks)."""
    return sqlite.connect(
        f"file:{path.resolve()}?mode=ro",
        uri=True,
        isolation_level=None,
        timeout=30.0,
        check_same_thread=False,
    )


def _read(conn: Any, stopped: threading.Event) -> Snapshot:
    key, total_rows, total_tokens = _key(conn.execute(_KEY_SQL).fetchall())
    # Row by row, not fetchall(): a list of 100k tuples would stay in Python's arenas.
    ids, sizes = array.array("q"), array.array("d")
    for rowid, size in conn.execute("SELECT id, sz FROM chunks_fts_docsize ORDER BY id"):
        ids.append(int(rowid))
        sizes.append(float(sum(_varints(bytes(size)))))
    rowids = np.frombuffer(ids, dtype=np.int64).copy()
    lengths = np.frombuffer(sizes, dtype=np.float64).copy()
    # Per term (in the index's order), its number of occurrences; then every occurrence's row
    # in the same order, as hex text read a range of terms at a time (a Python object per
    # occurrence costs ~10x the time, and ~50x the memory).
    vocabulary = conn.execute("SELECT term, cnt FROM kw_rows").fetchall()
    occurrences = np.array([int(r[1]) for r in vocabulary], dtype=np.int64)
    total = int(occurrences.sum())
    if total > MAX_OCCURRENCES:
        raise TooLarge
    # Postings are at most the occurrences: filled in place and shrunk at the end, never
    # copied whole (pages are touched as filled): at 1M chunks the build peaked at ~1.4x the
    # arrays, against ~2.1x when it concatenated batches.
    rows = np.empty(total, dtype=np.int32)
    counts = np.empty(total, dtype=np.uint16)
    per_term = np.zeros(len(vocabulary), dtype=np.int64)
    filled = 0
    for first, last, docs in _occurrence_rows(conn, vocabulary, occurrences, stopped):
        part_rows, part_counts, per_term[first:last] = _postings(
            docs, occurrences[first:last], rowids
        )
        rows[filled : filled + len(part_rows)] = part_rows
        counts[filled : filled + len(part_rows)] = part_counts
        filled += len(part_rows)
    rows.resize(filled, refcheck=False)  # a shrinking realloc: in place
    counts.resize(filled, refcheck=False)
    if int(per_term.sum()) != filled or int(counts.sum()) != total:
        raise RuntimeError("fts5vocab tables disagree")  # not one snapshot: never expected
    starts = np.concatenate([[0], np.cumsum(per_term)]).astype(np.int64)
    terms = {str(r[0]): i for i, r in enumerate(vocabulary)}
    avgdl = float(total_tokens) / float(total_rows) if total_rows else 0.0
    return Snapshot(key, terms, starts, rows, counts, rowids, lengths, total_rows, avgdl)


def _postings(
    docs: npt.NDArray[np.int64], occurrences: npt.NDArray[np.int64], rowids: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.uint16], npt.NDArray[np.int64]]:
    """Postings `(row numbers, counts, postings per term)` of whole terms' occurrences (each
    occurrence's chunk id, term by term, ascending within a term)."""
    ends = np.cumsum(occurrences)
    # A posting starts at each term's first occurrence and wherever the row changes.
    first = np.zeros(len(docs), dtype=bool)
    if len(docs):
        first[0] = True
        first[1:] = docs[1:] != docs[:-1]
        first[ends[:-1][ends[:-1] < len(docs)]] = True
    at = np.flatnonzero(first)
    counts = np.diff(np.append(at, len(docs)))
    if len(counts) and int(counts.max()) > _MAX_COUNT:
        raise TooLarge  # a token 65,536 times in one chunk: FTS5 answers
    rows = np.searchsorted(rowids, docs[at]).astype(np.int32)
    if len(at) and not np.array_equal(rowids[np.minimum(rows, len(rowids) - 1)], docs[at]):
        raise RuntimeError("a row of the FTS5 index has no size")  # never expected
    term_of_posting = np.searchsorted(ends, at, side="right")
    per_term = np.bincount(term_of_posting, minlength=len(occurrences)).astype(np.int64)
    return rows, counts.astype(np.uint16), per_term


def _occurrence_rows(
    conn: Any,
    vocabulary: list[Any],
    occurrences: npt.NDArray[np.int64],
    stopped: threading.Event,
) -> Iterator[tuple[int, int, npt.NDArray[np.int64]]]:
    """`(first term, last term + 1, the chunk id of each of their occurrences)`, in batches of
    ~`_READ_BATCH` occurrences (whole terms)."""
    ends = np.cumsum(occurrences)
    first = 0
    while first < len(vocabulary):
        if stopped.is_set():
            raise Stopped
        last = int(np.searchsorted(ends, ends[first] - occurrences[first] + _READ_BATCH))
        last = min(max(last, first + 1), len(vocabulary))
        text = conn.execute(
            "SELECT group_concat(printf('%016x', doc), '') FROM kw_instances "
            "WHERE term >= ? AND term <= ?",
            (vocabulary[first][0], vocabulary[last - 1][0]),
        ).fetchone()[0]
        yield first, last, np.frombuffer(bytes.fromhex(text or ""), dtype=">i8").astype(np.int64)
        first = last


def _return_freed_memory() -> None:
    """Give the allocator's freed pages back to the system (glibc only). A build allocates
    in its thread's own malloc arena, which glibc does not trim by itself: at 100k chunks the
    daemon kept ~80 MB more than the mirror's arrays without this."""
    name = ctypes.util.find_library("c")
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    if trim is not None:
        trim(0)


class Tokens:
    """Terms tokenised as FTS5 tokenises them, by FTS5 (a private in-memory table)."""

    def __init__(self) -> None:
        self._conn = sqlite.connect(":memory:", isolation_level=None, check_same_thread=False)
        self._conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(text, tokenize='{FTS_TOKENIZE}')")
        self._conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")
        self._cache: dict[str, tuple[str, ...]] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def of(self, terms: Sequence[str]) -> Phrases:
        """Each term's tokens, in order."""
        with self._lock:  # lookups in several worker threads share the cache
            missing = [t for t in dict.fromkeys(terms) if t not in self._cache]
            if missing:
                if len(self._cache) + len(missing) > _TOKEN_CACHE:
                    self._cache.clear()
                self._cache.update(self._tokenise(missing))
            return [self._cache[t] for t in terms]

    def _tokenise(self, terms: list[str]) -> dict[str, tuple[str, ...]]:
        conn = self._conn
        conn.execute("BEGIN")
        try:
            conn.executemany("INSERT INTO t (rowid, text) VALUES (?, ?)", enumerate(terms))
            found = conn.execute("SELECT doc, term FROM v ORDER BY doc, offset").fetchall()
            conn.execute("DELETE FROM t")
        finally:
            conn.execute("COMMIT")
        tokens: dict[str, list[str]] = {t: [] for t in terms}
        for doc, token in found:
            tokens[terms[int(doc)]].append(str(token))
        return {t: tuple(v) for t, v in tokens.items()}


class KeywordIndex:
    """The store's keyword mirror: the current snapshot, and its rebuilds."""

    def __init__(self, path: Path | None) -> None:
        self.path = path  # None (in-memory stores): never built, FTS5 answers
        self.tokens = Tokens()
        self._snapshot: Snapshot | None = None
        self._building = False
        self._next_build = 0.0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        # Lookups answered from the mirror, and by FTS5 for want of a current one.
        self.served = self.missed = 0
        # Opened with the store, so it reads the file the readers read even if the path is
        # later deleted or replaced (a build from a replaced file never matches its records).
        self._probe: Any = None
        if path is not None:
            try:
                self._probe = _open_readonly(path)
            except DatabaseError:
                logger.warning("keyword mirror off: cannot open %s", path)

    def current(self) -> Snapshot | None:
        """The snapshot, if it reflects the FTS5 index as last committed; otherwise None, and
        a rebuild starts unless one runs or ran too recently.

        The records are read on the mirror's own connection, in the calling thread: a point
        query of ~20 us, where a round trip to a reader's thread costs ~0.1 ms on an idle
        machine and milliseconds on a busy one.
        """
        if self._probe is None:
            return None
        try:
            with self._lock:
                key, _, tokens = _key(self._probe.execute(_KEY_SQL).fetchall())
        except DatabaseError:
            return None  # FTS5 answers, or reports what is wrong
        with self._lock:  # counted under the lock: lookups run in worker threads
            snapshot = self._snapshot
            fresh = snapshot is not None and snapshot.key == key
            if fresh:
                self.served += 1
            else:
                self.missed += 1
                self._snapshot = None  # stale: never served again, so its memory can go now
        if fresh:
            return snapshot
        if tokens <= MAX_OCCURRENCES:
            self._start_build()
        return None

    async def load(self) -> Snapshot | None:
        """The current snapshot, built now if need be (None: not built; benchmarks)."""
        snapshot = self.current()
        if snapshot is None:
            # ~46 s at 1M chunks on a quiet machine: longer when the machine is busy.
            await asyncio.to_thread(self.wait_built, 600.0)
            snapshot = self.current()
        return snapshot

    def _start_build(self) -> None:
        with self._lock:
            if self._building or self._stopped.is_set() or time.monotonic() < self._next_build:
                return
            self._building = True
            self._thread = threading.Thread(target=self._build, name="keyword-mirror", daemon=True)
            self._thread.start()

    def _build(self) -> None:
        started = time.monotonic()
        retry = 0.0
        try:
            assert self.path is not None
            snapshot = read_snapshot(self.path, self._stopped)
            self._snapshot = snapshot
            if snapshot is not None:
                logger.info(
                    "keyword mirror: %d rows, %d terms, %.1f MB in %.2f s",
                    len(snapshot.rowids),
                    len(snapshot.terms),
                    snapshot.nbytes() / 1e6,
                    time.monotonic() - started,
                )
        except Stopped:
            pass
        except Exception:  # a failed build leaves FTS5 answering; a later one may succeed
            logger.exception("keyword mirror build failed")
            self._snapshot = None
            retry = _RETRY_S
        finally:
            _return_freed_memory()
            took = time.monotonic() - started
            with self._lock:
                self._building = False
                self._next_build = time.monotonic() + max(retry, took * (1 / _REBUILD_DUTY - 1))

    def wait_built(self, timeout: float = 60.0) -> None:
        """Block until no build runs (tests and benchmarks)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def close(self) -> None:
        """Stop a running build (it ends within one batch) and drop the snapshot."""
        self._stopped.set()
        self.wait_built()
        self._snapshot = None
        self.tokens.close()
        with self._lock:
            if self._probe is not None:
                self._probe.close()


async def lookup(
    index: KeywordIndex | None, expressions: Sequence[str], answer: Answer[T]
) -> T | None:
    """`answer(snapshot, each expression's tokens (one a term))` from the current snapshot,
    or None when FTS5 must answer: no mirror (yet), other FTS5 syntax, or a term of several
    tokens. The whole lookup runs in one worker thread: tokenising and the staleness check
    are SQLite, the answer numpy over the postings, and the event loop runs neither."""
    if index is None:
        return None
    return await asyncio.to_thread(lookup_now, index, expressions, answer)


def lookup_now(index: KeywordIndex, expressions: Sequence[str], answer: Answer[T]) -> T | None:
    """`lookup` in the calling thread (a reader's thread: storage/sqlite/routes.py)."""
    per_expression: list[list[str]] = []
    for expression in expressions:
        terms = expression_terms(expression)
        if terms is None:
            return None
        phrases = index.tokens.of(terms)
        if any(len(p) != 1 for p in phrases):
            return None
        per_expression.append([p[0] for p in phrases])
    snapshot = index.current()
    return None if snapshot is None else answer(snapshot, per_expression)
