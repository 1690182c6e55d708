"""`chunk_file`: from a file's name and bytes to chunks, whatever the format.

Routing, in order:

1. Converted documents by extension (PDF, Office, EPUB, HTML, CSV, notebooks) go through
   markitdown and then the Markdown chunker.
2. Source code by extension, or by a `#!` line naming an interpreter with a grammar, goes to
   the tree-sitter chunker; other `#!` scripts are chunked as plain text.
3. `.json`/`.jsonl`/`.ndjson` files, and files without an extension that start like JSON, are
   sniffed for a conversation log; anything else in them is chunked as plain text.
4. Known text extensions are chunked as Markdown, reStructuredText or plain text.
5. Files without an extension (README, Makefile) are chunked as plain text if they decode as
   text; anything else is an `UnsupportedFormatError`.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import replace

from recalld.chunkers.code import chunk_code
from recalld.chunkers.conversation import conversation_chunks
from recalld.chunkers.dates import with_dates
from recalld.chunkers.decode import decode_text
from recalld.chunkers.documents import DOCUMENT_FORMATS, convert_document
from recalld.chunkers.formats import parse_conversations_text
from recalld.chunkers.garbage import garbage_reason
from recalld.chunkers.options import DEFAULT_OPTIONS, ChunkedSource, ChunkOptions, KeyMaker
from recalld.chunkers.secrets import mark_redactions, redact, redact_note
from recalld.chunkers.text import chunk_text
from recalld.errors import ParseError, UnsupportedFormatError
from recalld.types import ChunkDraft

logger = logging.getLogger(__name__)

CODE_EXTENSIONS: dict[str, str] = {
    **dict.fromkeys((".py", ".pyi", ".pyw"), "python"),
    **dict.fromkeys((".js", ".mjs", ".cjs", ".jsx"), "javascript"),
    **dict.fromkeys((".ts", ".mts", ".cts"), "typescript"),
    ".tsx": "tsx",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    **dict.fromkeys((".c", ".h"), "c"),
    **dict.fromkeys((".cc", ".cpp", ".cxx", ".c++", ".hpp", ".hh", ".hxx", ".ipp"), "cpp"),
    **dict.fromkeys((".rb", ".rake", ".gemspec"), "ruby"),
}
_CPP_MARKERS = re.compile(rb"^\s*(?:class|namespace|template\s*<|public:|private:)|::", re.M)
_CODE_NAMES = {"Rakefile": "ruby", "Gemfile": "ruby", "Vagrantfile": "ruby", "SConstruct": "python"}
# Extension -> (syntax, format) for text chunked by structure.
TEXT_EXTENSIONS: dict[str, tuple[str, str]] = {
    **dict.fromkeys((".md", ".markdown", ".mdown", ".mkd", ".mdx"), ("markdown", "markdown")),
    ".rst": ("rst", "rst"),
    **dict.fromkeys((".txt", ".text"), ("plain", "text")),
    **{
        ext: ("plain", fmt)
        for fmt, exts in {
            "log": ".log",
            "asciidoc": ".adoc .asciidoc",
            "org": ".org",
            "latex": ".tex .bib",
            "toml": ".toml",
            "yaml": ".yaml .yml",
            "ini": ".ini .cfg .conf .properties",
            "shell": ".sh .bash .zsh .fish .ps1 .bat .cmd",
            "sql": ".sql",
            "xml": ".xml .xsd .xsl",
            "css": ".css .scss .sass .less",
            "tsv": ".tsv",
            "subtitles": ".srt .vtt",
            "source": (
                ".php .pl .pm .lua .r .jl .kt .kts .swift .scala .cs .fs .hs .ex .exs .erl "
                ".clj .dart .vue .svelte .gradle .cmake .mk .proto .graphql .gql .tf .hcl "
                ".zig .nim .m .mm .groovy .sol .v .vhd .asm .s .el .lisp .scm .ml .mli"
            ),
        }.items()
        for ext in exts.split()
    },
}
JSON_EXTENSIONS: dict[str, str] = {".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl"}
_INTERPRETERS = {
    "node": "javascript",
    "nodejs": "javascript",
    "deno": "typescript",
    "bun": "javascript",
    "ts-node": "typescript",
    "ruby": "ruby",
}


def _interpreter(first_line: str) -> str:
    """The program a `#!` line runs: `#!/usr/bin/env -S python3 -u` -> `python3`."""
    words = first_line[2:].split()
    if not words:
        return ""
    program = os.path.basename(words[0])
    if program == "env":
        rest = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        program = os.path.basename(rest[0]) if rest else ""
    return program


def _shebang_language(first_line: str) -> str | None:
    program = _interpreter(first_line)
    if program.startswith("python"):
        return "python"
    return _INTERPRETERS.get(program)


def _unsupported(name: str, reason: str) -> UnsupportedFormatError:
    ext = os.path.splitext(os.path.basename(name))[1].lower()
    return UnsupportedFormatError(
        f"{name}: {reason}; recalld reads text, Markdown, code, PDF, Office documents and "
        "conversation logs; exclude this file from the watched folders",
        data={"path": name, "reason": reason, "file_type": ext or "binary"},
    )


def unsupported_type(name: str) -> str | None:
    """The extension of a file no chunker takes (`.gz`, `.png`), known from its name alone;
    None when it may be supported (files without an extension are only known once read)."""
    base = os.path.basename(name)
    ext = os.path.splitext(base)[1].lower()
    if not ext or base in _CODE_NAMES:
        return None
    known = ext in DOCUMENT_FORMATS or ext in CODE_EXTENSIONS or ext in TEXT_EXTENSIONS
    return None if known or ext in JSON_EXTENSIONS else ext


def _empty(kind: str, fmt: str, notes: list[str]) -> ChunkedSource:
    return ChunkedSource(kind, fmt, [], [*notes, "empty file"])


def _chunk_json(
    name: str, text: str, fmt: str, options: ChunkOptions, notes: list[str]
) -> ChunkedSource:
    conversations, more = parse_conversations_text(name, text)
    notes = notes + more
    if not conversations:
        return ChunkedSource("text", fmt, chunk_text(text, options, syntax="plain", fmt=fmt), notes)
    keys = KeyMaker()
    chunks: list[ChunkDraft] = []
    for conv in conversations:
        chunks.extend(conversation_chunks(conv, options, keys=keys))
    return ChunkedSource("conversation", conversations[0].format, chunks, notes)


def _route(name: str, base: str, ext: str, data: bytes) -> tuple[str, str, str]:
    """Pick `(kind, syntax or language, format)` for a text-based file, or refuse it."""
    language = CODE_EXTENSIONS.get(ext) or _CODE_NAMES.get(base)
    if language == "c" and ext == ".h" and _CPP_MARKERS.search(data[:65536]):
        language = "cpp"  # `.h` serves C++ as often as C
    if language is not None:
        return ("code", language, language)
    if data.startswith(b"#!"):
        first = data.split(b"\n", 1)[0].decode("utf-8", "replace")
        language = _shebang_language(first)
        if language is not None:
            return ("code", language, language)
        return ("text", "plain", _interpreter(first) or "script")
    if ext in JSON_EXTENSIONS:
        return ("json", "plain", JSON_EXTENSIONS[ext])
    if ext in TEXT_EXTENSIONS:
        syntax, fmt = TEXT_EXTENSIONS[ext]
        return ("text", syntax, fmt)
    if not ext:
        return ("sniff", "plain", "text")
    raise _unsupported(name, f"unsupported file type {ext}")


def redact_text(text: str, options: ChunkOptions) -> tuple[str, list[str]]:
    """`text` with its secrets replaced when `options.redact`, and a note saying what went."""
    if not options.redact:
        return text, []
    clean, found = redact(text, entropy=options.redact_entropy)
    return (clean, [redact_note(found)]) if found else (text, [])


def chunk_file(name: str, data: bytes, options: ChunkOptions = DEFAULT_OPTIONS) -> ChunkedSource:
    """Detect a file's format, redact its secrets (`options.redact`) and chunk it.

    Args:
        name: The file's name or path (only its base name is looked at).
        data: The file's bytes.
        options: Size limits, the token counter and whether to make heuristic facts.

    Returns:
        The kind and format found, the chunks in order and notes for the user. Empty input
        gives no chunks.

    Raises:
        UnsupportedFormatError: The file type is not one recalld reads.
        ParseError: The file claims a supported format but is binary, corrupt or truncated.
    """
    parsed = _chunk_file(name, data, options)
    if not options.redact:
        return parsed
    return replace(parsed, chunks=mark_redactions(parsed.chunks))


def _chunk_file(name: str, data: bytes, options: ChunkOptions) -> ChunkedSource:
    base = os.path.basename(name)
    ext = os.path.splitext(base)[1].lower()
    if ext in DOCUMENT_FORMATS:
        fmt = DOCUMENT_FORMATS[ext]
        notes: list[str] = []
        if not data.strip():
            return _empty("text", fmt, notes)
        charset = None
        if fmt in ("html", "csv", "ipynb"):
            # Decode here, so encoding detection and its notes match every other text file.
            text, notes = decode_text(data, name)
            data, charset = text.encode("utf-8"), "utf-8"
        markdown, more = convert_document(name, fmt, data, charset)
        markdown, redacted = redact_text(markdown, options)
        more += redacted
        chunks = with_dates(chunk_text(markdown, options, syntax="markdown", fmt=fmt), markdown)
        judged = [(chunk, garbage_reason(chunk.text)) for chunk in chunks]
        readable = [chunk for chunk, reason in judged if reason is None]
        if dropped := len(chunks) - len(readable):
            reasons = sorted({reason for _, reason in judged if reason is not None})
            more.append(
                f"{dropped} of {len(chunks)} chunks left out as unreadable ({', '.join(reasons)}): "
                "the file's fonts do not map to text"
            )
        return ChunkedSource("text", fmt, readable, notes + more, unreadable=dropped)

    kind, syntax, fmt = _route(name, base, ext, data)
    try:
        text, notes = decode_text(data, name)
    except ParseError:
        if kind == "sniff":
            raise _unsupported(name, "binary file without an extension") from None
        raise
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text, redacted = redact_text(text, options)
    notes += redacted
    if kind == "sniff":
        if text.lstrip()[:1] in ("[", "{"):
            try:
                return _chunk_json(name, text, "json", options, notes)
            except ParseError:
                pass  # `[core]` in a git config: text that merely starts like JSON
        kind = "text"
    if not text.strip():
        return _empty("text" if kind == "json" else kind, fmt, notes)
    if kind == "code":
        chunks = chunk_code(text, syntax, options, notes=notes)
        return ChunkedSource("code", fmt, chunks, notes)
    if kind == "json":
        return _chunk_json(name, text, fmt, options, notes)
    chunks = with_dates(chunk_text(text, options, syntax=syntax, fmt=fmt), text)
    return ChunkedSource("text", fmt, chunks, notes)
