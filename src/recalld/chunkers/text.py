"""The structure chunker for Markdown, reStructuredText and plain text.

A small line-based block parser (headings, paragraphs, lists, fenced code, tables) feeds a
packer that fills chunks up to `max_tokens`, block by block. A heading always starts a new
chunk, so every chunk has one `heading_path`; headings with nothing under them yet ride along
into the next chunk. Blocks are kept whole where they fit. A block that alone exceeds the
budget is split along its own grain: a list between items, a table between rows (repeating
the header row), fenced code between lines (re-fenced), and prose at sentence ends with
`overlap_tokens` of overlap. The heading line of the section starts each of its chunks, which
helps both BM25 and the embedder place a chunk from the middle of a long section.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from recalld.chunkers.options import ChunkOptions, KeyMaker, short_hash
from recalld.chunkers.split import split_text
from recalld.types import ChunkDraft

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_THEMATIC = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_TABLE_SEP = re.compile(r"^ {0,3}\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")
_LIST_ITEM = re.compile(r"^([ \t]*)(?:[-*+\u2022]|\d{1,9}[.)])[ \t]+\S")
_RST_RULE = re.compile(r"^([=\-~^\"'`#*+:.])\1{2,}[ \t]*$")

Syntax = str  # "markdown" | "rst" | "plain"


@dataclass(frozen=True, slots=True)
class Block:
    """One structural block of a text document.

    Attributes:
        kind: `heading`, `paragraph`, `list`, `code` or `table`.
        text: The block's lines as they appear in the source.
        level: Heading level (1 is the top); 0 for other blocks.
        title: The heading's text without its markup.
    """

    kind: str
    text: str
    level: int = 0
    title: str = ""


def _fence_end(lines: Sequence[str], start: int, fence: str) -> int:
    """Index of the line closing the fence opened at `start` (the last line if unclosed)."""
    for j in range(start + 1, len(lines)):
        stripped = lines[j].strip()
        if stripped.startswith(fence) and not stripped.strip(fence[0]):
            return j
    return len(lines) - 1


def _list_end(lines: Sequence[str], start: int, markdown: bool) -> int:
    """Index just past the list that starts at `start`."""
    j = start + 1
    while j < len(lines):
        line = lines[j]
        if not line.strip():
            # A blank line continues the list only if an item or an indented line follows.
            k = j + 1
            while k < len(lines) and not lines[k].strip():
                k += 1
            if k < len(lines) and (_LIST_ITEM.match(lines[k]) or lines[k][:1] in (" ", "\t")):
                j = k
                continue
            break
        if markdown and line[:1] not in (" ", "\t") and (_ATX.match(line) or _FENCE.match(line)):
            break
        j += 1
    return j


def parse_blocks(text: str, syntax: Syntax = "markdown") -> list[Block]:
    """Split a document into blocks.

    Args:
        text: The document.
        syntax: `markdown` (ATX and setext headings, fences, tables), `rst` (underlined
            headings) or `plain` (paragraphs and lists only, so `# comment` in a shell script
            or YAML file is not mistaken for a heading).

    Returns:
        The blocks in document order.
    """
    lines = text.split("\n")
    markdown = syntax == "markdown"
    blocks: list[Block] = []
    para: list[str] = []
    rst_levels: dict[str, int] = {}

    def flush() -> None:
        if para:
            blocks.append(Block("paragraph", "\n".join(para)))
            para.clear()

    def heading(title: str, level: int, source: str) -> None:
        flush()
        blocks.append(Block("heading", source, level=level, title=title.strip()))

    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            flush()
            i += 1
            continue
        if markdown:
            if i == 0 and line.strip() == "---":
                # YAML front matter: one metadata block, not a thematic break and a heading.
                end = next(
                    (j for j in range(1, len(lines)) if lines[j].strip() in ("---", "...")),
                    0,
                )
                if end:
                    blocks.append(Block("paragraph", "\n".join(lines[: end + 1])))
                    i = end + 1
                    continue
            if fence := _FENCE.match(line):
                flush()
                end = _fence_end(lines, i, fence.group(1))
                blocks.append(Block("code", "\n".join(lines[i : end + 1])))
                i = end + 1
                continue
            if atx := _ATX.match(line):
                heading(atx.group(2) or "", len(atx.group(1)), line.strip())
                i += 1
                continue
            if para and _SETEXT.match(line):
                title = " ".join(p.strip() for p in para)
                source = "\n".join([*para, line])
                para.clear()
                heading(title, 1 if line.strip()[0] == "=" else 2, source)
                i += 1
                continue
            if _THEMATIC.match(line):
                flush()
                i += 1
                continue
            if "|" in line and i + 1 < len(lines) and "|" in lines[i + 1]:
                if _TABLE_SEP.match(lines[i + 1]):
                    flush()
                    end = i + 2
                    while end < len(lines) and lines[end].strip() and "|" in lines[end]:
                        end += 1
                    blocks.append(Block("table", "\n".join(lines[i:end])))
                    i = end
                    continue
        elif syntax == "rst" and len(para) == 1 and _RST_RULE.match(line):
            # The level of an underline style is the order in which it first appears.
            level = rst_levels.setdefault(line.strip()[0], len(rst_levels) + 1)
            title = para[0]
            para.clear()
            heading(title, level, f"{title}\n{line}")
            i += 1
            continue
        if _LIST_ITEM.match(line) and not para:
            end = _list_end(lines, i, markdown)
            blocks.append(Block("list", "\n".join(lines[i:end]).rstrip()))
            i = end
            continue
        if _LIST_ITEM.match(line) and markdown:
            # CommonMark lets a list interrupt a paragraph ("Steps:" then "- one").
            flush()
            continue
        para.append(line)
        i += 1
    flush()
    return blocks


def pack_lines(
    lines: Sequence[str], budget: int, count: Callable[[str], int], overlap: int = 0
) -> list[str]:
    """Join lines into pieces of at most `budget` tokens; split over-long lines as prose."""
    pieces: list[str] = []
    current: list[str] = []
    used = 0
    for line in lines:
        tokens = count(line)
        if tokens > budget:
            if current:
                pieces.append("\n".join(current))
                current, used = [], 0
            pieces.extend(split_text(line, budget, overlap, count))
            continue
        if current and used + tokens > budget:
            pieces.append("\n".join(current))
            current, used = [], 0
        current.append(line)
        used += tokens
    if current:
        pieces.append("\n".join(current))
    return pieces


def _list_items(text: str) -> list[str]:
    """Split a list block into its top-level items (with their nested lines)."""
    lines = text.split("\n")
    first = _LIST_ITEM.match(lines[0])
    indent = len(first.group(1)) if first else 0
    items: list[list[str]] = []
    for line in lines:
        item = _LIST_ITEM.match(line)
        if not items or (item is not None and len(item.group(1)) <= indent):
            items.append([line])
        else:
            items[-1].append(line)
    return ["\n".join(item).strip("\n") for item in items]


def split_block(block: Block, budget: int, options: ChunkOptions) -> list[str]:
    """Split one block that does not fit in `budget` tokens along its own grain."""
    count = options.count_tokens
    if block.kind == "list":
        return pack_lines(_list_items(block.text), budget, count, options.overlap_tokens)
    if block.kind == "table":
        lines = block.text.split("\n")
        header = "\n".join(lines[:2])
        room = budget - count(header)
        if room < budget // 3:
            return split_text(block.text, budget, options.overlap_tokens, count)
        return [f"{header}\n{rows}" for rows in pack_lines(lines[2:], room, count)]
    if block.kind == "code":
        lines = block.text.split("\n")
        opener = lines[0]
        closed = len(lines) > 1 and _FENCE.match(lines[-1]) is not None
        body = lines[1:-1] if closed else lines[1:]
        closer = lines[-1].strip() if closed else opener.strip()[:3]
        room = budget - count(opener) - count(closer)
        return [f"{opener}\n{part}\n{closer}" for part in pack_lines(body, room, count)]
    return split_text(block.text, budget, options.overlap_tokens, count, options.count_spans)


class _Packer:
    """Fills chunks with blocks; see the module docstring for the rules."""

    def __init__(self, options: ChunkOptions, fmt: str, keys: KeyMaker) -> None:
        self.options = options
        self.count = options.count_tokens
        self.fmt = fmt
        self.keys = keys
        self.chunks: list[ChunkDraft] = []
        self.path: list[tuple[int, str]] = []
        self.pending: list[str] = []  # headings not yet followed by content
        self.section_line = ""  # the current section's heading line, for continuation chunks
        self.parts: list[str] = []
        self.used = 0

    def _head(self) -> list[str]:
        if self.pending:
            return self.pending
        return [self.section_line] if self.section_line else []

    def _head_tokens(self) -> int:
        tokens = sum(self.count(h) for h in self._head())
        if tokens <= self.options.max_tokens // 3:
            return tokens
        # Headings that would eat most of the window get a chunk of their own and are not
        # repeated on continuation chunks.
        if self.pending:
            self.flush(final=True)
        self.section_line = ""
        return 0

    def heading(self, block: Block) -> None:
        if self.parts:
            self.flush()
        while self.path and self.path[-1][0] >= block.level:
            self.path.pop()
        if block.title:
            self.path.append((block.level, block.title))
        self.pending.append(block.text)
        self.section_line = block.text

    def block(self, block: Block) -> None:
        # Prose over the budget is split by sentence next: counted so that reuses this count's
        # tokenisation (`ChunkOptions.count_spans`).
        prose = block.kind == "paragraph"
        tokens = self.options.count_text(block.text) if prose else self.count(block.text)
        if not self.parts:
            self.used = self._head_tokens()
        if self.used + tokens <= self.options.max_tokens:
            self._add(block.text, tokens)
            return
        if self.parts:
            self.flush()
            self.used = self._head_tokens()
            if self.used + tokens <= self.options.max_tokens:
                self._add(block.text, tokens)
                return
        pieces = split_block(block, self.options.max_tokens - self.used, self.options)
        for piece in pieces[:-1]:
            self._add(piece, 0)
            self.flush()
            self.used = self._head_tokens()
        if pieces:
            self._add(pieces[-1], self._last_piece_tokens(block, pieces[-1], prose))

    def _last_piece_tokens(self, block: Block, piece: str, prose: bool) -> int:
        """The tokens of the last piece of a split block; for prose, from the block's own
        tokenisation when there is a span counter (the piece is the block's tail: its last
        occurrence, starting at a sentence or word)."""
        if not prose or self.options.count_spans is None:
            return self.count(piece)
        start = block.text.rfind(piece)
        return self.options.count_spans(block.text, [(start, start + len(piece))])[0]

    def _add(self, text: str, tokens: int) -> None:
        self.parts.append(text)
        self.used += tokens

    def flush(self, final: bool = False) -> None:
        if not self.parts and not (final and self.pending):
            return
        text = "\n\n".join([*self._head(), *self.parts]).strip("\n")
        texts = [text]
        if not self.parts and self.count(text) > self.options.max_tokens:
            # Only headings, and absurdly long ones: split them like prose.
            texts = split_text(
                text, self.options.max_tokens, self.options.overlap_tokens, self.count
            )
        for piece in texts:
            self.chunks.append(
                ChunkDraft(
                    text=piece,
                    kind="text",
                    granularity="chunk",
                    key=self.keys.make(f"t:{short_hash(piece)}"),
                    meta={
                        "heading_path": " > ".join(title for _, title in self.path),
                        "format": self.fmt,
                    },
                )
            )
        self.parts = []
        self.pending = []
        self.used = 0


def chunk_text(
    text: str,
    options: ChunkOptions,
    *,
    syntax: Syntax = "markdown",
    fmt: str = "markdown",
    keys: KeyMaker | None = None,
) -> list[ChunkDraft]:
    """Chunk a text document by its structure.

    Args:
        text: The decoded document (Markdown from markitdown for converted formats).
        options: Size limits and the token counter.
        syntax: `markdown`, `rst` or `plain` (see `parse_blocks`).
        fmt: The format name recorded in each chunk's `meta`.
        keys: Shared key maker when several texts go into one file's chunks.

    Returns:
        Chunks with `kind="text"`, `granularity="chunk"` and `meta["heading_path"]`.
    """
    packer = _Packer(options, fmt, keys or KeyMaker())
    for block in parse_blocks(text, syntax):
        if block.kind == "heading":
            packer.heading(block)
        else:
            packer.block(block)
    packer.flush(final=True)
    return packer.chunks
