"""A text's tokens (where each starts, and its id) from its pieces' tokenisations, each kept.

`LocalEmbedder.count_spans` counts a span's tokens as the text's tokens that start inside it,
and `LocalEmbedder.embed` feeds the model the text's ids. Behind BERT's normaliser and
pre-tokenizer, no token crosses ASCII whitespace or ASCII punctuation: the normaliser maps
each of those characters to itself (whitespace to a space), never removes or merges them, and
the pre-tokenizer splits at every one. So a text's tokens are those of its pieces, each
tokenised alone: runs of any other characters, and single ASCII punctuation characters. Pieces
repeat (words), so their tokens are kept (a bounded cache) and a text costs a
regular-expression scan; a piece of plain ASCII letters and digits goes to WordPiece directly
(lowercased), any other piece (accents, other scripts, control characters) to the whole
tokenizer, which normalises it as it would inside the text.

On the 2,699 chunks of 1,000 SciFact abstracts, their ids took ~0.1 CPU s where the
tokenizer's `encode_batch_fast` took 0.65-1.1 (its thread pool spinning beside the model's
runs), and the chunker's non-ASCII blocks (a quarter of them) no longer go to the tokenizer
whole.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from itertools import chain

# A piece: a run of characters that are neither ASCII whitespace (tab, newline, carriage
# return, space) nor ASCII punctuation, or one ASCII punctuation character (every printable
# ASCII character that is not a letter or digit is punctuation to BERT's pre-tokenizer).
_PIECE = re.compile(r"[^\t\n\r !-/:-@\[-`{-~]+|[!-/:-@\[-`{-~]")
# Distinct pieces kept (a piece and its tokens: ~250 bytes, so ~16 MB at most); when full,
# the kept pieces are dropped and kept anew from the texts that follow.
MAX_PIECES = 65_536
# Longer pieces (a run of another script without spaces, a base64 blob) are tokenised each
# time, not kept: the cache stays small whatever the text.
MAX_KEPT_CHARS = 64

# A piece's tokens: where each starts in the piece, and each one's id.
PieceTokens = tuple[tuple[int, ...], tuple[int, ...]]
Tokenize = Callable[[str], PieceTokens]


class WordTokens:
    """`tokenize` (a piece -> its tokens' starts and ids) with its answers for short pieces
    kept, in two dictionaries read without a Python call per piece (`token_ids`,
    `token_starts`): on SciFact's chunks ~40% of the CPU of a kept function's calls."""

    def __init__(self, tokenize: Tokenize, max_pieces: int = MAX_PIECES) -> None:
        self._tokenize = tokenize
        self.max_pieces = max_pieces
        self.starts: dict[str, tuple[int, ...]] = {}
        self.ids: dict[str, tuple[int, ...]] = {}

    def __call__(self, piece: str) -> PieceTokens:
        """The piece's tokens, kept when it is short."""
        starts = self.starts.get(piece)
        ids = self.ids.get(piece)
        if starts is not None and ids is not None:
            return starts, ids
        found = self._tokenize(piece)
        if len(piece) <= MAX_KEPT_CHARS:
            if len(self.ids) >= self.max_pieces:
                self.starts.clear()
                self.ids.clear()
            self.starts[piece], self.ids[piece] = found
        return found

    def of(self, pieces: Iterable[str]) -> dict[str, PieceTokens]:
        """Each distinct piece's tokens (kept ones from the cache, others tokenised)."""
        return {piece: self(piece) for piece in set(pieces)}


def token_starts(text: str, tokens_of: WordTokens) -> list[int]:
    """Where each token of `text` starts, from `tokens_of` for each of its pieces."""
    matches = list(_PIECE.finditer(text))
    pieces = map(re.Match.group, matches)
    try:
        offsets = list(map(tokens_of.starts.__getitem__, pieces))
    except KeyError:  # a piece not kept yet (or dropped meanwhile)
        found = tokens_of.of(map(re.Match.group, matches))
        offsets = [found[match.group()][0] for match in matches]
    starts: list[int] = []
    for match, offset in zip(matches, offsets, strict=True):
        if offset == (0,):  # most words are one token
            starts.append(match.start())
        else:
            at = match.start()
            starts.extend([at + one for one in offset])
    return starts


def token_ids(text: str, tokens_of: WordTokens) -> list[int]:
    """The ids of the tokens of `text` (no special tokens), from `tokens_of` for each piece."""
    pieces = _PIECE.findall(text)
    try:
        return list(chain.from_iterable(map(tokens_of.ids.__getitem__, pieces)))
    except KeyError:  # a piece not kept yet (or dropped meanwhile)
        found = tokens_of.of(pieces)
        return list(chain.from_iterable(found[piece][1] for piece in pieces))
