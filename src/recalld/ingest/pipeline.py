"""Turning sources into stored chunks: read, hash-skip, chunk, embed what changed, write.

Blocking work (file reads, chunking, tokenising, inference) runs in worker threads; the store
write is one transaction per call (all its documents or none; a document whose auto links
search the store first waits for those before it to commit). Several calls may run at once
(`ingest.overlap`): they take turns at the model, and calls given places in a `WriteOrder`
write in that order, so one call's files are read and chunked, and another's written, while
the model embeds. Chunks whose
key and content are already stored keep their vectors, so re-ingesting a grown log embeds only
its new rounds.

With an LLM fact extractor, conversation logs are parsed again after chunking, their rounds go
to the extractor (on the event loop: it is network-bound), and the chunks are rebuilt with its
facts. If the endpoint fails, the rounds are stored with heuristic facts and a note says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import BinaryIO

import numpy as np

from recalld.chunkers import (
    ChunkedSource,
    ChunkOptions,
    Conversation,
    chunk_file,
    conversation_chunks,
    parse_conversations,
)
from recalld.chunkers.options import KeyMaker, SpanCounter
from recalld.chunkers.secrets import mark_redactions, redact, redact_marked
from recalld.config import ChunkSettings, LinkSettings, PrivacySettings
from recalld.embeddings.base import Embedder
from recalld.errors import IngestError, NotFoundError, RecalldError, UnsupportedFormatError
from recalld.ingest.autolink import AutoLinker
from recalld.ingest.facts_llm import LLMFactExtractor
from recalld.ingest.overlap import Place
from recalld.ingest.supersede_llm import LLMSupersessionDetector
from recalld.safe_io import call_with_timeout, open_regular
from recalld.storage import records
from recalld.storage.contract import Store, Writer
from recalld.storage.importer import Redact
from recalld.storage.records import MEMORY_PREFIX
from recalld.types import MEMORY_TYPES, ChunkDraft

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class IngestReport:
    """What one ingest did."""

    source: str
    status: str  # "ingested" | "unchanged" | "empty" | "skipped" (no chunker takes it)
    document_id: int | None = None
    chunks: int = 0
    embedded: int = 0
    notes: list[str] = field(default_factory=list)
    skipped_type: str = ""  # for "skipped": the file type no chunker takes
    unreadable: int = 0  # chunks left out as unreadable (chunkers.garbage)


@dataclass(frozen=True, slots=True)
class _Prepared:
    source: str
    content_hash: str
    parsed: ChunkedSource
    mtime: float | None
    size: int | None


@dataclass(frozen=True, slots=True)
class _Embedded:
    """What `_embed_docs` made of a call's documents."""

    version: int  # the store's model version the vectors come from
    found: list[list[tuple[np.ndarray | None, int]]]  # per document, per chunk: (vector, tokens)
    stored_ids: dict[int, int]  # document index -> id of its stored earlier version


@dataclass(frozen=True, slots=True)
class _Ready:
    """A document with its chunks and links, ready to write."""

    d_index: int
    doc: _Prepared
    row: records.NewDocument
    chunks: list[records.NewChunk]


SKIPPED = "skipped"  # the kind of a document recorded for a file no chunker takes


def _skipped(source: str, file_type: str, mtime: float | None, size: int | None) -> _Prepared:
    """A file no chunker takes, as a document without chunks: its format is the file type, and
    its stored mtime and size keep scans from trying it again until it changes."""
    note = f"skipped: recalld does not read {file_type} files"
    parsed = ChunkedSource(SKIPPED, file_type, [], [note])
    # A hash no content has, so a rename is never matched to a skipped file.
    return _Prepared(source, f"{SKIPPED}:{file_type}", parsed, mtime, size)


def _report(ready: _Ready, doc_id: int) -> IngestReport:
    """What ingesting a written document did (and the log lines saying so)."""
    doc, chunks = ready.doc, ready.chunks
    embedded = sum(1 for c in chunks if c.vector is not None)
    status = "ingested" if chunks else "empty"
    skipped_type = ""
    if doc.parsed.kind == SKIPPED:
        status, skipped_type = "skipped", doc.parsed.format
    logger.info("ingested %s: %d chunks (%d embedded)", doc.source, len(chunks), embedded)
    if doc.parsed.unreadable:
        logger.warning("%s: %d chunks left out as unreadable", doc.source, doc.parsed.unreadable)
    return IngestReport(
        doc.source,
        status,
        doc_id,
        len(chunks),
        embedded,
        list(doc.parsed.notes),
        skipped_type,
        doc.parsed.unreadable,
    )


def content_hash(data: bytes) -> str:
    """The hash that identifies a source's content."""
    return hashlib.sha256(data).hexdigest()


def read_timeout_error(path: Path | str, timeout: float) -> IngestError:
    """The error for a file whose read hung (a stuck mount, a leased or special file)."""
    return IngestError(
        f"reading {path} took longer than {timeout:g} s (a hung mount, or a file that blocks "
        "readers); skipped, and tried again when it changes (daemon.read_timeout_s)",
        data={"path": str(path), "reason": "read timed out"},
    )


def busy_file_error(path: Path | str) -> IngestError:
    """The error for a file another program holds (a lease): opening it would wait."""
    return IngestError(
        f"{path} is held by another program (a file lease), so reading it would wait; "
        "skipped, and tried again when it changes",
        data={"path": str(path), "reason": "held by another program"},
    )


def too_large_error(path: Path | str, size: int, max_bytes: int) -> IngestError:
    """The error for a file over `daemon.max_file_mb`."""
    return IngestError(
        f"{path} is {size / 2**20:.0f} MiB, over the {max_bytes / 2**20:.0f} MiB "
        "limit; raise daemon.max_file_mb to ingest it",
        data={"path": str(path), "reason": "too large"},
    )


def read_capped(handle: BinaryIO, path: Path | str, max_bytes: int) -> bytes:
    """Read an open file whole, refusing it when it holds more than `max_bytes`.

    The size seen by a stat before the open is not enough: a file still being written can
    grow past the limit between that stat and this read, and its first `max_bytes` must not
    be stored as if they were all of it.

    Raises:
        IngestError: The file holds more than `max_bytes` now.
    """
    data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise too_large_error(path, os.fstat(handle.fileno()).st_size, max_bytes)
    return data


def _read_file(path: Path, max_bytes: int) -> tuple[bytes, float, int]:
    stat = path.stat()
    if stat.st_size > max_bytes:
        raise too_large_error(path, stat.st_size, max_bytes)
    try:
        handle = open_regular(path)
    except BlockingIOError:
        raise busy_file_error(path) from None
    with handle:
        data = read_capped(handle, path, max_bytes)
    return data, stat.st_mtime, stat.st_size


def _conversation_drafts(
    conversations: Sequence[Conversation],
    options: ChunkOptions,
    facts: Sequence[dict[str, list[str]]] | None,
    model: str,
) -> list[ChunkDraft]:
    """All conversations' chunks, keyed as `chunk_file` keys them; LLM facts name the model."""
    keys = KeyMaker()
    drafts: list[ChunkDraft] = []
    for index, conv in enumerate(conversations):
        found = facts[index] if facts is not None else None
        drafts.extend(conversation_chunks(conv, options, facts=found, keys=keys))
    return [
        replace(d, meta={**d.meta, "model": model})
        if d.granularity == "fact" and d.meta.get("extractor") == "llm"
        else d
        for d in drafts
    ]


def _chunk_each(
    files: Sequence[tuple[str, bytes]], options: ChunkOptions
) -> list[ChunkedSource | RecalldError]:
    """`chunk_file` for each `(name, data)`, or the error it raised (blocking)."""
    chunked: list[ChunkedSource | RecalldError] = []
    for name, data in files:
        try:
            chunked.append(chunk_file(name, data, options))
        except RecalldError as exc:
            chunked.append(exc)
    return chunked


def span_counter(embedder: Embedder) -> SpanCounter | None:
    """The embedder's `count_spans` (one tokenisation for several spans of a text) if it has
    one (`LocalEmbedder`); None: the chunker counts each span with `count_tokens`."""
    found = getattr(embedder, "count_spans", None)
    return found if callable(found) else None


class _ModelChanged(Exception):
    """A reindex swapped the store's model after this document was embedded."""


class Ingestor:
    """Ingests files, text and memories into one store with one embedder.

    Args:
        store: The open store.
        embedder: The store's model.
        chunking: Chunk sizes.
        max_file_bytes: Larger files are refused (never read whole).
        batch_size: Texts per model call.
        read_timeout_s: A file whose read takes longer is skipped (`safe_io`).
        facts: An LLM fact extractor for conversation logs (`facts_llm.fact_extractor`);
            None: heuristic facts. The caller closes it.
        links: Auto-link settings (similar, supersedes); default `LinkSettings()`.
        supersession: The LLM knowledge-update detector; None: the rule. The caller closes it.
        privacy: Secret redaction (`redact`, `redact_entropy`); default `PrivacySettings()`,
            redaction on.
    """

    def __init__(
        self,
        store: Store,
        embedder: Embedder,
        chunking: ChunkSettings,
        max_file_bytes: int = 64 * 2**20,
        batch_size: int = 32,
        *,
        read_timeout_s: float = 30.0,
        facts: LLMFactExtractor | None = None,
        links: LinkSettings | None = None,
        supersession: LLMSupersessionDetector | None = None,
        privacy: PrivacySettings | None = None,
    ) -> None:
        self.store = store
        self.embedder = embedder
        privacy = privacy or PrivacySettings()
        self.options = ChunkOptions(
            max_tokens=chunking.max_tokens,
            overlap_tokens=chunking.overlap_tokens,
            count_tokens=embedder.count_tokens,
            count_spans=span_counter(embedder),
            facts=chunking.facts,
            turn_windows=chunking.turn_windows,
            redact=privacy.redact,
            redact_entropy=privacy.redact_entropy,
        )
        self.max_file_bytes = max_file_bytes
        self.read_timeout_s = read_timeout_s
        self.batch_size = batch_size
        self.facts = facts if chunking.facts else None
        self.linker = AutoLinker(store, links or LinkSettings(), supersession)
        # Concurrent calls embed one at a time: the embedder is not assumed thread-safe, and
        # the model already uses every core.
        self._model_lock = asyncio.Lock()
        # The embedder opening what batches use, started by the first call of several files.
        self._preparing: asyncio.Task[None] | None = None

    def use_privacy(self, privacy: PrivacySettings) -> None:
        """Redact (or not) by these settings from the next ingest, memory or import on (a
        config reload); what is stored stays as it is."""
        self.options = replace(
            self.options, redact=privacy.redact, redact_entropy=privacy.redact_entropy
        )

    def use_model(self, embedder: Embedder) -> None:
        """Embed (and count tokens) with another model from now on (after a reindex)."""
        self.embedder = embedder
        self.options = replace(
            self.options, count_tokens=embedder.count_tokens, count_spans=span_counter(embedder)
        )
        self._preparing = None

    async def ingest_file(
        self, path: Path, source: str | None = None, *, redact: bool = True
    ) -> IngestReport:
        """Ingest one file, skipping it when its content is already stored.

        Raises:
            IngestError: The file cannot be read or parsed; the reason is also recorded in the
                store's errors table.
        """
        if source is None:
            source = await asyncio.to_thread(os.path.abspath, path)
        try:
            data, mtime, size = await call_with_timeout(
                partial(_read_file, path, self.max_file_bytes), self.read_timeout_s
            )
        except TimeoutError:
            error = read_timeout_error(path, self.read_timeout_s)
            await self._record_error(source, error, keep_stored=True)
            raise error from None
        except OSError as exc:
            error = IngestError(
                f"cannot read {path}: {exc.strerror or exc}",
                data={"path": str(path), "reason": exc.strerror or str(exc)},
            )
            await self._record_error(source, error, keep_stored=True)
            raise error from exc
        return await self.ingest_bytes(
            source, path.name, data, mtime=mtime, size=size, redact=redact
        )

    async def ingest_bytes(
        self,
        source: str,
        name: str,
        data: bytes,
        *,
        mtime: float | None = None,
        size: int | None = None,
        redact: bool = True,
    ) -> IngestReport:
        """Ingest content under `source`; `name` (with its extension) picks the format."""
        reports = await self.ingest_many([(source, name, data, mtime, size)], redact=redact)
        return reports[0]

    async def ingest_many(
        self,
        items: Sequence[tuple[str, str, bytes, float | None, int | None]],
        *,
        redact: bool = True,
        place: Place | None = None,
    ) -> list[IngestReport]:
        """Ingest several sources, sharing embedding batches between them.

        Args:
            items: `(source, name, data, mtime, size)` each.
            redact: False stores the text unredacted even when redaction is on (the user
                asked for it: `ingest --allow-secrets`).
            place: This call's place in a `WriteOrder` shared with overlapping calls: its
                documents are written after theirs; None: whenever they are ready.

        Calls may overlap (`ingest.overlap.InFlight`): each keeps its own model batches.

        Raises:
            IngestError: For the first source that failed, after the others were ingested.
        """
        try:
            return await self._ingest_many(items, redact, place)
        finally:
            if place is not None:
                place.leave()

    async def _ingest_many(
        self,
        items: Sequence[tuple[str, str, bytes, float | None, int | None]],
        redact: bool,
        place: Place | None,
    ) -> list[IngestReport]:
        options = self.options if redact else replace(self.options, redact=False)
        if len(items) > 1:
            self._prepare_batches()
        reports: list[IngestReport | None] = [None] * len(items)
        prepared: list[tuple[int, _Prepared]] = []
        first_error: RecalldError | None = None
        # One lookup for the call's sources, not one per source (each is a trip to a reader).
        stored_docs = await self.store.read(
            lambda reader: reader.documents_by_source([item[0] for item in items])
        )
        todo: list[tuple[int, str]] = []  # (index, content hash) of the files to chunk
        for index, (source, _, data, _, _) in enumerate(items):
            digest = content_hash(data)
            stored = stored_docs.get(source)
            if stored and stored.content_hash == digest and stored.state == "complete":
                reports[index] = IngestReport(source, "unchanged", stored.id, stored.chunk_count)
                continue
            todo.append((index, digest))
        # One worker trip chunks the call's files: a trip each cost ~65 us of CPU, both ends.
        chunked = await asyncio.to_thread(
            _chunk_each, [(items[index][1], items[index][2]) for index, _ in todo], options
        )
        for (index, digest), parsed in zip(todo, chunked, strict=True):
            source, name, data, mtime, size = items[index]
            try:
                if isinstance(parsed, RecalldError):
                    raise parsed
                if self.facts is not None and parsed.kind == "conversation":
                    parsed = await self._with_llm_facts(name, data, parsed, self.facts, options)
            except UnsupportedFormatError as exc:
                # Not an error (issue 16): recorded as skipped, not retried until it changes.
                skipped = _skipped(source, exc.data.get("file_type", "binary"), mtime, size)
                prepared.append((index, skipped))
                continue
            except RecalldError as exc:
                exc.data.setdefault("path", source)
                await self._record_error(source, exc)
                first_error = first_error or exc
                continue
            prepared.append((index, _Prepared(source, digest, parsed, mtime, size)))
        for index, report in await self._embed_and_write([p for _, p in prepared], place):
            reports[prepared[index][0]] = report
        if first_error is not None:
            raise first_error
        return [r for r in reports if r is not None]

    def _prepare_batches(self) -> None:
        """Have the embedder open what embedding batches of texts uses (`LocalEmbedder.
        prepare_batches`: ~0.35 s) in a worker thread while this call's files are read and
        chunked, once, rather than in its first batch while the model waits."""
        prepare = getattr(self.embedder, "prepare_batches", None)
        if self._preparing is not None or not callable(prepare):
            return
        self._preparing = asyncio.ensure_future(asyncio.to_thread(prepare))
        # Not awaited: the first batch waits for the open itself, and fails as it would have.
        self._preparing.add_done_callback(_retrieve)

    async def skip(
        self, source: str, file_type: str, mtime: float | None, size: int | None
    ) -> IngestReport:
        """Record a file no chunker takes (known by its name, so never read) as skipped."""
        [(_, report)] = await self._embed_and_write([_skipped(source, file_type, mtime, size)])
        return report

    async def _with_llm_facts(
        self,
        name: str,
        data: bytes,
        parsed: ChunkedSource,
        extractor: LLMFactExtractor,
        options: ChunkOptions,
    ) -> ChunkedSource:
        """Rebuild a conversation log's chunks with facts from the LLM (heuristic on failure).
        The rounds are parsed with their secrets redacted, so none reaches the endpoint."""
        conversations, _ = await asyncio.to_thread(parse_conversations, name, data, options)
        notes = list(parsed.notes)
        found: list[dict[str, list[str]]] | None
        try:
            found = await extractor.extract(conversations)
        except IngestError as exc:
            logger.warning("%s: %s; storing heuristic facts instead", name, exc.message)
            # The stored content hash stays the file's own: LLM facts replace these when the
            # log next changes (uncached rounds are asked for then), not on an unchanged file.
            notes.append(
                f"LLM facts unavailable ({exc.message}); heuristic facts stored instead until "
                "the log changes"
            )
            found = None
        chunks = await asyncio.to_thread(
            _conversation_drafts, conversations, options, found, extractor.model
        )
        if options.redact:
            chunks = mark_redactions(chunks)
        return ChunkedSource(parsed.kind, parsed.format, chunks, notes)

    async def _embed_and_write(
        self, docs: list[_Prepared], place: Place | None = None
    ) -> list[tuple[int, IngestReport]]:
        # A reindex may swap the store's model between embedding and writing: each write
        # checks, in its transaction, that the vectors come from the store's model, and the
        # documents not yet written are embedded again with the new one.
        embedded = await self._embed_docs(docs)
        async with place.turn() if place is not None else contextlib.nullcontext():
            return await self._write_docs(docs, embedded)

    async def _embed_docs(self, docs: list[_Prepared]) -> _Embedded:
        """The model version, and each document's chunks' new vectors and token counts (None
        and 0 for chunks whose key and content are stored: they keep theirs)."""
        version = await self.store.model_settled()
        todo: list[tuple[int, int, ChunkDraft]] = []
        stored_ids: dict[int, int] = {}
        stored_docs = await self.store.read(
            lambda reader: reader.documents_by_source([doc.source for doc in docs])
        )
        for d_index, doc in enumerate(docs):
            stored = stored_docs.get(doc.source)
            known: dict[str, str] = {}
            if stored is not None:
                stored_ids[d_index] = stored.id
                async with self.store.reading() as reader:
                    known = await reader.chunk_keys(stored.id)
            for c_index, draft in enumerate(doc.parsed.chunks):
                # A new document's chunks all need embedding: no hash to compare.
                if not known or known.get(draft.key) != records.chunk_hash(draft):
                    todo.append((d_index, c_index, draft))
        texts = [draft.text for _, _, draft in todo]
        async with self._model_lock:
            vectors = await self.embed(texts)
        counts = await asyncio.to_thread(self._count_tokens, texts)
        new = {(d, c): (vectors[i], counts[i]) for i, (d, c, _) in enumerate(todo)}
        found = [
            [new.get((d_index, c_index), (None, 0)) for c_index in range(len(doc.parsed.chunks))]
            for d_index, doc in enumerate(docs)
        ]
        return _Embedded(version, found, stored_ids)

    async def _write_docs(
        self, docs: list[_Prepared], embedded: _Embedded
    ) -> list[tuple[int, IngestReport]]:
        """Write the documents in as few transactions as their auto links allow."""
        reports: list[tuple[int, IngestReport]] = []
        group: list[_Ready] = []
        for d_index, doc in enumerate(docs):
            found = embedded.found[d_index]
            vectors = [v for v, _ in found]
            if group and self.linker.searches(doc.parsed.chunks, vectors):
                # Its links look for earlier documents in the store: commit those first.
                if not await self._write_group(group, embedded.version, reports):
                    return reports + await self._again(docs, reports)
                group = []
            autolinks = await self.linker.links_for(
                doc.parsed.chunks, vectors, embedded.stored_ids.get(d_index)
            )
            chunks = [
                records.NewChunk(draft, count, vector, links)
                for draft, (vector, count), links in zip(
                    doc.parsed.chunks, found, autolinks, strict=True
                )
            ]
            row = records.NewDocument(
                doc.source,
                doc.parsed.kind,
                doc.parsed.format,
                doc.content_hash,
                doc.mtime,
                doc.size,
                # Every chunk has an event time (issue 8): undated ones take the file's mtime.
                doc.mtime if doc.mtime is not None else time.time(),
            )
            group.append(_Ready(d_index, doc, row, chunks))
        if group and not await self._write_group(group, embedded.version, reports):
            return reports + await self._again(docs, reports)
        return reports

    async def _again(
        self, docs: list[_Prepared], reports: list[tuple[int, IngestReport]]
    ) -> list[tuple[int, IngestReport]]:
        """Embed and write again, with the store's new model, the documents not yet written
        (a reindex swapped the model after they were embedded); `reports` holds those that
        were, the first ones in order."""
        start = len(reports)
        rest = docs[start:]
        again = await self._write_docs(rest, await self._embed_docs(rest))
        return [(start + i, report) for i, report in again]

    async def _write_group(
        self, group: list[_Ready], version: int, reports: list[tuple[int, IngestReport]]
    ) -> bool:
        """Write documents in one transaction, adding their reports; when it fails, write each
        alone, so a document that cannot be written takes none of the others with it.

        Returns:
            False when a reindex swapped the store's model after the vectors were made: the
            documents not reported are not written and must be embedded again.

        Raises:
            Exception: Why the first document that failed alone failed, after the others
                went in.
        """

        async def write(conn: Writer) -> list[int]:
            if self.store.model_changed(version):
                raise _ModelChanged
            return await conn.replace_documents(
                [(ready.row, ready.chunks) for ready in group],
                structure_links=self.linker.settings.auto,
            )

        try:
            ids = await self.store.write(write)
        except _ModelChanged:
            return False
        except Exception:
            if len(group) == 1:
                raise
            first: Exception | None = None
            for one in group:
                try:
                    if not await self._write_group([one], version, reports):
                        return False
                except Exception as exc:
                    first = first or exc
            if first is not None:
                raise first from None
            return True
        for ready, doc_id in zip(group, ids, strict=True):
            reports.append((ready.d_index, _report(ready, doc_id)))
        return True

    def import_redaction(self) -> Redact | None:
        """How `import` redacts texts as ingest does (`storage.importer`); None when
        redaction is off."""
        if not self.options.redact:
            return None
        return partial(redact_marked, entropy=self.options.redact_entropy)

    def _redact(self, text: str) -> str:
        if not self.options.redact:
            return text
        return redact(text, entropy=self.options.redact_entropy)[0]

    def _count_tokens(self, texts: list[str]) -> list[int]:
        return [self.embedder.count_tokens(t) for t in texts]

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts in batches, each in a worker thread."""
        if not texts:
            return np.zeros((0, self.embedder.dimension), dtype=np.float32)
        parts = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            parts.append(await asyncio.to_thread(self.embedder.embed, batch))
        return np.concatenate(parts)

    async def remember(
        self,
        text: str,
        *,
        memory_type: str = "semantic",
        tags: Sequence[str] = (),
        importance: float = 0.5,
        event_time: float | None = None,
    ) -> IngestReport:
        """Store a memory written directly; the same text stored twice is one memory.

        Raises:
            IngestError: The text is empty or the memory type is not one of `MEMORY_TYPES`.
        """
        if not text.strip():
            raise IngestError("a memory needs some text")
        check_memory_type(memory_type)
        text = await asyncio.to_thread(self._redact, text.strip())
        digest = content_hash(text.encode())
        draft = ChunkDraft(
            text=text,
            kind="memory",
            granularity="memory",
            key="memory",
            event_time=event_time if event_time is not None else time.time(),
            tags=tuple(tags),
            memory_type=memory_type,
            importance=importance,
        )
        [draft] = mark_redactions([draft])
        source = f"{MEMORY_PREFIX}{digest[:16]}"
        parsed = ChunkedSource(kind="memory", format="memory", chunks=[draft], notes=[])
        [(_, report)] = await self._embed_and_write([_Prepared(source, digest, parsed, None, None)])
        return report

    async def update_memory(self, chunk_id: int, edit: records.MemoryEdit) -> int:
        """Edit a memory in place, keeping its earlier version (`storage.sqlite.history`).

        Returns:
            The new version number.

        Raises:
            NotFoundError: No memory has this id.
            IngestError: The new text is empty, the type unknown, or another memory holds the
                new text.
        """
        if edit.memory_type is not None:
            check_memory_type(edit.memory_type)
        found = await self.store.read(lambda r: r.chunks_by_id(ids=[chunk_id]))
        chunk = found.get(chunk_id)
        if chunk is None or chunk.kind != "memory":
            raise NotFoundError(
                f"no memory with id {chunk_id}; only memories written with `remember` can be "
                "edited",
                data={"id": chunk_id},
            )
        text = chunk.text if edit.text is None else edit.text.strip()
        if not text:
            raise IngestError("a memory needs some text")
        if edit.text is not None:
            text = await asyncio.to_thread(self._redact, text)
        draft = ChunkDraft(
            text=text,
            kind="memory",
            granularity="memory",
            key="memory",
            event_time=chunk.event_time if edit.event_time is None else edit.event_time,
            tags=chunk.tags if edit.tags is None else edit.tags,
            memory_type=chunk.memory_type if edit.memory_type is None else edit.memory_type,
            importance=chunk.importance if edit.importance is None else edit.importance,
            # `redacted` describes the stored text: dropped, then found again in the new one.
            meta={k: v for k, v in chunk.meta.items() if k != "redacted"},
        )
        [draft] = mark_redactions([draft])
        vector = None
        tokens = chunk.token_count
        version = await self.store.model_settled()
        if text != chunk.text:
            vector = (await self.embed([text]))[0]
            tokens = await asyncio.to_thread(self.embedder.count_tokens, text)
        digest = content_hash(text.encode())
        edit = replace(edit, text=text)

        async def write(conn: Writer) -> int:
            if vector is not None and self.store.model_changed(version):
                raise _ModelChanged
            return await conn.update_memory(
                chunk_id,
                edit,
                source=f"{MEMORY_PREFIX}{digest[:16]}",
                content_hash=digest,
                chunk_hash=records.chunk_hash(draft),
                token_count=tokens,
                vector=vector,
                meta=draft.meta,
            )

        try:
            return await self.store.write(write)
        except _ModelChanged:
            # A reindex switched models while we embedded: embed the edit again with the new one.
            return await self.update_memory(chunk_id, edit)

    async def forget(self, source: str) -> bool:
        """Remove a document or memory. Returns whether it existed."""
        return await self.store.write(lambda c: c.delete_document(source))

    async def _record_error(
        self, source: str, error: RecalldError, *, keep_stored: bool = False
    ) -> None:
        logger.warning("cannot ingest %s: %s", source, error.message)
        kind = type(error).__name__
        await self.store.write(
            lambda c: replace_error(c, source, kind, error.message, keep_stored=keep_stored)
        )


def _retrieve(task: asyncio.Task[None]) -> None:
    """Mark a background task's failure seen (asyncio logs unseen ones); the work that needed
    it meets the same failure itself."""
    if not task.cancelled() and task.exception() is not None:
        logger.debug("preparing the embedder failed: %s", task.exception())


def check_memory_type(memory_type: str) -> None:
    """Refuse a memory type outside `MEMORY_TYPES`.

    Raises:
        IngestError: The type is unknown.
    """
    if memory_type not in MEMORY_TYPES:
        raise IngestError(
            f"unknown memory type {memory_type!r}; use one of {', '.join(MEMORY_TYPES)}",
            data={"memory_type": memory_type, "allowed": list(MEMORY_TYPES)},
        )


async def replace_error(
    conn: Writer, source: str, error_type: str, message: str, *, keep_stored: bool = False
) -> None:
    """Record why a source failed, in place of its earlier errors: a file that fails at every
    event or scan is listed once, with its latest reason.

    When the failure is about the file's content (too large, cannot be parsed), what was
    stored for an earlier version goes in the same transaction: the source is then an error,
    not both (a file read empty while it was being created, then refused once it grew past
    the size limit, used to be both, and search kept answering with content the file no
    longer had). When the file could not be read at all (`keep_stored`: a timeout, a lease,
    a permission), its last good version stays searchable: nothing is lost to a passing fault.
    """
    if not keep_stored:
        await conn.delete_document(source)
    await conn.clear_errors(source)
    await conn.record_error(source, error_type, message)


def read_failed(error: BaseException | None) -> bool:
    """True when `error` says a file could not be read (its content is unknown), not that its
    content was refused: such a failure keeps the file's last good version (`replace_error`)."""
    if isinstance(error, OSError | TimeoutError):
        return True
    reason = error.data.get("reason") if isinstance(error, RecalldError) else None
    return reason in READ_FAILURES


# The `reason`s of the errors for files whose read failed rather than whose content was refused.
READ_FAILURES = frozenset({"read timed out", "held by another program"})
