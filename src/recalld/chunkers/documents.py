"""Converting binary documents (PDF, Office, EPUB) and HTML/CSV to Markdown: PDF through
PDFium (`chunkers.pdf`), everything else with markitdown.

markitdown is imported on first use: importing it pulls in magika and its format libraries and
takes about a second, which the CLI and the daemon's start-up should not pay.

Before markitdown sees the bytes, their container is checked (`%PDF-` for PDF, a zip with the
right members for DOCX/PPTX/XLSX/EPUB). markitdown tries every converter in turn and falls back
to its plain-text converter, so junk named `.docx` would otherwise come back as "Markdown" made
of the junk itself; here it is a `ParseError` that says what is wrong.
"""

from __future__ import annotations

import functools
import io
import logging
import zipfile
from typing import TYPE_CHECKING

from recalld.chunkers.pdf import extract_pdf_text
from recalld.errors import ParseError, UnsupportedFormatError
from recalld.extras import require

if TYPE_CHECKING:
    from markitdown import MarkItDown

logger = logging.getLogger(__name__)

# Extension -> format name, for everything this module converts.
DOCUMENT_FORMATS: dict[str, str] = {
    ".pdf": "pdf",
    ".docx": "docx",
    ".pptx": "pptx",
    ".xlsx": "xlsx",
    ".epub": "epub",
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
    ".csv": "csv",
    ".ipynb": "ipynb",
}
# Members a genuine file of each zip-based format has (by name prefix).
_ZIP_MEMBERS: dict[str, str] = {
    "docx": "word/",
    "pptx": "ppt/",
    "xlsx": "xl/",
    "epub": "META-INF/",
}


def _fail(path: str, reason: str) -> ParseError:
    return ParseError(
        f"cannot read {path}: {reason}; check that the file is complete and really is what "
        "its extension says",
        data={"path": path, "reason": reason},
    )


def _check_container(path: str, fmt: str, data: bytes) -> None:
    """Raise `ParseError` if `data` is not even the right kind of container for `fmt`."""
    if fmt == "pdf":
        if b"%PDF-" not in data[:1024]:
            raise _fail(path, "no %PDF- header")
        return
    member = _ZIP_MEMBERS.get(fmt)
    if member is None:
        return
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise _fail(path, f"not a {fmt.upper()} file (bad zip: {exc})") from exc
    if not any(name.startswith(member) for name in names):
        raise _fail(path, f"not a {fmt.upper()} file (zip without {member})")


@functools.cache
def _converter() -> MarkItDown:
    # One instance per process: building it loads magika's model. Converting is stateless,
    # so worker threads can share it.
    from markitdown import MarkItDown

    return MarkItDown(enable_plugins=False)


def _pdf_text(path: str, data: bytes) -> str:
    # PDFium, not markitdown's pdfminer: chosen by the numbers (README, "PDF extraction").
    try:
        return extract_pdf_text(data)[0]
    except Exception as exc:
        # PdfiumError for a corrupt, truncated or password-protected file.
        raise _fail(path, f"pdf conversion failed ({type(exc).__name__}: {exc})") from exc


# Formats whose markitdown converter needs the `office` extra, and what it imports.
OFFICE_FORMATS: dict[str, tuple[str, ...]] = {"pptx": ("pptx",), "xlsx": ("pandas", "openpyxl")}


def _markitdown_text(path: str, fmt: str, data: bytes, charset: str | None) -> str:
    if fmt in OFFICE_FORMATS:
        # Before markitdown is imported: its converters note a missing library once, at import.
        require(OFFICE_FORMATS[fmt], "office", f"reading .{fmt} files", UnsupportedFormatError)
    from markitdown import MarkItDownException, StreamInfo

    ext = next(e for e, f in DOCUMENT_FORMATS.items() if f == fmt)
    try:
        result = _converter().convert_stream(
            io.BytesIO(data),
            stream_info=StreamInfo(extension=ext, filename=path, charset=charset),
        )
    except MarkItDownException as exc:
        reason = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise _fail(path, f"{fmt} conversion failed: {reason}") from exc
    except Exception as exc:
        # Converters raise whatever their parser raises (zipfile, lxml, ...); every one of
        # them means the same thing to the user.
        raise _fail(path, f"{fmt} conversion failed ({type(exc).__name__}: {exc})") from exc
    return result.text_content or ""


def convert_document(
    path: str, fmt: str, data: bytes, charset: str | None = None
) -> tuple[str, list[str]]:
    """Convert a document to Markdown.

    Args:
        path: The file's name, for messages.
        fmt: A value of `DOCUMENT_FORMATS`.
        data: The file's bytes.
        charset: The encoding of text formats (HTML, CSV) when the caller decoded them.

    Returns:
        The Markdown text and notes (e.g. that a PDF had no text layer).

    Raises:
        ParseError: The file is corrupt, truncated or not what its extension says.
    """
    _check_container(path, fmt, data)
    text = _pdf_text(path, data) if fmt == "pdf" else _markitdown_text(path, fmt, data, charset)
    notes: list[str] = []
    if not text.strip():
        notes.append(f"no text found in this {fmt} (a scan without a text layer?)")
    if fmt == "pdf" and b"%%EOF" not in data[-2048:]:
        notes.append("the PDF has no end-of-file marker; it may be truncated")
    return text, notes
