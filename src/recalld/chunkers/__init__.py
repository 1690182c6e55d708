"""recalld.chunkers: pure, synchronous functions from a file's bytes to `ChunkDraft`s.

No file I/O, no asyncio, no SQL: the ingest layer reads files and runs these in a worker
thread. `chunk_file` is the entry point; it detects the format and dispatches to

    text.py           Markdown / reStructuredText / plain text, by structure
    documents.py      PDF, DOCX, PPTX, XLSX, EPUB, HTML, CSV via markitdown, then text.py
    code.py           source code on syntax boundaries (tree-sitter; languages.py)
    formats/          conversation-log shapes -> Conversation / Session / Round / Turn
    conversation.py   session, round and fact chunks (facts.py: the offline heuristic)

The ingest layer may instead call `parse_conversations`, run an LLM fact extractor on the
rounds, and pass its facts to `conversation_chunks`.
"""

from __future__ import annotations

from recalld.chunkers.conversation import conversation_chunks
from recalld.chunkers.files import chunk_file, unsupported_type
from recalld.chunkers.formats import parse_conversations
from recalld.chunkers.formats.model import Conversation, Round, Session, Turn
from recalld.chunkers.options import (
    DEFAULT_OPTIONS,
    ChunkedSource,
    ChunkOptions,
    approx_tokens,
)

__all__ = [
    "DEFAULT_OPTIONS",
    "ChunkOptions",
    "ChunkedSource",
    "Conversation",
    "Round",
    "Session",
    "Turn",
    "approx_tokens",
    "chunk_file",
    "conversation_chunks",
    "parse_conversations",
    "unsupported_type",
]
