"""A text's token starts and ids from its pieces' tokenisations, against the tokenizer's own."""

from __future__ import annotations

import random
from functools import partial
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from recalld.embeddings.local import _piece_tokens, default_model_dir
from recalld.embeddings.token_starts import WordTokens, token_ids, token_starts

pytestmark = pytest.mark.model

TEXTS = [
    "As the nervous system develops, there is an inherent variability in the connections "
    "formed between differentiating neurons.Despite this variability, circuits form.",
    "# Heading\n\nSteps to recover a forgotten login-credential (v2.1): e-mail ops@example.com!",
    "def fibonacci(n): return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)",
    "tab\there\r\nand\rthere   spaces  |  pipes {braces} [brackets] `ticks` ~tilde^ \\ / ' \"",
    "UNBELIEVABLYANTICONSTITUTIONAL antidisestablishmentarianism " + "x" * 150 + " end",
    "",
    "   ",
    "a",
]
# Not plain ASCII: their other pieces go to the whole tokenizer.
OTHER = [
    "caf\u00e9 au lait",
    "\u4e2d\u6587 text",
    "bell\x07 and form\x0cfeed",
    "del\x7f",
    # Characters the normaliser drops, turns into ASCII punctuation (U+037E is ";" after NFD,
    # U+1FEF "`") or splits (Unicode whitespace and punctuation, CJK) inside a piece.
    "a\u037eb c\u1fefd e\u0301f \u0301g h\u00a0i j\u2013k \u00bfl? m\x00n o\ufffdp q\x0br",
    "\u03b1-helix and \u03b2\u2082-microglobulin at 37\u00b0C (\u226510 \u00b5M), na\u00efve "
    "T\u2009cells \u2014 IL\u20106 \u2018quoted\u2019 \u201cdouble\u201d \u2026 \u00d7 \u2212",
    "\u6f22\u5b57\u304b\u306a\u30ab\u30ca mixed\u6f22text \U0001f9ec emoji \uff21\uff42\uff43",
    "long " + "\u00e9" * 150 + " and " + "ab\u00e7" * 40,
]
# Characters fuzzed beside ASCII: accents, combining marks, other scripts, Unicode spaces and
# punctuation, control characters, characters that normalise to ASCII punctuation.
UNICODE = (
    "\u00e9\u00c5\u00df\u0131\u0130\u0301\u0308\u03b1\u03a9\u0416\u05d0\u0627\u4e2d\u3042"
    "\uac00\u00a0\u2009\u3000\u2013\u2014\u2019\u00bf\u00b0\u00b5\u2265\u037e\u1fef\u0387"
    "\x00\x07\x0b\x0c\x1f\x7f\u200b\ufeff\ufffd\U0001f9ec\uff21\u212b\u212a"
)


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    found = Tokenizer.from_file(str(default_model_dir() / "tokenizer.json"))
    # As `LocalEmbedder` sets it up: tokenizer.json pads and truncates every text to 128.
    found.no_padding()
    found.no_truncation()
    return found


def _reference(tokenizer: Tokenizer, text: str) -> list[int]:
    return [start for start, _ in tokenizer.encode(text, add_special_tokens=False).offsets]


def _reference_ids(tokenizer: Tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False).ids


def _texts() -> list[str]:
    rng = random.Random(20)
    ascii_ = "abcXYZ019 \t\n\r.,;:'\"!?-_()[]{}#@$%^&*+=/\\|<>~`" + "wordpiecetokenization"
    mixed = ascii_ + UNICODE
    fuzz = [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        for alphabet in (ascii_, mixed)
        for _ in range(3000)
    ]
    # Prose with dashes, arrows, Greek letters and box drawing: this repository's README.
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    paragraphs = [p for p in readme.split("\n\n") if p.strip()]
    return [*TEXTS, *OTHER, *fuzz, *paragraphs]


def test_texts_start_their_tokens_where_the_tokenizer_does(tokenizer: Tokenizer) -> None:
    tokens_of = WordTokens(partial(_piece_tokens, tokenizer, True))
    for text in _texts():
        assert token_starts(text, tokens_of) == _reference(tokenizer, text), repr(text)


def test_texts_have_the_tokenizers_ids(tokenizer: Tokenizer) -> None:
    tokens_of = WordTokens(partial(_piece_tokens, tokenizer, True))
    for text in _texts():
        assert token_ids(text, tokens_of) == _reference_ids(tokenizer, text), repr(text)


def test_long_pieces_are_not_kept(tokenizer: Tokenizer) -> None:
    tokens_of = WordTokens(partial(_piece_tokens, tokenizer, True), max_pieces=4)
    blob = "\u00e9" * 5000
    assert token_ids(blob, tokens_of) == _reference_ids(tokenizer, blob)
    assert not tokens_of.ids


def test_kept_pieces_stay_bounded(tokenizer: Tokenizer) -> None:
    tokens_of = WordTokens(partial(_piece_tokens, tokenizer, True), max_pieces=16)
    for text in _texts()[:500]:
        assert token_ids(text, tokens_of) == _reference_ids(tokenizer, text), repr(text)
        assert token_starts(text, tokens_of) == _reference(tokenizer, text), repr(text)
        assert len(tokens_of.ids) <= 16
