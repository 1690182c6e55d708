"""Text that is not worth embedding: what a PDF's broken font tables leave behind (issue 17).

A PDF whose fonts lack a Unicode map comes out of an extractor as `(cid:71)(cid:82)...` runs;
one whose text is placed glyph by glyph without space characters comes out as
"Thistightsynergybetween...". Neither can be found by a keyword search, and their vectors are
noise, so such chunks are counted and left out instead of stored.
"""

from __future__ import annotations

import re

_CID = re.compile(r"\(cid:\d+\)")
# A run of letters (no digits, no underscore): a word, or several glued together. camelCase
# identifiers are split at their humps, so code names in prose do not count as glued words.
_LETTERS = re.compile(r"[^\W\d_]+")
_HUMP = re.compile(r"(?<=[a-zß-ÿ])(?=[A-ZÀ-Þ])")
# Longer than nearly every real word (English tops out around 20 letters in running text);
# German-style compounds reach it, but they never make up a third of a text.
GLUED_LETTERS = 25
GLUED_SHARE = 0.35
CID_SHARE = 0.2
UNREADABLE_SHARE = 0.2
_MIN_LETTERS = 40  # too short to judge


def garbage_reason(text: str) -> str | None:
    """Why `text` is unreadable, or None if it reads as text.

    Returns:
        `"cid codes"` (glyph ids instead of characters), `"no spaces"` (words glued
        together), `"unreadable characters"` (mostly replacement or private-use characters),
        or None.
    """
    stripped = "".join(text.split())
    if not stripped:
        return None
    cids = sum(len(m) for m in _CID.findall(text))
    if cids >= CID_SHARE * len(stripped):
        return "cid codes"
    odd = sum(1 for c in stripped if c == "\ufffd" or "\ue000" <= c <= "\uf8ff")
    if odd >= UNREADABLE_SHARE * len(stripped):
        return "unreadable characters"
    runs = [len(part) for run in _LETTERS.findall(_CID.sub(" ", text)) for part in _HUMP.split(run)]
    letters = sum(runs)
    if letters >= _MIN_LETTERS and sum(n for n in runs if n >= GLUED_LETTERS) >= (
        GLUED_SHARE * letters
    ):
        return "no spaces"
    return None
