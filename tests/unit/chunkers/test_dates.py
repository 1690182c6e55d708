"""Dates that text documents state about themselves become their chunks' event times."""

from datetime import UTC, datetime

from recalld.chunkers import chunk_file
from recalld.chunkers.dates import document_date, find_date, with_dates
from recalld.types import ChunkDraft


def day(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_find_date_reads_the_common_full_forms():
    assert find_date("released 2023-03-14, then") == day("2023-03-14")
    assert find_date("Standup notes, 14 March 2023") == day("2023-03-14")
    assert find_date("on March 14th, 2023 we met") == day("2023-03-14")
    assert find_date("Sept. 3 2021") == day("2021-09-03")
    assert find_date("version 2023 of March") is None
    assert find_date("31 February 2023") is None
    assert find_date("nothing here") is None


def test_document_date_prefers_front_matter_then_the_first_lines():
    front = "---\ntitle: Plan\ndate: 2022-11-05\n---\n# Plan\n\nWritten 1 January 2020."
    assert document_date(front) == day("2022-11-05")
    assert document_date("# Retro, 2 May 2023\n\nWe shipped.") == day("2023-05-02")
    assert document_date("# Retro\n\nintro\n\nmore\n\nmore\n\nlater on 2 May 2023") is None


def test_dated_headings_date_their_sections():
    text = (
        "# Journal\n\n## 2023-03-14\n\nFixed the deploy script.\n\n"
        "## 2023-04-02\n\nRotated the keys.\n"
    )
    chunks = chunk_file("journal.md", text.encode(), options_small()).chunks
    times = {c.text.splitlines()[-1]: c.event_time for c in chunks}
    assert times["Fixed the deploy script."] == day("2023-03-14")
    assert times["Rotated the keys."] == day("2023-04-02")


def test_undated_documents_keep_no_time_and_explicit_times_win():
    chunks = chunk_file("notes.md", b"# Notes\n\nNo date anywhere.", options_small()).chunks
    assert all(c.event_time is None for c in chunks)
    given = ChunkDraft("x", event_time=5.0, meta={"heading_path": "2023-01-01"})
    assert with_dates([given], "# 2020-01-01")[0].event_time == 5.0


def options_small():
    from recalld.chunkers.options import ChunkOptions

    return ChunkOptions(max_tokens=16, overlap_tokens=0)
