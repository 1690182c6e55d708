"""The storage contract: every operation a store offers, stated once and typed.

A store (`Store`) hands out a `Reader` inside a read transaction (`store.read(fn)` runs
`fn(reader)`) and a `Writer` inside one write transaction (`store.write(fn)`). SQLite
(`storage.sqlite`) and PostgreSQL (`storage.pg`) implement these Protocols as peers: their
reader and writer classes subclass `Reader` and `Writer` explicitly, and `storage.registry`
types each backend's `open` as returning a `Store`, so `mypy --strict` fails when an
implementation lacks an operation or drifts from the signature stated here.

Text search expressions (`expression`) are FTS5 expressions as `retrieval.query` builds them;
each backend translates them. Ad-hoc SQL (`fetchall`, `execute`) uses `?` placeholders on both.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from recalld.errors import StoreGoneError
from recalld.storage import portable
from recalld.storage.records import Link, MemoryEdit, NewChunk, NewDocument, ReindexState
from recalld.storage.repair_report import RepairReport
from recalld.types import Chunk, Document, Filters

T = TypeVar("T")

# Embeds texts with the store's model into unit float32 vectors (repair and import re-embed).
Embed = Callable[[Sequence[str]], Awaitable[npt.NDArray[np.float32]]]


@dataclass(frozen=True, slots=True)
class KeywordAnswer:
    """A search's keyword route from one pass over the matches (`Reader.keyword_search`):
    the best matches and the terms the best of them contain, and what else a search reads
    where the backend can give it from the same pass for free (None where it cannot: the
    caller then asks the Reader's single-purpose operation named below).

    Attributes:
        hits: The `k` best matches as `(chunk_id, score)`, best first (as `fts` gives them).
        matched: For each of the best `depth` hits, which terms it contains, in the terms'
            order (as `matched_terms` gives it).
        frequencies: Each term's document frequency, in the terms' order (None: ask
            `document_frequencies`).
        total: The chunk total those frequencies are counted against (0 when they are None).
        scores: The score `keyword_scores` gives any chunk ids, looked up in this pass's
            scores without another query (None: ask `keyword_scores`).
    """

    hits: list[tuple[int, float]]
    matched: list[list[bool]]
    frequencies: list[int] | None = None
    total: int = 0
    scores: Callable[[Sequence[int]], dict[int, float]] | None = None


@dataclass(frozen=True, slots=True)
class BothRoutes:
    """A hybrid search's two routes from one read (`Reader.both_routes`). A route the backend
    could not answer there is None, and the caller runs it apart (`knn`, `keyword_search`).

    Attributes:
        vector: The vector route's hits, as `knn` gives them.
        keyword: The keyword route's answer, as `keyword_search` gives it.
        keyword_vectors: The stored vectors of the keyword hits that `vector` does not hold
            (of all of them when `vector` is None), as `vectors_by_id` gives them (None: not
            asked for, or `keyword` is None).
        vector_ms: How long the vector route took (0 when it is None).
        keyword_ms: How long the keyword route took, its vectors included (0 when None).
    """

    vector: list[tuple[int, float]] | None = None
    keyword: KeywordAnswer | None = None
    keyword_vectors: dict[int, npt.NDArray[np.float32]] | None = None
    vector_ms: float = 0.0
    keyword_ms: float = 0.0


class Reader(Protocol):
    """The read operations, run inside one read transaction (a consistent snapshot)."""

    def prefix_match(self, column: str, prefixes: Sequence[str]) -> tuple[str, list[Any]]:
        """An ad-hoc SQL condition, and its parameters: `column` starts with one of `prefixes`."""
        ...

    def tag_match(self, chunk: str) -> str:
        """An ad-hoc SQL condition: the chunk aliased `chunk` carries the tag bound to its `?`."""
        ...

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Run a query and return every row."""
        ...

    async def knn(
        self, vector: npt.NDArray[np.float32], k: int, filters: Filters
    ) -> list[tuple[int, float]]:
        """The `k` nearest chunks by cosine distance, as `(chunk_id, distance)`, nearest first.

        A backend may answer from an approximate index where it is measured to be as good
        (SQLite: the cascade of `storage.sqlite.vectors`, Recall@10 against exact search >= 0.99;
        PostgreSQL: pgvector's index); filters it cannot serve there are searched exactly."""
        ...

    async def fts(self, expression: str, k: int, filters: Filters) -> list[tuple[int, float]]:
        """The `k` best BM25 matches as `(chunk_id, score)`, best first; score is -bm25 (higher
        is better)."""
        ...

    async def keyword_search(
        self, terms: Sequence[str], k: int, filters: Filters, depth: int
    ) -> KeywordAnswer:
        """A search's keyword route for the OR of `terms` (escaped query terms): `fts`'s `k`
        best matches and, where the backend has them from the same pass, each term's document
        frequency, the terms each of the best `depth` hits contains, and a score lookup for
        score completion (see `KeywordAnswer`)."""
        ...

    async def both_routes(
        self,
        vector: npt.NDArray[np.float32],
        terms: Sequence[str],
        k: int,
        filters: Filters,
        depth: int,
        keyword_vectors: bool,
    ) -> BothRoutes:
        """`knn(vector, k, filters)` and `keyword_search(terms, k, filters, depth)` together,
        and the stored vectors of the keyword hits the vector hits do not hold when
        `keyword_vectors` (score completion's), where the backend answers them faster
        together than apart (`Store.routes_together`); each route it cannot answer so is
        None."""
        ...

    async def keyword_scores(self, expression: str, ids: Sequence[int]) -> dict[int, float]:
        """The keyword route's score (as `fts` gives it) of each chunk in `ids` that matches
        `expression`; chunks that match none of its terms are left out (their score is 0).

        The statistics are the whole store's, so these are the very scores the route would have
        given the chunks had it returned them (score completion, issue 14)."""
        ...

    async def latest_event_time(self, filters: Filters) -> float | None:
        """The latest chunk event time among chunks matching `filters` (time bounds ignored):
        "now" for the relative time expressions of a question about that scope."""
        ...

    async def granularity_vectors(
        self, granularity: str, document_id: int | None, at_most: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]] | None:
        """The stored vectors of one granularity outside a document as `(ids, matrix)`, when there
        are at most `at_most` chunks of it (None: more; use `knn`)."""
        ...

    async def document_frequency(self, expression: str) -> int:
        """How many chunks match a text-search expression (one quoted term: its document
        frequency)."""
        ...

    async def document_frequencies(self, expressions: Sequence[str]) -> list[int]:
        """`document_frequency` of each expression, in one statement per 200 (one round trip to
        the connection's thread instead of one per term: ~0.1 ms each on a busy machine)."""
        ...

    async def matched_terms(self, chunk_id: int, expressions: Sequence[str]) -> list[bool]:
        """Which text-search expressions (one quoted term each) match one chunk, in one
        statement per 200."""
        ...

    async def meta_value(self, key: str) -> str | None:
        """One value of the store's `meta` table, or None."""
        ...

    async def chunk_ids_by_kind(self) -> dict[str, list[int]]:
        """Every chunk id, by kind, in id order (self-calibration samples from these)."""
        ...

    async def chunk_total(self) -> int:
        """The number of chunks."""
        ...

    async def chunks_by_id(self, ids: Sequence[int]) -> dict[int, Chunk]:
        """Chunks with their source, by id; missing ids are left out."""
        ...

    async def chunks_and_statuses(
        self, ids: Sequence[int], status_ids: Sequence[int]
    ) -> tuple[dict[int, Chunk], dict[int, str]]:
        """The chunks of `ids` (as `chunks_by_id`) and only the status of each of
        `status_ids`, in one query; missing ids are left out of both. A search reads the
        chunks it may return whole and, of its other candidates, what the status penalty
        reads."""
        ...

    async def chunks_statuses_and_links(
        self,
        ids: Sequence[int],
        status_ids: Sequence[int],
        link_ids: Sequence[int],
        through_parents: bool = False,
    ) -> tuple[dict[int, Chunk], dict[int, str], list[Link]]:
        """`chunks_and_statuses(ids, status_ids)` and `links_touching(link_ids)` in one read:
        a search's candidates when a stage follows their links (SQLite: one trip to the
        reader's thread). With `through_parents`, the links also hold, each once, every
        `temporal` link touching `records.untimed_parents` of `link_ids` (what neighbour
        support through parents places those candidates by)."""
        ...

    async def vectors_by_id(
        self, ids: Sequence[int], dimension: int
    ) -> dict[int, npt.NDArray[np.float32]]:
        """Stored vectors by chunk id."""
        ...

    async def neighbours(self, document_id: int, position: int, window: int) -> list[Chunk]:
        """The chunks within `window` positions of `position` in a document, in order."""
        ...

    async def document_by_source(self, source: str) -> Document | None:
        """The document stored for `source`, if any."""
        ...

    async def documents_by_source(self, sources: Sequence[str]) -> dict[str, Document]:
        """`document_by_source` of several sources in one statement, by source (those with
        none stored left out): ingest looks up each call's files at once, not one by one."""
        ...

    async def chunk_keys(self, document_id: int) -> dict[str, str]:
        """`{key: content_hash}` of a document's stored chunks, to skip re-embedding unchanged
        ones."""
        ...

    async def documents(self, prefix: str = "", limit: int = 1000) -> list[Document]:
        """Documents whose source starts with `prefix`, in source order."""
        ...

    async def counts(self) -> dict[str, int]:
        """Row counts for `status`."""
        ...

    async def redacted_chunks(self) -> int:
        """For `status`: how many chunks hold a `[REDACTED:<type>]` marker."""
        ...

    async def skipped_files(self, prefix: str = "") -> dict[str, int]:
        """Files no chunker takes under `prefix`, by type: documents of kind `skipped`, whose
        content hash is `skipped:<type>`."""
        ...

    async def errors(self, limit: int = 100) -> list[dict[str, Any]]:
        """The most recent ingest errors."""
        ...

    async def links_of(
        self, chunk_id: int, relation: str | None = None, direction: str = "both"
    ) -> list[dict[str, Any]]:
        """The links of one chunk: `out` (it is src), `in` (it is dst) or `both`."""
        ...

    async def links_touching(self, chunk_ids: Sequence[int]) -> list[Link]:
        """Every link with either end in `chunk_ids`, for spreading activation."""
        ...

    async def link_status_targets(self, chunk_ids: Sequence[int]) -> list[int]:
        """The chunks that `chunk_ids` supersede or contradict (to refresh after deleting them)."""
        ...

    async def chunks_matching(self, chunk_ids: Sequence[int], filters: Filters) -> set[int]:
        """Which of `chunk_ids` pass a search's filters."""
        ...

    async def child_facts(
        self, chunk_ids: Sequence[int], dimension: int
    ) -> list[tuple[int, int, npt.NDArray[np.float32]]]:
        """Each fact below `chunk_ids` as `(fact, parent, vector)`: a chunk of granularity
        `fact`, not itself in `chunk_ids`, with a stored vector and a `parent` link to one of
        them (one row per such link), in one read (`search.match_facts`)."""
        ...

    async def current_version(self, chunk_id: int) -> int:
        """The version number of a memory's current text (1 for a memory never edited)."""
        ...

    async def history_of(self, chunk_id: int) -> list[dict[str, Any]]:
        """Every earlier version of a memory, oldest first."""
        ...

    async def reindex_state(self) -> ReindexState | None:
        """The reindex in progress (any connection), or None."""
        ...

    async def reindex_progress(self) -> tuple[int, int]:
        """`(staged, chunks)`: vectors already made with the new model, and chunks in all."""
        ...

    async def reindex_missing(self, after: int, limit: int) -> list[tuple[int, str]]:
        """Up to `limit` chunks with id above `after` that have no new vector yet, by id."""
        ...

    async def project_of(self, source: str) -> str | None:
        """The project recorded for `source`, if any."""
        ...

    async def sources_of(self, project: str) -> set[str]:
        """The sources recorded under `project`."""
        ...

    async def projects_of(self, sources: list[str]) -> dict[str, str]:
        """The projects recorded for those of `sources` that have one."""
        ...

    async def recent_chunks(self, filters: Filters, limit: int) -> list[Chunk]:
        """The newest chunks (by event time) of complete documents matching `filters`."""
        ...

    async def stored_documents(self, sources: Sequence[str]) -> dict[str, tuple[int, str, str]]:
        """`source → (id, content_hash, state)` for those of `sources` that are stored."""
        ...

    async def chunk_ids(self, doc_ids: Sequence[int]) -> dict[tuple[int, str], int]:
        """`(document id, chunk key) → chunk id` for the chunks of these documents (keys are
        unique within a document)."""
        ...

    async def find_same(self, table: str, values: dict[str, Any]) -> int | None:
        """The rowid of a row with exactly these values, if one exists (idempotent imports)."""
        ...


class Writer(Reader, Protocol):
    """The write operations (and every read), run inside one write transaction that commits
    when the function given to `store.write` returns and rolls back when it raises."""

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one ad-hoc statement (`?` placeholders); returns the number of rows it changed."""
        ...

    async def add_links(self, links: Sequence[Link], origin: str = "user") -> int:
        """Insert links (an existing one gets the new weight); both ends must exist.

        Returns:
            How many links were written."""
        ...

    async def remove_links(self, src: int, dst: int, relation: str | None = None) -> int:
        """Remove the links from `src` to `dst` (of one relation, or all). Returns how many."""
        ...

    async def refresh_link_status(self, chunk_ids: Iterable[int]) -> None:
        """Set each chunk's status from the `supersedes` / `contradicts` links pointing at it.

        Only statuses the links own (`active`, `superseded`, `contradicted`) are changed."""
        ...

    async def rebuild_structure(self, document_id: int) -> None:
        """Re-make a document's auto `parent` and `temporal` links from its chunks.

        `parent`: each chunk to its parent (fact -> round -> session). `temporal`: each round to
        the next round of the same conversation, in document order."""
        ...

    async def update_memory(
        self,
        chunk_id: int,
        edit: MemoryEdit,
        *,
        source: str,
        content_hash: str,
        chunk_hash: str,
        token_count: int,
        vector: npt.NDArray[np.float32] | None,
        meta: dict[str, Any] | None = None,
    ) -> int:
        """Write a memory's new version in place, keeping the old one in `chunk_history`.

        Args:
            chunk_id: The memory's chunk.
            edit: What changes.
            source, content_hash: The memory's document identity for its new text.
            chunk_hash: The chunk's new content hash (`records.chunk_hash`).
            token_count: Tokens of the new text.
            vector: The new text's vector; None when the text did not change.
            meta: The chunk's new meta (its `redacted` markers describe the new text); None keeps
                the stored one.

        Returns:
            The new version number.

        Raises:
            NotFoundError: No memory has this id.
            IngestError: Another memory already holds the new text."""
        ...

    async def begin_reindex(self, spec: str, model_id: str, dimension: int) -> ReindexState:
        """Record a new reindex and empty the staging table (in the caller's transaction)."""
        ...

    async def cancel_reindex(self) -> int:
        """Forget the reindex and drop its staged vectors. Returns how many were dropped."""
        ...

    async def drop_stray_vectors(self) -> int:
        """Drop staged vectors that cannot be used: no chunk, the wrong size, or no reindex in
        progress (for `check --repair`). Returns how many went."""
        ...

    async def stage_vectors(
        self, chunk_ids: Sequence[int], matrix: npt.NDArray[np.float32], model_id: str
    ) -> int:
        """Store new vectors for chunks that still exist (in the caller's transaction).

        The state is checked in the same transaction: a batch embedded just before a cancel (or
        a cancel and a new reindex to another model) is dropped, never mixed in.

        Returns:
            How many were stored.

        Raises:
            ReindexError: No reindex to `model_id` is recorded any more."""
        ...

    async def swap_model(self, state: ReindexState) -> int:
        """Make the staged vectors the live index (in the caller's write transaction).

        The caller has staged a vector for every chunk (checked here). `chunks_vec` is dropped and
        created again at the new dimension, filled from the staged rows, the cascade's tables are
        rebuilt from it (`vectors.rebuild`), and `meta` names the new model; the staging table is
        left empty and the reindex state removed.

        Returns:
            The number of vectors in the new index.

        Raises:
            RuntimeError: Some chunk has no staged vector (the caller catches up first)."""
        ...

    async def set_project(self, source: str, project: str | None) -> None:
        """Record `source`'s project (None: it belongs to no project)."""
        ...

    async def insert_many(self, table: str, rows: Sequence[dict[str, Any]]) -> None:
        """Insert rows, one `executemany` per set of columns (an older export may lack some)."""
        ...

    async def insert_row(self, table: str, values: dict[str, Any]) -> tuple[int, int]:
        """Insert one row unless it breaks a uniqueness constraint; returns its rowid and how many
        rows were added (0 when one with the same key was there)."""
        ...

    async def set_references(
        self, table: str, column: str, key: str, pairs: Sequence[tuple[int, int]]
    ) -> None:
        """`UPDATE table SET column = new WHERE key = row` for each `(new, row)` pair."""
        ...

    async def replace_document(
        self, doc: NewDocument, chunks: Sequence[NewChunk], *, structure_links: bool = True
    ) -> int:
        """Replace a document and its chunks in the caller's transaction.

        With `structure_links`, the document's `parent` and `temporal` links are made too.

        Returns:
            The document id."""
        ...

    async def replace_documents(
        self,
        docs: Sequence[tuple[NewDocument, Sequence[NewChunk]]],
        *,
        structure_links: bool = True,
    ) -> list[int]:
        """Replace documents in order, each as `replace_document` does, and forget their
        sources' errors (they are ingested now), in the caller's transaction: an ingest's
        documents in as few round trips as the backend allows.

        Returns:
            The document ids, in order."""
        ...

    async def insert_vectors(
        self, rows: Sequence[tuple[int, npt.NDArray[np.float32], str, str]]
    ) -> None:
        """Store the vectors of new chunks `(chunk_id, vector, kind, granularity)` in the caller's
        transaction: the sqlite-vec table and the cascade's codes and float copies."""
        ...

    async def delete_chunks(self, chunk_ids: Iterable[int]) -> None:
        """Delete chunks with their vectors; FTS rows go with them by trigger, links by cascade."""
        ...

    async def delete_document(self, source: str) -> bool:
        """Delete a document and everything that hangs off it. Returns whether it existed."""
        ...

    async def move_document(self, old: str, new: str) -> bool:
        """Rename a document's source, replacing any document already at `new`."""
        ...

    async def record_error(self, source: str, error_type: str, message: str) -> None:
        """Record why a source could not be ingested."""
        ...

    async def clear_errors(self, source: str) -> None:
        """Forget the errors of a source that has now been ingested."""
        ...

    async def count_use(self, chunk_ids: Sequence[int], *, retrieval: bool) -> None:
        """Count retrievals (returned by search) or accesses (read explicitly) apart, as MemX
        does."""
        ...

    async def set_meta(self, key: str, value: str) -> None:
        """Set one value of the store's `meta` table (self-calibration records its choice there)."""
        ...


class Store(Protocol):
    """An open store: reads and writes in transactions, and the embedding model it holds.

    `storage.registry.open_store` opens one from a location; each backend's store class
    (`storage.sqlite.store.SqliteStore`, `storage.pg.store.PgStore`) implements this.
    """

    @property
    def path(self) -> Path | str:
        """Where the store lives (a PostgreSQL URL without its password)."""
        ...

    @property
    def backend(self) -> str:
        """The backend's name: "sqlite", "postgresql"."""
        ...

    @property
    def schema_version(self) -> int:
        """The newest schema of this backend, which every open store is migrated to."""
        ...

    @property
    def model_id(self) -> str:
        """The embedding model the store's vectors come from."""
        ...

    @property
    def dimension(self) -> int:
        """The length of the store's vectors."""
        ...

    @property
    def routes_together(self) -> bool:
        """Whether a hybrid search embeds its query first and then asks `Reader.both_routes`
        for both routes in one read, rather than running the keyword route beside the
        embedding and each route's reads apart."""
        ...

    @property
    def generation(self) -> int:
        """Moves when the stored text may have changed (caches of term statistics follow it)."""
        ...

    @property
    def disk_full(self) -> bool:
        """The last write found the disk full (cleared by the next that succeeds)."""
        ...

    @property
    def gone(self) -> StoreGoneError | None:
        """A file of the store changed under it: every write is refused from then on."""
        ...

    @property
    def model_version(self) -> int:
        """How many times a reindex swapped the model since the store was opened."""
        ...

    @property
    def switching(self) -> bool:
        """A swap is in progress (from just before its COMMIT until `end_switch`)."""
        ...

    async def read(self, fn: Callable[[Reader], Awaitable[T]]) -> T:
        """Run `fn(reader)` in one read transaction."""
        ...

    def reading(self) -> AbstractAsyncContextManager[Reader]:
        """Borrow a reader for several reads in one transaction."""
        ...

    async def write(
        self, fn: Callable[[Writer], Awaitable[T]], *, counters_only: bool = False
    ) -> T:
        """Run `fn(writer)` in one write transaction; it commits when `fn` returns.

        `counters_only`: the write changes only use counters, so `generation` stays. A
        cancelled caller does not cut the transaction short: it runs on to its end."""
        ...

    def bulk_load(self) -> AbstractAsyncContextManager[None]:
        """A block of many writes into a new store (an initial build, an import).

        Each write in it still commits on its own, and readers stay correct throughout; a
        backend may defer index upkeep it can rebuild faster in one go (PostgreSQL's HNSW
        index on an empty store) and rebuilds it before the block ends."""
        ...

    async def close(self) -> None:
        """Close the store (waiting for a running write to finish)."""
        ...

    def begin_switch(self) -> None:
        """Mark the model as changing (called inside the swap transaction, before COMMIT)."""
        ...

    def end_switch(self, model_id: str | None = None, dimension: int | None = None) -> None:
        """The swap committed (`model_id` and `dimension` given) or was abandoned (None)."""
        ...

    def model_changed(self, since: int) -> bool:
        """Whether the model changed, or is changing, since `model_version` was `since`."""
        ...

    async def model_settled(self) -> int:
        """Wait for a swap in progress to finish; returns the current `model_version`."""
        ...

    async def check_vector_index(self) -> tuple[int, int] | None:
        """`(missing, extra)` rows of an in-memory vector index against the store, or None
        when there is none loaded; one that differs is dropped and reloads."""
        ...

    async def check_files(self) -> None:
        """Check that the store's files are still the ones open.

        Raises:
            StoreGoneError: One was deleted or replaced; every later write is refused too.
        """
        ...

    async def repair(self, embed: Embed | None, failed: set[str]) -> RepairReport:
        """Restore what it can of the invariants behind the `failed` check names (`check
        --repair`; `storage.repair` checks before and after).

        Args:
            embed: Embeds texts with the store's model; None: chunks without a vector stay so
                and are reported.
            failed: The checks that failed (`checks.failed`).

        Returns:
            What was done, the file documents to re-ingest, and what could not be repaired.
        """
        ...


class UnreadableRows(Exception):
    """Rows a damaged store cannot give back, met by an export (`ExportSnapshot.chunks_of`)."""


class ExportSnapshot(Protocol):
    """One read-only snapshot of a store, read by the exporter (`storage.exporter`); blocking.

    Rows are tuples in the order of their table's exported columns (`portable.Table.columns`),
    perhaps with more values after them. Where rows can break off (a damaged SQLite page), the
    reads take the export's `unreadable` list and add an entry to it instead of raising.
    """

    @property
    def newest_schema(self) -> int:
        """The newest schema this backend reads."""
        ...

    @property
    def header_extra(self) -> dict[str, Any]:
        """What this backend adds to the export's header (after `schema_version`)."""
        ...

    @property
    def checks_values(self) -> bool:
        """Whether stored values may be unreadable (`storage.values`): rows holding one are
        skipped and listed in the footer's `skipped_unreadable`."""
        ...

    def schema_version(self) -> int:
        """The store's schema version."""
        ...

    def meta(self) -> dict[str, str]:
        """The store's `meta` table."""
        ...

    def tables(self) -> list[portable.Table]:
        """The tables to export, documents and chunks first, then in foreign-key order."""
        ...

    def documents(
        self, table: portable.Table, unreadable: list[dict[str, Any]]
    ) -> Iterator[Sequence[Any]]:
        """The complete documents, by id (partial ones are half-written by a crash)."""
        ...

    def chunks_of(
        self, table: portable.Table, document_id: Any, vectors: bool
    ) -> Iterator[tuple[Sequence[Any], bytes | None]]:
        """A document's chunks by position and id, each with its float32 vector bytes when
        `vectors` (None: it has none).

        Raises:
            UnreadableRows: They cannot be read."""
        ...

    def rows(
        self, table: portable.Table, unreadable: list[dict[str, Any]]
    ) -> Iterator[tuple[Sequence[Any], Any]]:
        """Each row of another table, with its row id (None where not known)."""
        ...

    def partial_documents(self, unreadable: list[dict[str, Any]]) -> int:
        """How many documents are not complete (left out of the export)."""
        ...


class StoreBackend(Protocol):
    """One backend: open a store at a location, and what is done to one without opening it."""

    async def open(
        self,
        location: str,
        *,
        model_id: str,
        dimension: int,
        readers: int,
        query_timeout_ms: int,
        model_spec: str | None,
        isolate_users: bool,
        vector_index: str,
    ) -> Store:
        """Open (creating or migrating) the store at `location`.

        Raises:
            SchemaTooNewError: The store comes from a newer recalld.
            ModelMismatchError: The store was embedded with another model.
            StoreError: The store cannot be opened.
        """
        ...

    def stored_meta(self, location: str) -> dict[str, str] | None:
        """The store's `meta` table, or None when there is no store there (blocking)."""
        ...

    def check_store(self, location: str) -> dict[str, Any]:
        """`check`'s report on the store's invariants, changing nothing (blocking)."""
        ...

    def export_snapshot(self, location: str) -> AbstractContextManager[ExportSnapshot]:
        """One read-only snapshot of the store, for an export (blocking).

        Raises:
            StoreError: No store at `location`, or it cannot be read (also when a read fails
                inside the `with`).
        """
        ...

    def target_tables(self, location: str) -> dict[str, portable.Table]:
        """The store's tables by name, as an import maps onto them (blocking)."""
        ...
