"""`daemon.context.pack_sections`: the start hook's text within a token budget, each text once,
no heading without a line under it."""

from __future__ import annotations

import itertools

from recalld.daemon.context import pack_sections
from recalld.embeddings.base import HashEmbedder
from recalld.types import Chunk
from tests.helpers.records import stored_chunk

COUNT = HashEmbedder().count_tokens
IDS = itertools.count(1)


def chunk(text: str) -> Chunk:
    return stored_chunk(
        id=next(IDS),
        document_id=1,
        source="memory:x",
        position=0,
        kind="memory",
        granularity="memory",
        key="k",
        text=text,
        token_count=len(text.split()),
    )


def test_budget_dedup_and_headings() -> None:
    a = chunk("alpha beta gamma delta")
    dup = chunk("Alpha  beta gamma delta")  # the same text, spaced and cased otherwise
    long = chunk(" ".join(["word"] * 50))
    short = chunk("short one")
    sections = [("Project:", [a, dup, long]), ("Preferences:", [short]), ("Empty:", [])]
    for budget in (3, 8, 12, 20, 200):
        text, used = pack_sections(sections, "Title here", budget, COUNT)
        if not used:
            assert text == ""
            continue
        assert COUNT(text) <= budget
        lines = text.splitlines()
        assert len({line.lower() for line in lines}) == len(lines)
        assert lines[-1].startswith("- ") and "Empty:" not in text
    text, used = pack_sections(sections, "Title here", 12, COUNT)
    assert used == [a, short] and text.splitlines() == [
        "Title here", "Project:", "- alpha beta gamma delta", "Preferences:", "- short one",
    ]  # fmt: skip
    text, used = pack_sections(sections, "Title here", 200, COUNT)
    assert used == [a, long, short]


def test_nothing_fits() -> None:
    assert pack_sections([("H:", [chunk("one two three")])], "T", 2, COUNT) == ("", [])
