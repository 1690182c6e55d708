"""Import a JSONL export into a store: ids remapped, idempotent, vectors reused or re-embedded.

The file is checked whole first (`import_plan`), then read again and written:

- **Documents are keyed by source.** One already stored with the same content hash is left as
  it is (importing twice changes nothing) and its chunks are matched by key, so links and other
  rows still find them. One stored with other content is a conflict: kept, and reported,
  unless `replace` is set. A document is always written with all its chunks, in one
  transaction per batch of documents.
- **Ids are remapped.** Rows get new ids in the target; every column that references
  documents, chunks or another table's id (declared foreign keys, see `portable`) is rewritten
  through the old→new maps, so parents and links follow. A row that points at something not
  imported (a conflicting document's chunk) is skipped and counted.
- **Vectors** are reused when the file carries them and names the store's model and
  dimension; otherwise the chunks are embedded again with the store's model, in batches
  across documents. That is how a user moves to another model or machine.
- Other tables are inserted row by row only when no identical row exists (ignoring the
  surrogate id), so they are idempotent too.
- **Secrets are redacted** as ingest redacts them (issue 16), unless the caller opts out: an
  export made before redaction, or any hand-made file, would otherwise put keys back in the
  store. A chunk whose text changed records its markers in `meta.redacted` and is embedded
  again (the file's vector was made from the secret); a memory is renamed after its new text,
  as `remember` names it; earlier versions in `chunk_history` are redacted too.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from recalld.storage import portable
from recalld.storage.contract import Store, Writer
from recalld.storage.import_plan import Plan, plan_import, read_lines
from recalld.storage.records import MEMORY_PREFIX, memory_source

logger = logging.getLogger(__name__)

Embed = Callable[[Sequence[str]], Awaitable[npt.NDArray[np.float32]]]
Progress = Callable[[dict[str, Any]], Awaitable[None]]
# Text -> (text with its secrets replaced, markers `{"type", "at"}` of every redaction in it).
Redact = Callable[[str], tuple[str, list[dict[str, Any]]]]
_HISTORY = "chunk_history"  # memories' earlier versions, with their text
_PROJECTS = "document_projects"  # keyed by source: follows a renamed memory

_READ_BATCH = 500
_EMBED_BATCH = 256  # chunks gathered across documents before one embedding pass
_ROW_BATCH = 500


@dataclass(slots=True)
class _Doc:
    row: dict[str, Any]
    chunks: list[tuple[dict[str, Any], bytes | None]] = field(default_factory=list)


@dataclass(slots=True)
class _Report:
    imported: int = 0
    unchanged: int = 0
    replaced: int = 0
    conflicts: list[str] = field(default_factory=list)
    chunks: int = 0
    embedded: int = 0
    reused: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    redacted: dict[str, int] = field(default_factory=dict)


class Importer:
    """One import of one file into one store (see the module docstring).

    Args:
        store: The open target store.
        embed: Embeds texts with the store's model (`Ingestor.embed`).
        replace: Replace stored documents whose content differs from the file's.
        progress: Awaited with counts after each batch of documents.
        redact: Replaces secrets in texts (`Ingestor.import_redaction`); None stores the
            file's texts as they are (the user opted out, or redaction is off).
    """

    def __init__(
        self,
        store: Store,
        embed: Embed,
        *,
        replace: bool = False,
        progress: Progress | None = None,
        redact: Redact | None = None,
    ) -> None:
        self.store = store
        self.embed = embed
        self.replace = replace
        self.progress = progress
        self.redact = redact
        self.renamed: dict[str, str] = {}  # memory sources renamed after their redacted text
        self.maps: dict[str, dict[int, int]] = {}
        # (table, old row id, column, old chunk id): chunk references resolved once both exist.
        self.deferred: list[tuple[str, int, str, int]] = []
        self.report = _Report()
        self.plan: Plan | None = None

    async def run(self, path: Path) -> dict[str, Any]:
        """Import `path`; returns what was done (see docs/protocol.md, `import`).

        Raises:
            ParseError: The file is malformed (nothing was imported).
            NotFoundError: No such file.
            EmbeddingError: Chunks had to be embedded and the model failed.
        """
        store = self.store
        plan = await asyncio.to_thread(
            plan_import, path, store.path, store.model_id, store.dimension
        )
        self.plan = plan
        lines = read_lines(path)
        try:
            # A store with no vectors yet (PostgreSQL) builds its vector index at the end.
            async with store.bulk_load():
                await self._read_all(lines, plan)
        finally:
            lines.close()
        return self._result()

    async def _read_all(
        self, lines: Generator[tuple[int, dict[str, Any]], None, None], plan: Plan
    ) -> None:
        """Every line of the file, documents in batches, then the other rows."""
        store = self.store
        pending: list[_Doc] = []
        pending_chunks = 0
        rows: list[tuple[str, dict[str, Any]]] = []
        while batch := await asyncio.to_thread(lambda: list(islice(lines, _READ_BATCH))):
            for _, message in batch:
                kind = message["type"]
                row: dict[str, Any] = message.get("row") or {}
                if kind == portable.DOCUMENTS:
                    if pending_chunks >= _EMBED_BATCH:
                        await self._documents(pending)
                        pending, pending_chunks = [], 0
                    pending.append(_Doc(row))
                elif kind == portable.CHUNKS:
                    vector = message.get("vector") if plan.reuse_vectors else None
                    blob = portable.decode_vector(vector, store.dimension) if vector else None
                    pending[-1].chunks.append((row, blob))
                    pending_chunks += 1
                elif kind not in (portable.HEADER, portable.FOOTER):
                    # Documents and chunks come first: the first other row ends them.
                    await self._documents(pending)
                    pending, pending_chunks = [], 0
                    rows.append((kind, row))
                    if len(rows) >= _ROW_BATCH:
                        await self._rows(rows)
                        rows = []
        await self._documents(pending)
        await self._rows(rows)
        await self._resolve_deferred()

    # -- documents and chunks ------------------------------------------------------------------

    async def _documents(self, docs: list[_Doc]) -> None:
        """Write a batch of documents in one transaction, embedding in one pass whatever has
        no reusable vector."""
        if not docs:
            return
        if self.redact is not None:
            await asyncio.to_thread(self._redact_documents, docs)
        sources = [str(doc.row["source"]) for doc in docs]
        stored = await self.store.read(lambda c: c.stored_documents(sources))
        wanted = [
            (index, [str(row["text"]) for row, blob in doc.chunks if blob is None])
            for index, doc in enumerate(docs)
            if self._action(doc, stored.get(sources[index])) in ("insert", "replace")
        ]
        texts = [text for _, doc_texts in wanted for text in doc_texts]
        fresh: dict[int, npt.NDArray[np.float32]] = {}
        if texts:
            vectors = await self.embed(texts)
            cursor = 0
            for index, doc_texts in wanted:
                fresh[index] = vectors[cursor : cursor + len(doc_texts)]
                cursor += len(doc_texts)
        await self.store.write(partial(self._write_documents, docs=docs, fresh=fresh))
        if self.progress is not None:
            report = self.report
            done = report.imported + report.unchanged + report.replaced + len(report.conflicts)
            await self.progress(
                {
                    "documents": done,
                    "total": self.plan.counts.get(portable.DOCUMENTS, 0) if self.plan else 0,
                    "chunks": report.chunks,
                    "embedded": report.embedded,
                }
            )

    def _redact_documents(self, docs: list[_Doc]) -> None:
        """Redact the chunks' texts in place (blocking: run in a worker thread)."""
        assert self.redact is not None
        for doc in docs:
            changed = False
            for index, (row, _) in enumerate(doc.chunks):
                text = str(row["text"])
                clean, found = self.redact(text)
                if clean == text:
                    continue
                meta = _meta(row.get("meta"))
                meta["redacted"] = found
                row["text"], row["meta"] = clean, json.dumps(meta, ensure_ascii=False)
                # The file's vector was made from the secret: embed the redacted text instead.
                doc.chunks[index] = (row, None)
                self._count_redacted(portable.CHUNKS)
                changed = True
            source = str(doc.row.get("source"))
            if changed and source.startswith(MEMORY_PREFIX) and len(doc.chunks) == 1:
                # A memory is named after its text (`remember`): the same text remembered
                # again, now redacted, must find this one.
                text = str(doc.chunks[0][0]["text"])
                doc.row["source"] = self.renamed[source] = memory_source(text)
                doc.row["content_hash"] = hashlib.sha256(text.strip().encode()).hexdigest()

    def _count_redacted(self, table: str) -> None:
        self.report.redacted[table] = self.report.redacted.get(table, 0) + 1

    def _action(self, doc: _Doc, stored: tuple[int, str, str] | None) -> str:
        """What to do with a document: `insert`, `replace`, `unchanged` or `conflict`."""
        if stored is None:
            return "insert"
        if stored[1] == doc.row.get("content_hash") and stored[2] == "complete":
            return "unchanged"
        return "replace" if self.replace or stored[2] != "complete" else "conflict"

    async def _write_documents(
        self, conn: Writer, docs: list[_Doc], fresh: dict[int, npt.NDArray[np.float32]]
    ) -> None:
        """Insert (or replace) documents with their chunks, in the caller's transaction."""
        tables = self._tables()
        doc_table, chunk_table = tables[portable.DOCUMENTS], tables[portable.CHUNKS]
        sources = [str(doc.row["source"]) for doc in docs]
        # Decided again inside the transaction: the daemon may have ingested some meanwhile.
        stored = await conn.stored_documents(sources)
        writing: list[int] = []
        kept: list[int] = []
        for index, doc in enumerate(docs):
            action = self._action(doc, stored.get(sources[index]))
            if action == "unchanged":
                kept.append(index)
                self.report.unchanged += 1
            elif action == "conflict":
                self.report.conflicts.append(sources[index])
            else:
                if action == "replace":
                    await conn.delete_document(sources[index])
                    self.report.replaced += 1
                else:
                    self.report.imported += 1
                writing.append(index)
        await conn.insert_many(
            portable.DOCUMENTS,
            [
                {
                    **{
                        k: portable.decode_value(v)
                        for k, v in docs[i].row.items()
                        if k != doc_table.surrogate
                    },
                    "state": "complete",
                }
                for i in writing
            ],
        )
        new = await conn.stored_documents([sources[i] for i in writing])
        doc_map = self.maps.setdefault(portable.DOCUMENTS, {})
        for index in writing:
            doc_map[int(docs[index].row["id"])] = new[sources[index]][0]
        for index in kept:
            doc_map[int(docs[index].row["id"])] = stored[sources[index]][0]

        chunk_rows = []
        for index in writing:
            for row, _ in docs[index].chunks:
                values = self._remap(chunk_table, row, defer=True)
                assert values is not None  # its document was just mapped
                chunk_rows.append(values)
        await conn.insert_many(portable.CHUNKS, chunk_rows)
        mapped = [docs[i] for i in writing + kept]
        by_key = await conn.chunk_ids([doc_map[int(d.row["id"])] for d in mapped])
        chunk_map = self.maps.setdefault(portable.CHUNKS, {})
        for doc in mapped:
            doc_id = doc_map[int(doc.row["id"])]
            for row, _ in doc.chunks:
                new_id = by_key.get((doc_id, str(row["key"])))
                if new_id is not None:
                    chunk_map[int(row["id"])] = new_id
        # Parents (and any other chunk reference) within these documents resolve now.
        await self._resolve(conn)

        vectors: list[tuple[int, npt.NDArray[np.float32], str, str]] = []
        for index in writing:
            vectors.extend(await self._vectors(docs[index], fresh.get(index), chunk_map))
        await conn.insert_vectors(vectors)
        self.report.chunks += len(chunk_rows)

    async def _vectors(
        self, doc: _Doc, fresh: npt.NDArray[np.float32] | None, chunk_map: dict[int, int]
    ) -> list[tuple[int, npt.NDArray[np.float32], str, str]]:
        """Each chunk's vector: reused from the file, or freshly embedded."""
        if fresh is None and any(blob is None for _, blob in doc.chunks):
            # Stored by someone else between the first look and this transaction: rare enough
            # to embed here, holding the writer a little longer.
            fresh = await self.embed([str(r["text"]) for r, blob in doc.chunks if blob is None])
        out = []
        cursor = 0
        for row, blob in doc.chunks:
            if blob is not None:
                vector = np.frombuffer(blob, dtype=np.float32)
                self.report.reused += 1
            else:
                assert fresh is not None
                vector = fresh[cursor]
                cursor += 1
                self.report.embedded += 1
            kind, granularity = str(row.get("kind")), str(row.get("granularity"))
            out.append((chunk_map[int(row["id"])], vector, kind, granularity))
        return out

    # -- other tables --------------------------------------------------------------------------

    async def _rows(self, rows: list[tuple[str, dict[str, Any]]]) -> None:
        if rows and self.redact is not None:
            await asyncio.to_thread(self._redact_rows, rows)
        if rows:
            await self.store.write(partial(self._write_rows, rows=rows))

    async def _write_rows(self, conn: Writer, rows: list[tuple[str, dict[str, Any]]]) -> None:
        """Rows of the other tables, each added only when no identical row exists."""
        tables = self._tables()
        referenced = {t for table in tables.values() for t in table.references.values()}
        for name, row in rows:
            table = tables[name]
            values = self._remap(table, row, defer=False)
            if values is None:
                self.report.skipped[name] = self.report.skipped.get(name, 0) + 1
                continue
            new_id = await conn.find_same(name, values)
            if new_id is None:
                new_id, added = await conn.insert_row(name, values)
                self.report.rows[name] = self.report.rows.get(name, 0) + added
            if table.surrogate is not None and name in referenced:
                self.maps.setdefault(name, {})[int(row[table.surrogate])] = new_id

    def _redact_rows(self, rows: list[tuple[str, dict[str, Any]]]) -> None:
        """Redact memories' earlier versions in place, and point a renamed memory's project
        row at its new source (blocking)."""
        assert self.redact is not None
        for name, row in rows:
            if name == _PROJECTS and row.get("source") in self.renamed:
                row["source"] = self.renamed[row["source"]]
            if name == _HISTORY and isinstance(row.get("text"), str):
                clean, _ = self.redact(row["text"])
                if clean != row["text"]:
                    row["text"] = clean
                    self._count_redacted(name)

    def _remap(
        self, table: portable.Table, row: dict[str, Any], *, defer: bool
    ) -> dict[str, Any] | None:
        """The row's values for the target: surrogate id dropped, references remapped.

        Returns None when a reference points at a row that was not imported. With `defer`,
        references to chunks not written yet are set NULL and resolved later (`_resolve`).
        """
        values: dict[str, Any] = {}
        for column, raw in row.items():
            if column == table.surrogate:
                continue
            value = portable.decode_value(raw)
            target = table.references.get(column)
            if target is not None and value is not None:
                mapped = self.maps.get(target, {}).get(int(value))
                if mapped is None:
                    if not (defer and target == portable.CHUNKS and table.surrogate):
                        return None
                    self.deferred.append(
                        (table.name, int(row[table.surrogate]), column, int(value))
                    )
                    value = None
                else:
                    value = mapped
            values[column] = value
        return values

    async def _resolve(self, conn: Writer) -> None:
        """Point deferred chunk references at their new ids, where both ends are now mapped."""
        chunk_map = self.maps.get(portable.CHUNKS, {})
        updates: dict[tuple[str, str], list[tuple[int, int]]] = {}
        waiting = []
        for item in self.deferred:
            table, old_row, column, old_target = item
            new_row = self.maps.get(table, {}).get(old_row)
            new_target = chunk_map.get(old_target)
            if new_row is None or new_target is None:
                waiting.append(item)
            else:
                updates.setdefault((table, column), []).append((new_target, new_row))
        for (table, column), pairs in updates.items():
            key = self._tables()[table].surrogate
            assert key is not None
            await conn.set_references(table, column, key, pairs)
        self.deferred = waiting

    async def _resolve_deferred(self) -> None:
        if self.deferred:
            await self.store.write(self._resolve)
            if self.deferred:
                logger.info("%d chunk references point outside the import", len(self.deferred))

    # -- helpers -------------------------------------------------------------------------------

    def _tables(self) -> dict[str, portable.Table]:
        assert self.plan is not None
        return self.plan.tables

    def _result(self) -> dict[str, Any]:
        report, plan = self.report, self.plan
        assert plan is not None
        return {
            "documents": {
                "imported": report.imported,
                "unchanged": report.unchanged,
                "replaced": report.replaced,
                "conflicts": len(report.conflicts),
            },
            "conflicts": report.conflicts[:20],
            "chunks": report.chunks,
            "embedded": report.embedded,
            "vectors_reused": report.reused,
            "rows": report.rows,
            "skipped_rows": report.skipped,
            "redacted": report.redacted,
            "file": {
                "model_id": plan.header.get("model_id"),
                "dimension": plan.header.get("dimension"),
                "recalld_version": plan.header.get("recalld_version"),
                "schema_version": plan.header.get("schema_version"),
                "counts": plan.counts,
            },
        }


async def import_file(
    store: Store,
    path: Path,
    embed: Embed,
    *,
    replace: bool = False,
    progress: Progress | None = None,
    redact: Redact | None = None,
) -> dict[str, Any]:
    """Import an export file into `store` (see `Importer`)."""
    return await Importer(store, embed, replace=replace, progress=progress, redact=redact).run(path)


def _meta(raw: Any) -> dict[str, Any]:
    """A chunk row's meta as a dict (a missing or unreadable one: empty)."""
    try:
        meta = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return {}
    return dict(meta) if isinstance(meta, dict) else {}
