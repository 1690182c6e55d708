"""Turning the bytes of a text file into text, or refusing them as binary.

Order: a byte-order mark (UTF-8, UTF-16, UTF-32), UTF-16 without a mark (recognised by its
zero bytes), strict UTF-8, then `charset_normalizer`, then UTF-8 with replacement characters.
Every step but strict UTF-8 leaves a note, so the user can see why a document reads oddly.
Whatever decodes is still checked for control characters: random bytes happily "decode" as
cp1252, and chunking them would fill the index with garbage.
"""

from __future__ import annotations

import codecs
import logging
import re

from recalld.errors import ParseError

logger = logging.getLogger(__name__)

_BOMS: tuple[tuple[bytes, str], ...] = (
    # UTF-32 first: its little-endian mark starts with the UTF-16 one.
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
# Share of control or replacement characters above which content is taken as binary. Real
# text has almost none (tabs and line breaks do not count).
_MAX_JUNK = 0.02
# C0 and C1 controls except tab, line breaks, form feed and escape; U+FFFD; lone surrogates.
_JUNK = re.compile(r"[\x00-\x08\x0e-\x1a\x1c-\x1f\x7f-\x9f\ufffd\ud800-\udfff]")
# charset_normalizer often ranks cp1250 first for French or German Latin-1 text, although
# cp1252 reads it equally well; among equally good candidates prefer the Western encodings.
_PREFERRED = ("cp1252", "latin_1", "iso8859_15")


def junk_ratio(text: str) -> float:
    """Share of characters in `text` that do not occur in real text (controls, U+FFFD)."""
    if not text:
        return 0.0
    return len(_JUNK.findall(text)) / len(text)


def _guess_utf16(data: bytes) -> str | None:
    """Name the UTF-16 byte order of `data` if it looks like mostly-ASCII UTF-16 text."""
    if len(data) < 4 or len(data) % 2:
        return None
    sample = data[:4096]
    even = sample[0::2].count(0) / (len(sample) / 2)
    odd = sample[1::2].count(0) / (len(sample) / 2)
    if odd > 0.3 and even < 0.05:
        return "utf-16-le"
    if even > 0.3 and odd < 0.05:
        return "utf-16-be"
    return None


def _detect(data: bytes) -> tuple[str, str] | None:
    """Decode with `charset_normalizer`; return `(text, encoding)` or None."""
    import charset_normalizer

    matches = list(charset_normalizer.from_bytes(data))
    if not matches:
        return None
    best = matches[0]
    close = [
        m for m in matches if m.chaos <= best.chaos + 0.01 and m.coherence >= best.coherence - 0.01
    ]
    for name in _PREFERRED:
        for match in close:
            if match.encoding == name:
                best = match
                break
        else:
            continue
        break
    return str(best), best.encoding


def _binary(path: str) -> ParseError:
    return ParseError(
        f"{path} looks binary, not text; remove it from the watched folders or give it the "
        "extension of its real format",
        data={"path": path, "reason": "binary content"},
    )


def decode_text(data: bytes, path: str) -> tuple[str, list[str]]:
    """Decode the bytes of a text file.

    Args:
        data: The file's bytes.
        path: The file's name, for error messages.

    Returns:
        The text (without a byte-order mark) and notes on how it was decoded.

    Raises:
        ParseError: The content is binary or not text in any encoding.
    """
    notes: list[str] = []
    text: str | None = None
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            text = data[len(bom) :].decode(encoding, errors="replace")
            if encoding != "utf-8":
                notes.append(f"decoded as {encoding.upper()} (byte-order mark)")
            break
    if text is None and (guess := _guess_utf16(data)) is not None:
        try:
            text = data.decode(guess)
            notes.append(f"decoded as {guess.upper()} (no byte-order mark)")
        except UnicodeDecodeError:
            text = None
    if text is None:
        if b"\x00" in data:
            raise _binary(path)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            detected = _detect(data)
            if detected is not None and junk_ratio(detected[0]) <= _MAX_JUNK:
                text = detected[0]
                notes.append(f"decoded as {detected[1]} (detected; not valid UTF-8)")
            else:
                text = data.decode("utf-8", errors="replace")
                notes.append("not valid UTF-8 and no encoding detected: bad bytes replaced")
    if junk_ratio(text) > _MAX_JUNK:
        raise _binary(path)
    if notes:
        logger.info("%s: %s", path, "; ".join(notes))
    return text, notes
