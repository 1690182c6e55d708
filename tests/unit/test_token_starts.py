"""An ASCII text's token starts from its words' tokenisations, against the tokenizer's own."""

from __future__ import annotations

import random
from functools import partial

import pytest
from tokenizers import Tokenizer

from recalld.embeddings.local import _starts_in_word, default_model_dir
from recalld.embeddings.token_starts import token_starts, word_starts

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
# Not plain ASCII: the tokenizer takes these whole.
OTHER = ["caf\u00e9 au lait", "\u4e2d\u6587 text", "bell\x07 and form\x0cfeed", "del\x7f"]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    found = Tokenizer.from_file(str(default_model_dir() / "tokenizer.json"))
    # As `LocalEmbedder` sets it up: tokenizer.json pads and truncates every text to 128.
    found.no_padding()
    found.no_truncation()
    return found


def _reference(tokenizer: Tokenizer, text: str) -> list[int]:
    return [start for start, _ in tokenizer.encode(text, add_special_tokens=False).offsets]


def test_ascii_texts_start_their_tokens_where_the_tokenizer_does(tokenizer: Tokenizer) -> None:
    starts_in_word = word_starts(partial(_starts_in_word, tokenizer))
    rng = random.Random(20)
    alphabet = "abcXYZ019 \t\n\r.,;:'\"!?-_()[]{}#@$%^&*+=/\\|<>~`" + "wordpiecetokenization"
    fuzz = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80))) for _ in range(3000)]
    for text in [*TEXTS, *fuzz]:
        assert token_starts(text, starts_in_word) == _reference(tokenizer, text), repr(text)


def test_other_texts_go_to_the_tokenizer_whole(tokenizer: Tokenizer) -> None:
    starts_in_word = word_starts(partial(_starts_in_word, tokenizer))
    for text in OTHER:
        assert token_starts(text, starts_in_word) is None
