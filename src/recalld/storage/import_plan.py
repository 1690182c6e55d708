"""The first pass of an import: read the whole export file and check it, before any write.

A malformed line (not JSON, an unknown table or column, a value that cannot be read back such
as an `Infinity` event time (`storage.values`), a chunk outside its document, a vector of the
wrong size, a count that does not add up, a file cut short) is a `ParseError` naming the
file and the line, raised before anything is imported, so a bad file never leaves half of
itself in the store. Blocking: run it in a worker thread.
"""

from __future__ import annotations

import json
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recalld.errors import NotFoundError, ParseError
from recalld.safe_io import open_regular
from recalld.storage import portable, registry, values


@dataclass(slots=True)
class Plan:
    """What the file holds and how it maps onto the target store.

    Attributes:
        header: The file's header line.
        tables: The target store's tables by name (documents and chunks first).
        counts: Rows per table in the file.
        reuse_vectors: The file carries vectors from the target store's model.
    """

    header: dict[str, Any]
    tables: dict[str, portable.Table]
    counts: dict[str, int] = field(default_factory=dict)
    reuse_vectors: bool = False


class _Bad(Exception):
    """A problem with the current line (turned into a ParseError with its number)."""


def read_lines(path: Path) -> Generator[tuple[int, dict[str, Any]], None, None]:
    """Each non-blank line of the file as `(line number, object)`.

    Raises:
        ParseError: A line is not UTF-8 JSON, or not an object with a string `type`.
    """
    with open_regular(path) as handle:  # a FIFO is refused, not waited on
        for number, raw in enumerate(handle, 1):
            if not raw.strip():
                continue
            try:
                message = json.loads(raw)
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise _error(path, number, f"not JSON ({exc})") from None
            if not isinstance(message, dict) or not isinstance(message.get("type"), str):
                raise _error(path, number, "not an object with a string 'type'")
            yield number, message


def _error(path: Path, line: int, why: str) -> ParseError:
    return ParseError(
        f"{path} line {line}: {why}; nothing was imported (fix or re-export the file)",
        data={"path": str(path), "line": line},
    )


def plan_import(path: Path, store_path: Path | str, model_id: str, dimension: int) -> Plan:
    """Check the whole file against the target store.

    Args:
        path: The export file.
        store_path: The store it goes into.
        model_id, dimension: The store's model.

    Raises:
        ParseError: The file is malformed or does not fit the store; names the line.
        NotFoundError: No such file.
    """
    if not path.is_file():
        raise NotFoundError(f"no export file at {path}", data={"path": str(path)})
    checker = _Checker(path, registry.target_tables(store_path))
    number = 0
    for number, message in read_lines(path):
        try:
            checker.line(number, message)
        except _Bad as exc:
            raise _error(path, number, str(exc)) from None
    if checker.plan is None:
        raise _error(path, max(number, 1), "empty file: no header")
    if not checker.ended:
        raise _error(
            path, number, "the file ends without its footer: it was cut short; export it again"
        )
    plan = checker.plan
    header = plan.header
    plan.reuse_vectors = bool(
        header.get("vectors")
        and header.get("model_id") == model_id
        and header.get("dimension") == dimension
    )
    return plan


class _Checker:
    """Line-by-line state of the first pass."""

    def __init__(self, path: Path, tables: dict[str, portable.Table]) -> None:
        self.path = path
        self.tables = tables
        self.plan: Plan | None = None
        self.file_tables: dict[str, set[str]] = {}
        self.doc_id: Any = None
        self.doc_chunks = 0
        self.doc_expected: int | None = None
        self.doc_line = 0
        self.past_documents = False
        self.ended = False

    def line(self, number: int, message: dict[str, Any]) -> None:
        kind = message["type"]
        if self.ended:
            raise _Bad("a line after the footer")
        if self.plan is None:
            self._header(message)
            return
        if kind == portable.HEADER:
            raise _Bad("a second header")
        if kind == portable.FOOTER:
            self._close_document()
            self._footer(message)
            return
        if kind not in self.file_tables:
            raise _Bad(f"unknown type {kind!r} (not a table listed in the header)")
        row = message.get("row")
        if not isinstance(row, dict):
            raise _Bad("'row' must be an object")
        unknown = set(row) - self.file_tables[kind]
        if unknown:
            raise _Bad(f"columns {sorted(unknown)} are not in the header's list for {kind}")
        for column, value in row.items():
            try:
                decoded = portable.decode_value(value)
            except ValueError as exc:
                raise _Bad(f"{kind}.{column}: {exc}") from None
            # `1e400`, `Infinity` and `NaN` parse as floats the store could keep but never
            # give back (issue 18): the value ranges of `storage.values` apply here too.
            why = values.problem(kind, column, decoded)
            if why is not None:
                raise _Bad(f"{kind}.{column}: {why}")
        self.plan.counts[kind] = self.plan.counts.get(kind, 0) + 1
        if kind == portable.DOCUMENTS:
            self._document(number, row)
        elif kind == portable.CHUNKS:
            self._chunk(message, row)
        else:
            self._close_document()
            self.past_documents = True

    def _header(self, message: dict[str, Any]) -> None:
        if message["type"] != portable.HEADER or message.get("format") != portable.FORMAT:
            raise _Bad(
                f"not a recalld export (the first line must be its {portable.FORMAT} header)"
            )
        version = message.get("format_version")
        if not isinstance(version, int) or version > portable.FORMAT_VERSION:
            raise _Bad(
                f"format version {version!r} is newer than this recalld reads "
                f"({portable.FORMAT_VERSION}); upgrade recalld"
            )
        listed = message.get("tables")
        if not isinstance(listed, dict):
            raise _Bad("the header has no 'tables'")
        for name, columns in listed.items():
            target = self.tables.get(name)
            if target is None:
                raise _Bad(
                    f"table {name!r} does not exist in this store (exported by a newer recalld?)"
                )
            if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
                raise _Bad(f"the header's columns of {name!r} are not a list of names")
            missing = set(columns) - set(target.columns)
            if missing:
                raise _Bad(f"columns {sorted(missing)} of {name!r} do not exist in this store")
            self.file_tables[name] = set(columns)
        for name in (portable.DOCUMENTS, portable.CHUNKS):
            if name not in self.file_tables:
                raise _Bad(f"the header lists no {name!r} table")
        if message.get("vectors") and not isinstance(message.get("dimension"), int):
            raise _Bad("the header has vectors but no integer 'dimension'")
        self.plan = Plan(header=message, tables=self.tables)

    def _document(self, number: int, row: dict[str, Any]) -> None:
        if self.past_documents:
            raise _Bad("a document after the other tables (documents and chunks come first)")
        self._close_document()
        if not isinstance(row.get("id"), int) or not isinstance(row.get("source"), str):
            raise _Bad("a document needs an integer 'id' and a string 'source'")
        self.doc_id = row["id"]
        self.doc_chunks = 0
        count = row.get("chunk_count")
        self.doc_expected = count if isinstance(count, int) else None
        self.doc_line = number

    def _chunk(self, message: dict[str, Any], row: dict[str, Any]) -> None:
        if self.doc_id is None or row.get("document_id") != self.doc_id:
            raise _Bad("a chunk outside its document (each document's chunks follow it)")
        if not isinstance(row.get("id"), int) or not isinstance(row.get("text"), str):
            raise _Bad("a chunk needs an integer 'id' and a string 'text'")
        if not isinstance(row.get("key"), str):
            raise _Bad("a chunk needs a string 'key'")
        if "vector" in message:
            assert self.plan is not None
            try:
                portable.decode_vector(message["vector"], int(self.plan.header["dimension"]))
            except ValueError as exc:
                raise _Bad(str(exc)) from None
        self.doc_chunks += 1

    def _close_document(self) -> None:
        if self.doc_id is not None and self.doc_expected is not None:
            if self.doc_chunks != self.doc_expected:
                raise _Bad(
                    f"the document on line {self.doc_line} says {self.doc_expected} chunks "
                    f"but {self.doc_chunks} follow it"
                )
        self.doc_id = None

    def _footer(self, message: dict[str, Any]) -> None:
        assert self.plan is not None
        counts = message.get("counts")
        if not isinstance(counts, dict):
            raise _Bad("the footer has no 'counts'")
        found = {name: self.plan.counts.get(name, 0) for name in self.file_tables}
        expected = {name: counts.get(name, 0) for name in self.file_tables}
        if found != expected:
            raise _Bad(f"the footer counts {expected} but the file holds {found}")
        self.ended = True
