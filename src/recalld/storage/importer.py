"""Import a JSONL export into a store: ids remapped, idempotent, vectors reused or re-embedded.

The file is checked whole first (`import_plan`), then read again and written:

- **Documents are keyed by source.** One already stored with the same content hash is left as
  it is (importing twice changes nothing) and its chunks are matched by key, so links and other
  rows still find them. One stored with other content is a conflict: kept, and reported,
  unless `replace` is set. Each document is written with its chunks in one transaction.
- **Ids are remapped.** Rows get new ids in the target; every column that references
  documents, chunks or another table's id (declared foreign keys, see `portable`) is rewritten
  through the old→new maps, so parents and links follow. A row that points at something not
  imported (a conflicting document's chunk) is skipped and counted.
- **Vectors** are reused when the file carries them and names the store's model and
  dimension; otherwise the chunks are embedded again with the store's model, in batches
  across documents. That is how a user moves to another model or machine.
- Other tables are inserted row by row only when no identical row exists (ignoring the
  surrogate id), so they are idempotent too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from recalld.storage import portable, writer
from recalld.storage.import_plan import Plan, plan_import, read_lines
from recalld.storage.store import Store

logger = logging.getLogger(__name__)

Embed = Callable[[Sequence[str]], Awaitable[npt.NDArray[np.float32]]]
Progress = Callable[[dict[str, Any]], Awaitable[None]]

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


class Importer:
    """One import of one file into one store (see the module docstring).

    Args:
        store: The open target store.
        embed: Embeds texts with the store's model (`Ingestor.embed`).
        replace: Replace stored documents whose content differs from the file's.
        progress: Awaited with counts after each batch of documents.
    """

    def __init__(
        self, store: Store, embed: Embed, *, replace: bool = False, progress: Progress | None = None
    ) -> None:
        self.store = store
        self.embed = embed
        self.replace = replace
        self.progress = progress
        self.maps: dict[str, dict[int, int]] = {}
        # (table, new row id, column, old referenced id): chunk references resolved at the end.
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
        pending: list[_Doc] = []
        pending_chunks = 0
        rows: list[tuple[str, dict[str, Any]]] = []
        try:
            while batch := await asyncio.to_thread(lambda: list(islice(lines, _READ_BATCH))):
                for _, message in batch:
                    kind = message["type"]
                    row: dict[str, Any] = message.get("row") or {}
                    if kind == portable.DOCUMENTS:
                        pending.append(_Doc(row))
                    elif kind == portable.CHUNKS:
                        vector = message.get("vector") if plan.reuse_vectors else None
                        blob = portable.decode_vector(vector, store.dimension) if vector else None
                        pending[-1].chunks.append((row, blob))
                        pending_chunks += 1
                    elif kind in (portable.HEADER, portable.FOOTER):
                        continue
                    else:
                        rows.append((kind, row))
                    if pending_chunks >= _EMBED_BATCH and kind != portable.CHUNKS:
                        await self._documents(pending[:-1])
                        pending = pending[-1:]
                        pending_chunks = len(pending[0].chunks)
                    if len(rows) >= _ROW_BATCH:
                        await self._documents(pending)
                        pending, pending_chunks = [], 0
                        await self._rows(rows)
                        rows = []
            await self._documents(pending)
            await self._rows(rows)
            await self._resolve_deferred()
        finally:
            lines.close()
        return self._result()

    # -- documents and chunks ------------------------------------------------------------------

    async def _documents(self, docs: list[_Doc]) -> None:
        """Write a batch of documents, embedding what has no reusable vector in one pass."""
        if not docs:
            return
        actions = [await self._action(doc) for doc in docs]
        texts = [
            str(row["text"])
            for doc, action in zip(docs, actions, strict=True)
            if action in ("insert", "replace")
            for row, blob in doc.chunks
            if blob is None
        ]
        vectors = await self.embed(texts) if texts else None
        cursor = 0
        for doc, action in zip(docs, actions, strict=True):
            fresh = None
            if action in ("insert", "replace"):
                needed = sum(1 for _, blob in doc.chunks if blob is None)
                fresh = vectors[cursor : cursor + needed] if vectors is not None else None
                cursor += needed
            await self.store.write(partial(self._write_document, doc=doc, fresh=fresh))
        if self.progress is not None:
            report = self.report
            await self.progress(
                {
                    "documents": report.imported
                    + report.unchanged
                    + report.replaced
                    + len(report.conflicts),
                    "total": self.plan.counts.get(portable.DOCUMENTS, 0) if self.plan else 0,
                    "chunks": report.chunks,
                    "embedded": report.embedded,
                }
            )

    async def _action(self, doc: _Doc) -> str:
        """What to do with a document: `insert`, `replace`, `unchanged` or `conflict`."""
        stored = await self.store.read(lambda c: _stored_document(c, doc.row["source"]))
        if stored is None:
            return "insert"
        if stored[1] == doc.row.get("content_hash") and stored[2] == "complete":
            return "unchanged"
        return "replace" if self.replace or stored[2] != "complete" else "conflict"

    async def _write_document(
        self, conn: Any, doc: _Doc, fresh: npt.NDArray[np.float32] | None
    ) -> None:
        """Insert (or replace) one document and its chunks, in the caller's transaction."""
        source = doc.row["source"]
        stored = await _stored_document(conn, source)
        # Decided again inside the transaction: the daemon may have ingested it meanwhile.
        if stored is not None:
            if stored[1] == doc.row.get("content_hash") and stored[2] == "complete":
                await self._map_existing(conn, doc, stored[0])
                self.report.unchanged += 1
                return
            if not (self.replace or stored[2] != "complete"):
                self.report.conflicts.append(source)
                return
            await writer.delete_document(conn, source)
            self.report.replaced += 1
        else:
            self.report.imported += 1
        tables = self._tables()
        docs, chunks = tables[portable.DOCUMENTS], tables[portable.CHUNKS]
        values = {k: portable.decode_value(v) for k, v in doc.row.items() if k != docs.surrogate}
        values["state"] = "complete"
        doc_id = await _insert(conn, portable.DOCUMENTS, values)
        self.maps.setdefault(portable.DOCUMENTS, {})[int(doc.row["id"])] = doc_id

        inserted: list[tuple[int, dict[str, Any]]] = []
        for row, _ in doc.chunks:
            chunk_values = self._remap(chunks, row, defer=True)
            assert chunk_values is not None  # its document was just mapped
            inserted.append((await _insert(conn, portable.CHUNKS, chunk_values), row))
        chunk_map = self.maps.setdefault(portable.CHUNKS, {})
        for new_id, row in inserted:
            chunk_map[int(row["id"])] = new_id
        # Parents (and any other chunk reference) within the document resolve now.
        await self._resolve(conn, [d for d in self.deferred if d[0] == portable.CHUNKS])

        if fresh is None and any(blob is None for _, blob in doc.chunks):
            # Stored by someone else between the first look and this transaction: rare enough
            # to embed here, holding the writer a little longer.
            fresh = await self.embed([str(r["text"]) for r, blob in doc.chunks if blob is None])
        rows: list[tuple[int, npt.NDArray[np.float32], str, str]] = []
        cursor = 0
        for (new_id, row), (_, blob) in zip(inserted, doc.chunks, strict=True):
            if blob is not None:
                vector = np.frombuffer(blob, dtype=np.float32)
                self.report.reused += 1
            else:
                assert fresh is not None
                vector = fresh[cursor]
                cursor += 1
                self.report.embedded += 1
            rows.append((new_id, vector, str(row.get("kind")), str(row.get("granularity"))))
        await writer.insert_vectors(conn, rows)
        self.report.chunks += len(inserted)

    async def _map_existing(self, conn: Any, doc: _Doc, doc_id: int) -> None:
        """Map an unchanged document's chunks onto the stored ones, by key."""
        self.maps.setdefault(portable.DOCUMENTS, {})[int(doc.row["id"])] = doc_id
        async with conn.execute(
            "SELECT key, id FROM chunks WHERE document_id = ?", (doc_id,)
        ) as cursor:
            by_key = {str(k): int(i) for k, i in await cursor.fetchall()}
        chunk_map = self.maps.setdefault(portable.CHUNKS, {})
        for row, _ in doc.chunks:
            if row["key"] in by_key:
                chunk_map[int(row["id"])] = by_key[row["key"]]

    # -- other tables --------------------------------------------------------------------------

    async def _rows(self, rows: list[tuple[str, dict[str, Any]]]) -> None:
        if rows:
            await self.store.write(lambda c: self._write_rows(c, rows))

    async def _write_rows(self, conn: Any, rows: list[tuple[str, dict[str, Any]]]) -> None:
        tables = self._tables()
        referenced = {t for table in tables.values() for t in table.references.values()}
        for name, row in rows:
            table = tables[name]
            values = self._remap(table, row, defer=False)
            if values is None:
                self.report.skipped[name] = self.report.skipped.get(name, 0) + 1
                continue
            existing = await _find_same(conn, name, values)
            if existing is None:
                new_id, added = await _insert_row(conn, name, values, ignore=True)
                self.report.rows[name] = self.report.rows.get(name, 0) + added
            else:
                new_id = existing
            if table.surrogate is not None and name in referenced:
                self.maps.setdefault(name, {})[int(row[table.surrogate])] = new_id

    def _remap(
        self, table: portable.Table, row: dict[str, Any], *, defer: bool
    ) -> dict[str, Any] | None:
        """The row's values for the target: surrogate id dropped, references remapped.

        Returns None when a reference points at a row that was not imported. With `defer`,
        references to chunks not seen yet are set NULL and resolved at the end.
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
                    if defer and target == portable.CHUNKS:
                        # The new row id is known only after the insert; keyed by old id here.
                        self.deferred.append((table.name, int(row["id"]), column, int(value)))
                        value = None
                    else:
                        return None
                else:
                    value = mapped
            values[column] = value
        return values

    async def _resolve(self, conn: Any, items: list[tuple[str, int, str, int]]) -> None:
        """Point deferred chunk references at their new ids, where both ends are now mapped."""
        chunk_map = self.maps.get(portable.CHUNKS, {})
        done = []
        for item in items:
            table, old_row, column, old_target = item
            new_row = self.maps.get(table, {}).get(old_row)
            new_target = chunk_map.get(old_target)
            if new_row is None or new_target is None:
                continue
            surrogate = self._tables()[table].surrogate
            await conn.execute(
                f'UPDATE "{table}" SET "{column}" = ? WHERE "{surrogate}" = ?',
                (new_target, new_row),
            )
            done.append(item)
        if done:
            finished = set(done)
            self.deferred = [d for d in self.deferred if d not in finished]

    async def _resolve_deferred(self) -> None:
        if self.deferred:
            await self.store.write(lambda c: self._resolve(c, list(self.deferred)))
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
) -> dict[str, Any]:
    """Import an export file into `store` (see `Importer`)."""
    return await Importer(store, embed, replace=replace, progress=progress).run(path)


async def _stored_document(conn: Any, source: str) -> tuple[int, str, str] | None:
    async with conn.execute(
        "SELECT id, content_hash, state FROM documents WHERE source = ?", (source,)
    ) as cursor:
        row = await cursor.fetchone()
    return None if row is None else (int(row[0]), str(row[1]), str(row[2]))


async def _insert_row(
    conn: Any, table: str, values: dict[str, Any], *, ignore: bool = False
) -> tuple[int, int]:
    """Insert one row; returns its rowid and how many rows were added (0 when ignored)."""
    # Names come from the store's own schema (PRAGMA table_info), never from the file: the
    # plan refused any column the target table does not have.
    columns = ", ".join(f'"{c}"' for c in values)
    marks = ", ".join("?" for _ in values)
    verb = "INSERT OR IGNORE" if ignore else "INSERT"
    cursor = await conn.execute(
        f'{verb} INTO "{table}" ({columns}) VALUES ({marks})', list(values.values())
    )
    return int(cursor.lastrowid), int(cursor.rowcount)


async def _insert(conn: Any, table: str, values: dict[str, Any]) -> int:
    return (await _insert_row(conn, table, values))[0]


async def _find_same(conn: Any, table: str, values: dict[str, Any]) -> int | None:
    """The rowid of a row with exactly these values, if one exists (idempotent imports)."""
    where = " AND ".join(f'"{c}" IS ?' for c in values) or "1"
    async with conn.execute(
        f'SELECT rowid FROM "{table}" WHERE {where} LIMIT 1', list(values.values())
    ) as cursor:
        row = await cursor.fetchone()
    return None if row is None else int(row[0])
