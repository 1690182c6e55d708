"""The structure chunker for Markdown, reStructuredText and plain text."""

from __future__ import annotations

import itertools
import re

from recalld.chunkers import ChunkOptions, approx_tokens, chunk_file
from recalld.chunkers.split import split_text
from recalld.chunkers.text import chunk_text, parse_blocks

GUIDE = """\
# Install

recalld runs on Linux and macOS. It needs Python 3.11 or newer.

## Linux

Install the package with pip:

```bash
pip install recalld
recalld serve
```

Then enable the user service:

- run `recalld service install`
- check `systemctl --user status recalld`
- read the logs with `journalctl --user -u recalld`

## macOS

| Step | Command |
|------|---------|
| install | `pip install recalld` |
| service | `recalld service install --launchd` |

# Usage

Search from the command line with `recalld search "sqlite wal"`.
"""


def test_blocks_are_recognised() -> None:
    kinds = [b.kind for b in parse_blocks(GUIDE)]
    assert kinds == [
        "heading",
        "paragraph",
        "heading",
        "paragraph",
        "code",
        "paragraph",
        "list",
        "heading",
        "table",
        "heading",
        "paragraph",
    ]


def test_markdown_sections_become_chunks_with_heading_paths() -> None:
    result = chunk_file("guide.md", GUIDE.encode())
    assert (result.kind, result.format, result.notes) == ("text", "markdown", [])
    paths = [c.meta["heading_path"] for c in result.chunks]
    assert paths == ["Install", "Install > Linux", "Install > macOS", "Usage"]
    linux = result.chunks[1]
    # Code, list and the heading line stay together in one chunk.
    assert linux.text.startswith("## Linux")
    assert "pip install recalld\nrecalld serve\n```" in linux.text
    assert "- read the logs" in linux.text
    assert "| service |" in result.chunks[2].text
    assert all(c.kind == "text" and c.granularity == "chunk" for c in result.chunks)


def test_keys_are_unique_and_stable() -> None:
    doc = GUIDE + "\n# Again\n\nSame paragraph.\n\n# Again\n\nSame paragraph.\n"
    first = chunk_file("guide.md", doc.encode())
    second = chunk_file("guide.md", doc.encode())
    keys = [c.key for c in first.chunks]
    assert len(set(keys)) == len(keys)
    assert keys == [c.key for c in second.chunks]
    # Editing one section leaves the other sections' keys alone.
    edited = chunk_file("guide.md", doc.replace("Python 3.11", "Python 3.12").encode())
    assert keys[1:] == [c.key for c in edited.chunks][1:]
    assert keys[0] != edited.chunks[0].key


def test_long_paragraph_is_split_at_sentences_with_overlap() -> None:
    options = ChunkOptions(max_tokens=80, overlap_tokens=30)
    sentences = [f"Sentence {i} is about topic number {i} and nothing else." for i in range(40)]
    doc = "# Notes\n\n" + " ".join(sentences)
    chunks = chunk_text(doc, options)
    assert len(chunks) > 3
    for chunk in chunks:
        assert approx_tokens(chunk.text) <= options.max_tokens
        assert chunk.text.startswith("# Notes\n\n")
        body = chunk.text.removeprefix("# Notes\n\n")
        # Pieces are whole sentences.
        assert body.startswith("Sentence ") and body.endswith("else.")
    # Each piece repeats the last sentences of the previous one.
    for before, after in itertools.pairwise(chunks):
        first_after = after.text.removeprefix("# Notes\n\n").split(". ")[0]
        assert first_after + "." in before.text
        assert not after.text.endswith(before.text[-30:])


def test_overlap_falls_back_to_words_when_sentences_are_long(small: ChunkOptions) -> None:
    sentences = [f"Sentence {i} is about topic number {i} and nothing else." for i in range(40)]
    pieces = split_text(" ".join(sentences), 50, small.overlap_tokens, approx_tokens)
    assert len(pieces) > 3
    for before, after in itertools.pairwise(pieces):
        head = " ".join(after.split()[:3])
        assert head in before[-60:]
        assert approx_tokens(after) <= 50


def test_glued_sentences_are_not_changed() -> None:
    text = "Children with disabilities.A line of research shows effects. " * 60
    pieces = split_text(text, 50, 8, approx_tokens)
    assert len(pieces) > 1
    for piece in pieces:
        assert piece in text
        assert "disabilities.A" in piece or not piece.count("disabilities")


def test_oversized_table_repeats_its_header(small: ChunkOptions) -> None:
    rows = "\n".join(f"| item {i} | value {i} |" for i in range(40))
    doc = f"## Data\n\n| name | value |\n|---|---|\n{rows}\n"
    chunks = chunk_text(doc, small)
    assert len(chunks) > 2
    for chunk in chunks:
        assert chunk.text.startswith("## Data\n\n| name | value |\n|---|---|\n| item")
        assert approx_tokens(chunk.text) <= small.max_tokens
    seen = [r for c in chunks for r in c.text.splitlines() if r.startswith("| item")]
    assert seen == rows.splitlines()


def test_oversized_code_fence_is_refenced(small: ChunkOptions) -> None:
    body = "\n".join(f"print('line {i}')" for i in range(60))
    chunks = chunk_text(f"```python\n{body}\n```\n", small)
    assert len(chunks) > 2
    for chunk in chunks:
        assert chunk.text.startswith("```python\n") and chunk.text.endswith("\n```")


def test_oversized_list_splits_between_items(small: ChunkOptions) -> None:
    items = "\n".join(f"- item {i} has a short description" for i in range(40))
    chunks = chunk_text(items, small)
    assert len(chunks) > 2
    for chunk in chunks:
        assert all(line.startswith("- item") for line in chunk.text.splitlines())


def test_monster_word_is_cut(small: ChunkOptions) -> None:
    blob = "QUJD" * 2000
    chunks = chunk_text(f"Data: {blob}", small)
    assert "".join(c.text for c in chunks).replace("Data: ", "").startswith("QUJD")
    assert all(approx_tokens(c.text) <= small.max_tokens for c in chunks)


def test_plain_text_does_not_treat_comments_as_headings() -> None:
    script = "# comment\nexport A=1\n\n# another\nexport B=2\n"
    result = chunk_file("setup.sh", script.encode())
    assert result.format == "shell"
    assert [c.meta["heading_path"] for c in result.chunks] == [""]


def test_rst_underlined_headings() -> None:
    doc = "Title\n=====\n\nIntro.\n\nSection\n-------\n\nBody text.\n"
    result = chunk_file("index.rst", doc.encode())
    assert [c.meta["heading_path"] for c in result.chunks] == ["Title", "Title > Section"]


def test_front_matter_is_not_a_heading() -> None:
    doc = "---\ntitle: Notes\ntags: [a]\n---\n# Real\n\nText.\n"
    chunks = chunk_file("n.md", doc.encode()).chunks
    assert chunks[-1].meta["heading_path"] == "Real"
    assert "title: Notes" in chunks[0].text


def test_every_chunk_fits_with_a_real_style_counter() -> None:
    # A counter that charges one token per character forces every path to split hard.
    options = ChunkOptions(max_tokens=120, overlap_tokens=10, count_tokens=len)
    chunks = chunk_text(GUIDE * 3, options)
    assert all(len(c.text) <= 120 for c in chunks)
    joined = " ".join(c.text for c in chunks)
    for word in re.findall(r"\w+", GUIDE):
        assert word in joined


def test_empty_and_blank_inputs_give_no_chunks() -> None:
    assert chunk_file("empty.md", b"").chunks == []
    assert chunk_file("blank.txt", b"  \n\n\t\n").chunks == []


def test_files_without_extension_are_sniffed() -> None:
    readme = chunk_file("README", b"recalld\n\nA memory daemon.\n")
    assert (readme.kind, readme.format) == ("text", "text")
    git_config = chunk_file(".git/config", b"[core]\n\trepositoryformatversion = 0\n")
    assert (git_config.kind, git_config.format) == ("text", "text")
    log = chunk_file("chat", b'[{"role": "user", "content": "I live in Oslo now."}]')
    assert (log.kind, log.format) == ("conversation", "openai-messages")
