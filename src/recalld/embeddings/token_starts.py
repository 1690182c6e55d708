"""Where each token of an ASCII text starts, from its words' tokenisations, each kept.

`LocalEmbedder.count_spans` counts a span's tokens as the text's tokens that start inside it,
so the chunker tokenises each block once. That tokenisation was still ~1.1 of the ~5 CPU
seconds an ingest of 1,000 SciFact abstracts spent outside the model, on text the model
tokenises again. Behind BERT's normaliser and pre-tokenizer, WordPiece sees one word at a time
(no token crosses whitespace or punctuation), and in ASCII text the normaliser maps each
character to one character (it lowercases; only control characters would go, and texts with
them are left to the tokenizer). So an ASCII text's tokens are its words' tokens, each word
tokenised alone, and words repeat: their relative token starts are kept (a bounded cache), and
a text costs a regular-expression scan. Texts with any other character go to the tokenizer
whole (None).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

# A word as BERT's pre-tokenizer cuts ASCII: a run of letters and digits, or one punctuation
# character (every printable ASCII character that is neither is punctuation to it).
_WORD = re.compile(r"[A-Za-z0-9]+|[!-/:-@\[-`{-~]")
# Anything but printable ASCII, tab, newline and carriage return: the normaliser may drop,
# merge or expand it, so the text goes to the tokenizer whole.
_NOT_PLAIN = re.compile(r"[^\t\n\r -~]")
# Distinct words kept (a word and its starts: ~200 bytes, so ~13 MB at most).
MAX_WORDS = 65_536

WordStarts = Callable[[str], tuple[int, ...]]


def word_starts(tokenize: WordStarts, max_words: int = MAX_WORDS) -> WordStarts:
    """`tokenize` (a word -> where each of its tokens starts in it) with its answers kept."""
    return lru_cache(maxsize=max_words)(tokenize)


def token_starts(text: str, starts_in_word: WordStarts) -> list[int] | None:
    """Where each token of `text` starts, from `starts_in_word` for each of its words; None
    when `text` is not plain ASCII (tokenise it whole)."""
    if _NOT_PLAIN.search(text):
        return None
    starts: list[int] = []
    for match in _WORD.finditer(text):
        at = match.start()
        found = starts_in_word(match.group())
        if len(found) == 1:  # most words are one token
            starts.append(at + found[0])
        else:
            starts.extend([at + offset for offset in found])
    return starts
