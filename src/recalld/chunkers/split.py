"""Splitting one oversized block of prose into pieces that fit, with overlap.

The block is cut at sentence ends first, then after commas, semicolons and colons, then
between words, and only a single word longer than the whole budget (a base64 blob, a minified
line) is cut mid-word. Pieces are slices of the original text, so the whitespace between
sentences is kept exactly as it was: text such as "disabilities.A line" (no space after the
period) is never glued or re-spaced here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from recalld.chunkers.options import SpanCounter

# A sentence ends at . ! ? or an ellipsis, maybe followed by closing quotes or brackets, and
# then whitespace; line breaks always end a unit. Abbreviations over-split, which only costs a
# little packing freedom because short units are packed back together.
# A period glued to the next sentence ("disabilities.A line", as in some corpora) also ends
# one: the cut falls between the two, so nothing is glued further.
_SENTENCE_END = re.compile(
    r"(?<=[.!?\u2026])[\"'\u201d\u2019)\]]*\s+|\n\s*|(?<=[a-z]{2}[.!?])(?=[A-Z][a-z])"
)
_CLAUSE_END = re.compile(r"(?<=[,;:])\s+|\s+(?=[-\u2013\u2014]\s)")
_CLOSERS = "\"'\u201d\u2019)]"
_WORD = re.compile(r"\S+")


@dataclass(frozen=True, slots=True)
class _Span:
    start: int
    end: int
    tokens: int


def _spans(text: str, pattern: re.Pattern[str], start: int, end: int) -> list[tuple[int, int]]:
    """The non-blank pieces of `text[start:end]` between matches of `pattern`."""
    spans: list[tuple[int, int]] = []
    pos = start
    for match in pattern.finditer(text, start, end):
        # Keep closing quotes or brackets with the sentence they close.
        gap = match.group()
        stop = match.start() + len(gap) - len(gap.lstrip(_CLOSERS))
        if text[pos:stop].strip():
            spans.append((pos, stop))
        pos = match.end()
    if text[pos:end].strip():
        spans.append((pos, pos + len(text[pos:end].rstrip())))
    return spans


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Return the `(start, end)` offsets of the sentences of `text`, without the whitespace."""
    return _spans(text, _SENTENCE_END, 0, len(text))


def _cut_word(
    text: str, start: int, end: int, budget: int, count: Callable[[str], int]
) -> list[_Span]:
    """Cut one over-long word into slices of at most `budget` tokens."""
    spans: list[_Span] = []
    pos = start
    while pos < end:
        size = min(end - pos, budget * 4)
        tokens = count(text[pos : pos + size])
        while tokens > budget and size > 1:
            size = max(1, size * 3 // 4)
            tokens = count(text[pos : pos + size])
        spans.append(_Span(pos, pos + size, tokens))
        pos += size
    return spans


def _counts(
    text: str, spans: list[tuple[int, int]], count: Callable[[str], int], many: SpanCounter | None
) -> list[int]:
    """The token count of each span of `text`, in one pass when there is a span counter."""
    if many is not None:
        return many(text, spans)
    return [count(text[start:end]) for start, end in spans]


def _units(
    text: str, budget: int, count: Callable[[str], int], many: SpanCounter | None
) -> list[_Span]:
    """Break `text` into spans of at most `budget` tokens: sentences, else clauses, else
    words, else slices of a word."""
    units: list[_Span] = []
    sentences = sentence_spans(text)
    for (start, end), tokens in zip(sentences, _counts(text, sentences, count, many), strict=True):
        if tokens <= budget:
            units.append(_Span(start, end, tokens))
            continue
        for clause_start, clause_end in _spans(text, _CLAUSE_END, start, end):
            tokens = count(text[clause_start:clause_end])
            if tokens <= budget:
                units.append(_Span(clause_start, clause_end, tokens))
                continue
            for word in _WORD.finditer(text, clause_start, clause_end):
                word_tokens = count(word.group())
                if word_tokens <= budget:
                    units.append(_Span(word.start(), word.end(), word_tokens))
                else:
                    units.extend(_cut_word(text, word.start(), word.end(), budget, count))
    return units


def split_text(
    text: str,
    budget: int,
    overlap: int,
    count: Callable[[str], int],
    many: SpanCounter | None = None,
) -> list[str]:
    """Split `text` into pieces of at most `budget` tokens, each repeating the previous tail.

    Token counts are summed over sentences or words, which is exact for tokenizers that split
    on whitespace first (WordPiece, `approx_tokens`) and close for the rest.

    Args:
        text: The block to split.
        budget: Maximum tokens per piece.
        overlap: Tokens of the previous piece to repeat at the start of the next (whole
            sentences or words, never more than this).
        count: The token counter.
        many: Counts sentences and words of `text` in one pass (`ChunkOptions.count_spans`);
            None: `count` each.

    Returns:
        The pieces, in order; a single piece when the text already fits.
    """
    if not text.strip():
        return []
    units = _units(text, budget, count, many)
    pieces: list[str] = []
    i = 0
    start = units[0].start
    carried = 0  # tokens of the partial sentence repeated at the start of this piece
    while i < len(units):
        j = i
        total = carried
        while j < len(units) and total + units[j].tokens <= budget:
            total += units[j].tokens
            j += 1
        if j == i:
            # The repeated words and the next unit do not fit together: drop the words.
            start, carried = units[i].start, 0
            continue
        pieces.append(text[start : units[j - 1].end])
        if j >= len(units):
            break
        # Repeat whole sentences where they fit the overlap (never all of this piece's)...
        k = j
        back = 0
        while k - 1 > i and back + units[k - 1].tokens <= overlap:
            k -= 1
            back += units[k].tokens
        if k < j:
            i, start, carried = k, units[k].start, 0
            continue
        # ...else the last words of the last sentence.
        i = j
        start, carried = units[j].start, 0
        words = [w.span() for w in _WORD.finditer(text, units[j - 1].start, units[j - 1].end)]
        counted: Iterable[tuple[tuple[int, int], int]]
        if many is None:  # counted one by one, only as far back as the overlap reaches
            counted = ((w, count(text[w[0] : w[1]])) for w in reversed(words))
        else:
            counted = zip(reversed(words), reversed(many(text, words)), strict=True)
        for (word_start, _), tokens in counted:
            if carried + tokens > overlap:
                break
            start, carried = word_start, carried + tokens
    return pieces
