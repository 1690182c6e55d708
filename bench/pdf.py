"""PDF extractors side by side (issue 17): `python -m bench.pdf FILE.pdf ...`.

For each PDF and each extractor installed (markitdown's pdfminer/pdfplumber path, PDFium
through pypdfium2, pypdf), the text is chunked as ingest chunks it and measured:

- garbage chunks: what `chunkers.garbage` would keep out (`(cid:NN)` runs, glued words);
- words per chunk (mean) and the share of letters in runs of 25+ letters (glued words);
- table rows: lines holding three or more numbers, i.e. table rows kept on one line;
- seconds to extract.
"""

from __future__ import annotations

import io
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from recalld.chunkers.garbage import GLUED_LETTERS, garbage_reason
from recalld.chunkers.options import ChunkOptions
from recalld.chunkers.pdf import extract_pdf_text
from recalld.chunkers.text import chunk_text

_NUMBER = re.compile(r"^[-+]?\d+(?:[.,]\d+)?%?$")
_LETTERS = re.compile(r"[^\W\d_]+")


def _markitdown(data: bytes) -> str:
    from markitdown import MarkItDown, StreamInfo

    result = MarkItDown(enable_plugins=False).convert_stream(
        io.BytesIO(data), stream_info=StreamInfo(extension=".pdf")
    )
    return (result.text_content or "").replace("\f", "\n\n")


def _pypdf(data: bytes) -> str:
    from pypdf import PdfReader

    return "\n\n".join(page.extract_text() or "" for page in PdfReader(io.BytesIO(data)).pages)


def _pdfium(data: bytes) -> str:
    return extract_pdf_text(data)[0]


EXTRACTORS: dict[str, Callable[[bytes], str]] = {
    "markitdown": _markitdown,
    "pypdfium2": _pdfium,
    "pypdf": _pypdf,
}


def measure(text: str) -> dict[str, Any]:
    """Chunk `text` as ingest does and measure what comes out."""
    chunks = [c.text for c in chunk_text(text, ChunkOptions(), syntax="markdown", fmt="pdf")]
    reasons = [garbage_reason(c) for c in chunks]
    runs = [len(m) for m in _LETTERS.findall(text)]
    table_rows = sum(
        1 for line in text.splitlines() if sum(bool(_NUMBER.match(w)) for w in line.split()) >= 3
    )
    return {
        "chunks": len(chunks),
        "garbage": sum(r is not None for r in reasons),
        "garbage_reasons": sorted({r for r in reasons if r}),
        "words_per_chunk": round(statistics.mean(len(c.split()) for c in chunks), 1)
        if chunks
        else 0.0,
        "glued_letters": round(sum(n for n in runs if n >= GLUED_LETTERS) / max(1, sum(runs)), 4),
        "cid_runs": text.count("(cid:"),
        "table_rows": table_rows,
    }


def main(argv: list[str]) -> int:
    """Print one row per PDF and extractor."""
    print("pdf\textractor\tchunks\tgarbage\twords/chunk\tglued\tcid\ttable rows\tseconds")
    for name in argv:
        data = Path(name).read_bytes()
        for extractor, extract in EXTRACTORS.items():
            started = time.perf_counter()
            try:
                text = extract(data)
            except ImportError:
                continue  # not installed here
            seconds = time.perf_counter() - started
            m = measure(text)
            print(
                f"{Path(name).name}\t{extractor}\t{m['chunks']}\t{m['garbage']}"
                f"{' ' + ','.join(m['garbage_reasons']) if m['garbage'] else ''}\t"
                f"{m['words_per_chunk']}\t{m['glued_letters']:.2%}\t{m['cid_runs']}\t"
                f"{m['table_rows']}\t{seconds:.2f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
