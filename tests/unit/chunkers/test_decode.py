"""Decoding text files: byte-order marks, UTF-16, legacy encodings, and binary refused."""

from __future__ import annotations

import codecs
import random

import pytest

from recalld.chunkers import chunk_file
from recalld.chunkers.decode import decode_text
from recalld.errors import ParseError, UnsupportedFormatError

FRENCH = (
    "Le café était très agréable. Nous avons mangé des crêpes à Besançon, près de la gare.\n\n"
    "Après le déjeuner, nous sommes allés au musée où l'on expose des peintures du siècle dernier."
)


def test_utf8_needs_no_note() -> None:
    text, notes = decode_text(FRENCH.encode(), "a.txt")
    assert (text, notes) == (FRENCH, [])


def test_utf8_bom_is_dropped() -> None:
    text, notes = decode_text(codecs.BOM_UTF8 + FRENCH.encode(), "a.txt")
    assert text == FRENCH and notes == []


def test_latin1_is_detected_and_noted() -> None:
    result = chunk_file("notes.txt", FRENCH.encode("latin-1"))
    assert "café était très agréable" in result.chunks[0].text
    assert "crêpes à Besançon" in result.chunks[0].text
    assert any("decoded as cp1252" in n or "decoded as latin_1" in n for n in result.notes)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be"])
def test_utf16_with_and_without_bom(encoding: str) -> None:
    result = chunk_file("notes.md", f"# Titre\n\n{FRENCH}\n".encode(encoding))
    assert result.chunks[0].meta["heading_path"] == "Titre"
    assert "crêpes à Besançon" in result.chunks[0].text
    assert any("UTF-16" in n for n in result.notes)


def test_random_bytes_named_markdown_are_refused() -> None:
    junk = random.Random(7).randbytes(4096)
    with pytest.raises(ParseError) as info:
        chunk_file("notes.md", junk)
    assert info.value.data == {"path": "notes.md", "reason": "binary content"}


def test_binary_without_extension_is_unsupported() -> None:
    with pytest.raises(UnsupportedFormatError) as info:
        chunk_file("a.out", b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 8)
    assert info.value.data["path"] == "a.out"
    with pytest.raises(UnsupportedFormatError):
        chunk_file("program", b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 8)


def test_unknown_extension_is_unsupported() -> None:
    with pytest.raises(UnsupportedFormatError) as info:
        chunk_file("photo.png", b"\x89PNG\r\n\x1a\n")
    assert info.value.data == {
        "path": "photo.png",
        "reason": "unsupported file type .png",
        "file_type": ".png",
    }


def test_empty_files_give_no_chunks() -> None:
    for name in ("a.md", "a.txt", "a.py", "a.json", "a.pdf", "README", "a.jsonl"):
        result = chunk_file(name, b"")
        assert result.chunks == [], name
    assert chunk_file("bom.txt", codecs.BOM_UTF16_LE).chunks == []


def test_stray_bad_byte_is_replaced_and_noted() -> None:
    data = ("word " * 400).encode() + b"\xff" + (" word" * 400).encode()
    text, notes = decode_text(data, "a.txt")
    assert "word" in text
    assert notes


def test_crlf_line_ends_are_normalised() -> None:
    result = chunk_file("a.md", b"# One\r\n\r\nText.\r\n")
    assert result.chunks[0].text == "# One\n\nText."
