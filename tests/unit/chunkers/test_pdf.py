"""PDF text through PDFium, and unreadable text kept out and counted (issue 17)."""

from __future__ import annotations

import textwrap

from recalld.chunkers import chunk_file
from recalld.chunkers.garbage import garbage_reason
from recalld.chunkers.pdf import _paragraphs
from tests.unit.chunkers.test_documents import make_pdf

READABLE = (
    "Long-term memory lets an assistant recall what a user said weeks ago, and this tight "
    "synergy between retrieval and reasoning improves the accuracy of its answers."
)


def test_garbage_reasons() -> None:
    assert garbage_reason(READABLE) is None
    assert garbage_reason("(cid:71)(cid:82)(cid:82)(cid:71) (cid:3)(cid:80) word " * 10) == (
        "cid codes"
    )
    glued = "Thistightsynergybetweenretrievalandreasoningimprovesaccuracy of the answers. " * 4
    assert garbage_reason(glued) == "no spaces"
    assert garbage_reason("\ufffd\ufffd\ufffd ab \ufffd\ufffd\ufffd") == "unreadable characters"
    # Long words that are real: a compound, identifiers and a URL in ordinary prose.
    prose = (
        "The Donaudampfschifffahrtsgesellschaftskapitaen read the configuration file at "
        "https://example.org/very/long/path and called initializeApplicationConfiguration "
        "before the weekly meeting with the whole team about the release plan, which had "
        "been moved twice already because of the holidays in the north of the country. "
    )
    assert garbage_reason(prose * 3) is None
    assert garbage_reason("") is None and garbage_reason("Short.") is None


def test_line_end_hyphens_are_joined_and_paragraphs_rebuilt() -> None:
    page = (
        "1 Introduction\r\n"
        "This document describes the library that provides structures man\ufffe\r\n"
        "agement and encoding rules for every kind of message it may meet in\r\n"
        "practice.\r\n"
        "A second paragraph starts here and runs on across the whole width of\r\n"
        "the page."
    )
    assert _paragraphs(page).split("\n\n") == [
        "1 Introduction",
        "This document describes the library that provides structures management and "
        "encoding rules for every kind of message it may meet in practice.",
        "A second paragraph starts here and runs on across the whole width of the page.",
    ]


def test_a_table_row_stays_on_one_line() -> None:
    data = make_pdf(
        ["Method  Recall  NDCG  Latency", "bm25  0.61  0.52  13", "hybrid  0.68  0.57  16"]
    )
    text = "\n".join(c.text for c in chunk_file("t.pdf", data).chunks)
    assert "hybrid 0.68 0.57 16" in " ".join(text.split())


def test_unreadable_chunks_are_left_out_and_counted() -> None:
    glued = "Thistightsynergybetweenretrievalandreasoningimprovestheaccuracy" * 2
    cids = "(cid:71)(cid:82)(cid:82)(cid:71)(cid:3)(cid:80)(cid:82)(cid:85)(cid:81)(cid:76)"
    pages = [
        "\n".join(textwrap.wrap(READABLE, 70)),
        "\n".join([glued[:90]] * 30),
        "\n".join([cids * 2] * 30),
    ]
    result = chunk_file("paper.pdf", make_pdf(pages))
    text = " ".join(c.text for c in result.chunks)
    assert "tight synergy between retrieval" in " ".join(text.split())
    assert "(cid:" not in text and "Thistightsynergy" not in text
    assert result.unreadable >= 2
    assert any("left out as unreadable (cid codes, no spaces)" in n for n in result.notes)
