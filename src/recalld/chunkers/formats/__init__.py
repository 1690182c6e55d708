"""Conversation logs: recognising their shape and parsing them into `Conversation`s.

Formats are told apart by shape, not by file name: a JSON document (or JSONL, one value per
line) is read, then the first few values are checked against each known shape. Malformed
JSONL lines are skipped and reported; only a file in which nothing parses is an error.

    shape                                   format
    {question_id, haystack_sessions, ...}   longmemeval
    {sample_id, conversation: {session_N}}  locomo
    {mapping, current_node, title}          chatgpt-export
    {uuid, name, chat_messages: [...]}      claude-export
    {type, message|payload, timestamp}      agent-jsonl
    {messages: [...]} or [{role, content}]  openai-messages
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from recalld.chunkers.decode import decode_text
from recalld.chunkers.formats.agent import is_agent_event, parse_agent
from recalld.chunkers.formats.benchmarks import (
    is_locomo,
    is_longmemeval,
    parse_locomo,
    parse_longmemeval,
)
from recalld.chunkers.formats.messages import (
    is_message,
    parse_chatgpt,
    parse_claude,
    parse_messages,
)
from recalld.chunkers.formats.model import Conversation, Round, Session, Turn
from recalld.chunkers.options import DEFAULT_OPTIONS, ChunkOptions
from recalld.chunkers.secrets import redact
from recalld.errors import ParseError

__all__ = [
    "Conversation",
    "Round",
    "Session",
    "Turn",
    "detect_shape",
    "parse_conversations",
    "parse_conversations_text",
]

logger = logging.getLogger(__name__)

# How many values are looked at to recognise a shape.
_SNIFF = 50


def _has_messages(obj: object) -> bool:
    if not isinstance(obj, dict):
        return False
    messages = obj.get("messages", obj.get("conversations"))
    return isinstance(messages, list) and any(is_message(m) for m in messages[:_SNIFF])


_SHAPES: tuple[tuple[str, Callable[[object], bool]], ...] = (
    ("longmemeval", is_longmemeval),
    ("locomo", is_locomo),
    ("chatgpt-export", lambda o: isinstance(o, dict) and isinstance(o.get("mapping"), dict)),
    ("claude-export", lambda o: isinstance(o, dict) and isinstance(o.get("chat_messages"), list)),
    ("agent-jsonl", is_agent_event),
    ("openai-messages", lambda o: is_message(o) or _has_messages(o)),
)


def detect_shape(values: Sequence[object]) -> str | None:
    """Name the conversation format of a list of JSON values, or None if it is not one."""
    sample = [v for v in values[:_SNIFF] if isinstance(v, dict)]
    if not sample:
        return None
    votes = Counter(name for value in sample for name, matches in _SHAPES if matches(value))
    if not votes:
        return None
    # Ties go to the earlier, more specific shape.
    best = max(votes.values())
    return next(name for name, _ in _SHAPES if votes[name] == best)


def _read_json(name: str, text: str, notes: list[str]) -> list[object] | None:
    """The document's values: a JSON array's items, one object, or the JSONL lines."""
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    else:
        return whole if isinstance(whole, list) else [whole]
    values: list[object] = []
    bad: list[int] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            values.append(json.loads(line))
        except json.JSONDecodeError:
            bad.append(number)
    if not values:
        return None
    if bad:
        shown = ", ".join(map(str, bad[:10])) + (", ..." if len(bad) > 10 else "")
        plural = "s" if len(bad) > 1 else ""
        notes.append(f"{len(bad)} malformed line{plural} skipped (line{plural} {shown})")
        logger.info("%s: %d malformed JSONL lines skipped", name, len(bad))
    return values


def parse_conversations_text(name: str, text: str) -> tuple[list[Conversation], list[str]]:
    """Parse decoded text; see `parse_conversations`."""
    notes: list[str] = []
    stripped = text.lstrip()
    if not stripped or stripped[0] not in "[{":
        return [], notes
    values = _read_json(name, text, notes)
    if values is None:
        raise ParseError(
            f"{name} is neither JSON nor JSON lines; fix or remove the file",
            data={"path": name, "reason": "invalid JSON"},
        )
    shape = detect_shape(values)
    if shape is None:
        return [], notes
    document: Any = values
    stem = os.path.splitext(os.path.basename(name))[0] or "log"
    skipped: Counter[str] = Counter()
    if shape == "longmemeval":
        found = parse_longmemeval(document, stem, skipped)
    elif shape == "locomo":
        found = parse_locomo(document, stem)
    elif shape == "chatgpt-export":
        found = parse_chatgpt(document, stem, skipped)
    elif shape == "claude-export":
        found = parse_claude(document, stem, skipped)
    elif shape == "agent-jsonl":
        found = parse_agent(document, stem, skipped)
    else:
        found = parse_messages(document, stem, skipped)
    if skipped:
        left_out = ", ".join(f"{count} {role}" for role, count in sorted(skipped.items()))
        notes.append(f"messages left out by role: {left_out}")
    return found, notes


def parse_conversations(
    name: str, data: bytes, options: ChunkOptions = DEFAULT_OPTIONS
) -> tuple[list[Conversation], list[str]]:
    """Parse a conversation log of any supported format, its secrets redacted first
    (`options.redact`, as `chunk_file` does).

    The ingest layer calls this to run an LLM fact extractor on the rounds before
    `conversation_chunks` builds the chunks.

    Args:
        name: The file's name (its stem names conversations that carry no id).
        data: The file's bytes.
        options: Whether and how to redact.

    Returns:
        The conversations (empty if the content is not a conversation log) and notes on
        decoding and on skipped lines or messages.

    Raises:
        ParseError: The content is binary, or looks like JSON but nothing in it parses.
    """
    text, notes = decode_text(data, name)
    if options.redact:
        text, _ = redact(text, entropy=options.redact_entropy)
    conversations, more = parse_conversations_text(name, text)
    return conversations, notes + more
