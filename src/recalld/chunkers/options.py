"""Options and results shared by every chunker, and the default token estimate.

`approx_tokens` stands in for the embedder's tokenizer when the caller has none (tests, the
CLI's dry runs). It was calibrated against the packaged MiniLM WordPiece tokenizer: on SciFact
abstracts, LoCoMo turns and stdlib Python it over-counts by 0-12% on average (code about
-2%), so chunks sized with it stay inside the model window. The ingest layer passes the real
tokenizer through `ChunkOptions.count_tokens`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from recalld.errors import ConfigError
from recalld.types import ChunkDraft

# WordPiece splits on whitespace and on every punctuation character (the underscore too), then
# breaks long words into pieces. Counting a run of letters and digits as one piece per 6
# characters (and any other visible character as one) matched it best.
_PIECE = re.compile(r"[^\W_]{1,6}|\S")


# Token counts of several `(start, end)` spans of one text, from one tokenisation of the text.
SpanCounter = Callable[[str, Sequence[tuple[int, int]]], list[int]]


def approx_tokens(text: str) -> int:
    """Estimate how many WordPiece tokens `text` costs, without loading a tokenizer.

    Args:
        text: Any text.

    Returns:
        The estimated token count (no special tokens). It is additive over whitespace-separated
        parts, which the splitters rely on to count pieces once.
    """
    return len(_PIECE.findall(text))


@dataclass(frozen=True)
class ChunkOptions:
    """How big chunks may be and what to produce.

    Attributes:
        max_tokens: Largest chunk, in `count_tokens` units. The default leaves room for the
            special tokens of a 256-token embedding window.
        overlap_tokens: How much of a split block is repeated at the start of the next piece.
        count_tokens: The embedder's tokenizer (without special tokens); `approx_tokens` if
            none is given.
        count_spans: Counts the spans of one text with one tokenisation, as `count_tokens`
            counts each span alone, for spans that start and end between words (sentences,
            words); None: each span is counted alone. The embedder offers it when its
            tokenizer allows (`LocalEmbedder.count_spans`): prose is then tokenised once to
            size a block and its sentences, not once per block and again per sentence.
        facts: Produce heuristic fact chunks for conversations when no LLM facts are given.
        turn_windows: Also produce a `window` chunk per conversation turn: the turn with the
            turn before it, so a question and the answer that opens the next round share a
            unit (issue 14).
        redact: Replace keys, tokens and passwords in the text before chunking (`secrets`).
        redact_entropy: Also long random-looking strings.
    """

    max_tokens: int = 240
    overlap_tokens: int = 32
    count_tokens: Callable[[str], int] = approx_tokens
    count_spans: SpanCounter | None = None
    facts: bool = True
    turn_windows: bool = False
    redact: bool = True
    redact_entropy: bool = True

    def count_text(self, text: str) -> int:
        """`count_tokens(text)`, through `count_spans` when there is one (so splitting the text
        next reuses its tokenisation)."""
        if self.count_spans is None:
            return self.count_tokens(text)
        return self.count_spans(text, [(0, len(text))])[0]

    def __post_init__(self) -> None:
        # A window smaller than a short sentence makes every splitter degenerate; overlap must
        # leave room for new text or splitting would never advance.
        if self.max_tokens < 16:
            raise ConfigError("chunk max_tokens must be at least 16")
        if not 0 <= self.overlap_tokens < self.max_tokens // 2:
            raise ConfigError("chunk overlap_tokens must be at least 0 and below max_tokens / 2")


DEFAULT_OPTIONS = ChunkOptions()


@dataclass(frozen=True)
class ChunkedSource:
    """What `chunk_file` made of one file.

    Attributes:
        kind: `text`, `code` or `conversation`.
        format: The detected format, e.g. `markdown`, `pdf`, `python`, `locomo`.
        chunks: The chunks in document order (the store assigns positions from this order).
        notes: Things worth telling the user, e.g. `decoded as cp1252`.
        unreadable: Chunks left out as unreadable (`chunkers.garbage`: glyph codes, glued
            words), counted instead of stored.
    """

    kind: str
    format: str
    chunks: list[ChunkDraft]
    notes: list[str] = field(default_factory=list)
    unreadable: int = 0


def short_hash(text: str, size: int = 6) -> str:
    """A short, stable hex digest of `text`, for chunk keys."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=size).hexdigest()


class KeyMaker:
    """Hands out keys that are unique within one file and stable for the same content.

    A key is derived from the chunk's content (or the log's own ids); a repeat of the same
    key gets `~2`, `~3`, ... in order of appearance, so identical paragraphs stay distinct and
    still get the same keys on every re-chunking.
    """

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}

    def make(self, base: str) -> str:
        """Return `base`, or `base~N` if it was handed out before."""
        count = self._seen.get(base, 0) + 1
        self._seen[base] = count
        return base if count == 1 else f"{base}~{count}"
