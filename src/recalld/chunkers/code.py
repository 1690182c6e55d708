"""The syntax-aware code chunker (tree-sitter).

Chunks are runs of whole source lines. The file's top-level nodes become *units*: a node plus
the blank lines before it, with adjacent comments, decorators and attributes merged into the
definition right below them, and nodes that share a line merged. Consecutive units are packed
into one chunk while they fit `max_tokens`, so a function or class that fits is never split
and imports or small helpers are grouped. A unit that does not fit is split along its own
syntax: first the definition without an oversized comment block above it; then its inner
nodes (methods of a class, statements of a function), each treated as a unit in turn, with
the definition's header lines (decorators, signature) kept on its first inner unit; then
blank-line blocks; then single lines; then (for a monster line) the prose splitter.

Token counts are summed per line, computed once, so packing costs no re-tokenising.
"""

from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass
from itertools import accumulate

from tree_sitter import Node, Parser, QueryCursor, Tree

from recalld.chunkers.languages import (
    LANGUAGES,
    definition_name,
    definitions_query,
    is_definition,
    load_language,
    symbol_kind,
)
from recalld.chunkers.options import ChunkOptions, KeyMaker, short_hash
from recalld.chunkers.split import split_text
from recalld.types import ChunkDraft

logger = logging.getLogger(__name__)

# Header and footer lines (signature, decorators, closing brace) may ride on the first or last
# inner unit of a split definition if together they cost at most this share of the budget.
_HEADER_SHARE = 4
_MAX_DEPTH = 100
# Fields that hold the body of a definition or compound statement, across the grammars.
_BODY_FIELDS = ("body", "definition", "declaration", "consequence", "value")


@dataclass(frozen=True, slots=True)
class Definition:
    """A named definition found in the source (rows are 0-based and inclusive)."""

    start: int
    end: int
    symbol: str
    kind: str


@dataclass(slots=True)
class _Unit:
    start: int  # first row, including the blank lines before the nodes
    end: int  # last row
    nodes: list[Node]


@dataclass(frozen=True, slots=True)
class _Piece:
    start: int
    end: int
    text: str | None = None  # set only for pieces of a single over-long line


def last_row(node: Node) -> int:
    """The last row a node really occupies (a node ending at column 0 ends on the row before)."""
    row = node.end_point.row
    if node.end_point.column == 0 and row > node.start_point.row:
        row -= 1
    return row


def span_start(node: Node, wrappers: frozenset[str]) -> Node:
    """The outermost wrapper (`@decorator`, `export`, ...) whose span a definition takes."""
    while node.parent is not None and node.parent.type in wrappers:
        node = node.parent
    return node


def find_definitions(tree: Tree, language: str) -> list[Definition]:
    """Every definition in the tree with its qualified symbol (`Class.method`), by start row."""
    spec = LANGUAGES[language]
    captures = QueryCursor(definitions_query(language)).captures(tree.root_node)
    nodes = sorted(
        (n for n in captures.get("def", []) if is_definition(n)),
        key=lambda n: (n.start_byte, -n.end_byte),
    )
    found: list[Definition] = []
    stack: list[tuple[int, str, str]] = []  # (end_byte, symbol, kind) of enclosing definitions
    for node in nodes:
        while stack and stack[-1][0] <= node.start_byte:
            stack.pop()
        parent_symbol, parent_kind = (stack[-1][1], stack[-1][2]) if stack else ("", None)
        name = definition_name(node)
        symbol = f"{parent_symbol}.{name}" if parent_symbol else name
        kind = symbol_kind(spec.definitions[node.type], parent_kind)
        outer = span_start(node, spec.wrappers)
        found.append(Definition(outer.start_point.row, last_row(outer), symbol, kind))
        stack.append((node.end_byte, symbol, kind))
    found.sort(key=lambda d: (d.start, -d.end))
    return found


class _Chunker:
    def __init__(self, lines: list[str], language: str, options: ChunkOptions) -> None:
        self.lines = lines
        self.spec = LANGUAGES[language]
        self.limit = options.max_tokens
        self.options = options
        counts = [options.count_tokens(line) for line in lines]
        self.prefix = [0, *accumulate(counts)]

    def tokens(self, start: int, end: int) -> int:
        return self.prefix[end + 1] - self.prefix[start] if end >= start else 0

    def partition(self, nodes: list[Node], start: int, end: int) -> list[_Unit]:
        """Cover rows `start..end` with units, one per node or group of glued nodes."""
        units: list[_Unit] = []
        group: list[Node] = []
        group_end = start - 1
        cursor = start
        for node in nodes:
            row, stop = node.start_point.row, last_row(node)
            attached_only = bool(group) and all(n.type in self.spec.attached for n in group)
            if group and (row <= group_end or (attached_only and row == group_end + 1)):
                group.append(node)
                group_end = max(group_end, stop)
                continue
            if group:
                units.append(_Unit(cursor, group_end, group))
                cursor = group_end + 1
            group, group_end = [node], max(stop, cursor)
        if group:
            units.append(_Unit(cursor, max(group_end, end), group))
        elif end >= start:
            units.append(_Unit(start, end, []))
        if units:
            units[-1].end = max(units[-1].end, end)
        return units

    def pack(self, units: list[_Unit], depth: int = 0) -> list[_Piece]:
        """Group consecutive units up to the limit; split the ones that alone exceed it."""
        pieces: list[_Piece] = []
        current: tuple[int, int] | None = None
        for unit in units:
            if self.tokens(unit.start, unit.end) > self.limit:
                if current:
                    pieces.append(_Piece(*current))
                    current = None
                pieces.extend(self.split_unit(unit, depth + 1))
            elif current and self.tokens(current[0], unit.end) <= self.limit:
                current = (current[0], unit.end)
            else:
                if current:
                    pieces.append(_Piece(*current))
                current = (unit.start, unit.end)
        if current:
            pieces.append(_Piece(*current))
        return pieces

    def split_unit(self, unit: _Unit, depth: int) -> list[_Piece]:
        # Deeply nested expressions (generated tables, test data) end the descent early.
        if not unit.nodes or depth > _MAX_DEPTH:
            return self.split_lines(unit.start, unit.end)
        core_start = unit.nodes[0].start_point.row
        core_end = max(last_row(n) for n in unit.nodes)
        main = next(
            (n for n in reversed(unit.nodes) if n.type not in self.spec.attached),
            unit.nodes[-1],
        )
        main_start = main.start_point.row
        # Keep the definition (with its comments, else alone) whole if that fits: only the
        # lines around it are split off.
        for first in (core_start, main_start):
            if self.tokens(first, core_end) <= self.limit:
                return [
                    *self.split_lines(unit.start, first - 1),
                    _Piece(first, core_end),
                    *self.split_lines(core_end + 1, unit.end),
                ]
        inner = self.inner_nodes(main)
        if inner:
            return self.pack(self.partition(inner, unit.start, unit.end), depth)
        return self.split_lines(unit.start, unit.end)

    def inner_nodes(self, node: Node) -> list[Node]:
        """The children to split `node` along.

        A wrapper (`@decorator`, `export`, `template<>`) is looked through, so its header lines
        stay together as the leading lines of the wrapped definition's first inner unit. A
        construct whose body field holds nearly everything (a class, a function, an `if`
        without a big `else`) yields just that body, so its header rides on the body's first
        unit; any other node yields all its named children.
        """
        while node.type in self.spec.wrappers and node.named_child_count:
            node = max(node.named_children, key=lambda k: last_row(k) - k.start_point.row)
        kids = node.named_children
        if len(kids) <= 1:
            return kids
        # Only a field child can be a body: the statements of a block are siblings of equal
        # rank, and gluing the others to the biggest would split them.
        fields = (node.child_by_field_name(name) for name in _BODY_FIELDS)
        present = [f for f in fields if f is not None and f.named_child_count]
        body = max(present, key=lambda f: last_row(f) - f.start_point.row, default=None)
        if body is None:
            return kids
        footer = self.tokens(last_row(body) + 1, last_row(node))
        return [body] if footer * _HEADER_SHARE <= self.limit else kids

    def split_lines(self, start: int, end: int) -> list[_Piece]:
        """Split rows into blank-line blocks, then lines, then pieces of lines."""
        if self.tokens(start, end) == 0:
            return [_Piece(start, end)] if end >= start else []
        blocks: list[tuple[int, int]] = []
        row = start
        while row <= end:
            if not self.lines[row].strip():
                row += 1
                continue
            first = row
            while row <= end and self.lines[row].strip():
                row += 1
            blocks.append((first, row - 1))
        pieces: list[_Piece] = []
        current: tuple[int, int] | None = None
        for first, last in blocks:
            if self.tokens(first, last) > self.limit:
                if current:
                    pieces.append(_Piece(*current))
                    current = None
                pieces.extend(self._split_block_lines(first, last))
            elif current and self.tokens(current[0], last) <= self.limit:
                current = (current[0], last)
            else:
                if current:
                    pieces.append(_Piece(*current))
                current = (first, last)
        if current:
            pieces.append(_Piece(*current))
        return pieces

    def _split_block_lines(self, start: int, end: int) -> list[_Piece]:
        pieces: list[_Piece] = []
        current: tuple[int, int] | None = None
        for row in range(start, end + 1):
            if self.tokens(row, row) > self.limit:
                if current:
                    pieces.append(_Piece(*current))
                    current = None
                for part in split_text(
                    self.lines[row],
                    self.limit,
                    self.options.overlap_tokens,
                    self.options.count_tokens,
                ):
                    pieces.append(_Piece(row, row, part))
            elif current and self.tokens(current[0], row) <= self.limit:
                current = (current[0], row)
            else:
                if current:
                    pieces.append(_Piece(*current))
                current = (row, row)
        if current:
            pieces.append(_Piece(*current))
        return pieces


def _describe(
    piece_start: int, piece_end: int, defs: list[Definition], starts: list[int]
) -> dict[str, object]:
    """The `symbol`, `symbol_kind` and `symbols` of a chunk covering rows `start..end`.

    `symbols` lists every definition wholly inside the chunk, nested ones too; `symbol` names
    the outermost ones (joined, with kind `group`, if several), or else the definition the
    chunk is a part of (`partial`), or None for top-level code (kind `module`).
    """
    lo = bisect.bisect_left(starts, piece_start)
    hi = bisect.bisect_right(starts, piece_end)
    inside = [d for d in defs[lo:hi] if d.end <= piece_end]
    every = [d.symbol for d in inside]
    top: list[Definition] = []
    for d in inside:
        if not top or d.start > top[-1].end:
            top.append(d)
    if len(top) == 1:
        return {"symbol": top[0].symbol, "symbol_kind": top[0].kind, "symbols": every}
    if top:
        names = ", ".join(d.symbol for d in top)
        return {"symbol": names, "symbol_kind": "group", "symbols": every}
    for d in reversed(defs[:hi]):
        if d.start <= piece_start and d.end >= piece_end:
            return {"symbol": d.symbol, "symbol_kind": d.kind, "symbols": [], "partial": True}
    return {"symbol": None, "symbol_kind": "module", "symbols": []}


def chunk_code(
    text: str,
    language: str,
    options: ChunkOptions,
    keys: KeyMaker | None = None,
    notes: list[str] | None = None,
) -> list[ChunkDraft]:
    """Chunk source code on syntax boundaries.

    Args:
        text: The decoded source, with `\\n` line ends.
        language: A key of `LANGUAGES`.
        options: Size limits and the token counter.
        keys: Shared key maker when several texts go into one file's chunks.
        notes: Where to say that the source has syntax errors.

    Returns:
        Chunks with `kind="code"` and `meta` holding `language`, `symbol`, `symbol_kind`,
        `symbols`, `start_line` and `end_line` (1-based, inclusive).
    """
    keys = keys or KeyMaker()
    lines = text.split("\n")
    tree = Parser(load_language(language)).parse(text.encode("utf-8", "replace"))
    chunker = _Chunker(lines, language, options)
    units = chunker.partition(list(tree.root_node.named_children), 0, len(lines) - 1)
    defs = find_definitions(tree, language)
    starts = [d.start for d in defs]
    chunks: list[ChunkDraft] = []
    for piece in chunker.pack(units):
        start, end = piece.start, piece.end
        if piece.text is None:
            while start <= end and not lines[start].strip():
                start += 1
            while end >= start and not lines[end].strip():
                end -= 1
            if start > end:
                continue
        body = piece.text if piece.text is not None else "\n".join(lines[start : end + 1])
        meta: dict[str, object] = {"language": language, "start_line": start + 1}
        meta["end_line"] = end + 1
        meta.update(_describe(start, end, defs, starts))
        chunks.append(
            ChunkDraft(
                text=body,
                kind="code",
                granularity="chunk",
                key=keys.make(f"c:{short_hash(body)}"),
                meta=meta,
            )
        )
    if tree.root_node.has_error and notes is not None:
        notes.append(f"{language} syntax errors; chunked by what parsed")
    return chunks
