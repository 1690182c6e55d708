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

On the 2,699 chunks of 1,000 SciFact abstracts, the scan took ~0.2 CPU s where the tokenizer's
`encode_batch_fast` took 0.65-1.1 (its thread pool spinning beside the model's runs), and the
chunker's non-ASCII blocks (a quarter of them) no longer go to the tokenizer whole.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

# A piece: a run of characters that are neither ASCII whitespace (tab, newline, carriage
# return, space) nor ASCII punctuation, or one ASCII punctuation character (every printable
# ASCII character that is not a letter or digit is punctuation to BERT's pre-tokenizer).
_PIECE = re.compile(r"[^\t\n\r !-/:-@\[-`{-~]+|[!-/:-@\[-`{-~]")
# Distinct pieces kept (a piece and its tokens: ~300 bytes, so ~20 MB at most).
MAX_PIECES = 65_536
# Longer pieces (a run of another script without spaces, a base64 blob) are tokenised each
# time, not kept: the cache stays small whatever the text.
MAX_KEPT_CHARS = 64

# A piece's tokens: where each starts in the piece, and each one's id.
PieceTokens = tuple[tuple[int, ...], tuple[int, ...]]
Tokenize = Callable[[str], PieceTokens]


class WordTokens:
    """`tokenize` (a piece -> its tokens' starts and ids) with its answers for short pieces
    kept."""

    def __init__(self, tokenize: Tokenize, max_pieces: int = MAX_PIECES) -> None:
        self._tokenize = tokenize
        self._kept = lru_cache(maxsize=max_pieces)(tokenize)

    def __call__(self, piece: str) -> PieceTokens:
        if len(piece) > MAX_KEPT_CHARS:
            return self._tokenize(piece)
        return self._kept(piece)


def token_starts(text: str, tokens_of: WordTokens) -> list[int]:
    """Where each token of `text` starts, from `tokens_of` for each of its pieces."""
    starts: list[int] = []
    for match in _PIECE.finditer(text):
        found = tokens_of(match.group())[0]
        at = match.start()
        if len(found) == 1:  # most words are one token
            starts.append(at + found[0])
        else:
            starts.extend([at + offset for offset in found])
    return starts


def token_ids(text: str, tokens_of: WordTokens) -> list[int]:
    """The ids of the tokens of `text` (no special tokens), from `tokens_of` for each piece."""
    ids: list[int] = []
    for piece in _PIECE.findall(text):
        ids.extend(tokens_of(piece)[1])
    return ids
