"""Chat logs in the OpenAI `messages` shape and ChatGPT's `conversations.json` export.

OpenAI-style logs come as an object with `messages`, a list of such objects, a bare list of
`{role, content}` messages, or JSONL with one message (or one `{messages}` object) per line.
`content` may be a string or a list of parts (`{"type": "text", "text": ...}`); ShareGPT's
`{from, value}` messages are read the same way. System, developer and tool messages are left
out: they are instructions and machine output, not what was said.

A ChatGPT export is a list of conversations, each a tree of nodes (`mapping`) because edits
and regenerations branch it. The conversation as the user last saw it is the path from
`current_node` up to the root, which is what is read here. Claude's export (`uuid`, `name`,
`chat_messages: [{sender, text, uuid, created_at}]`) is a flat list and read as such.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from recalld.chunkers.formats.model import (
    Conversation,
    Turn,
    TurnIds,
    is_user,
    parse_time,
    speakers_of,
    split_sessions,
)

_ROLES = {
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "ai": "assistant",
    "gpt": "assistant",
    "model": "assistant",
    "bot": "assistant",
    "chatgpt": "assistant",
}
_NAMES = {"user": "User", "assistant": "Assistant"}
_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})
_TIME_KEYS = ("timestamp", "created_at", "create_time", "time", "created", "date")


def content_text(content: object) -> str:
    """The text of a message's content: a string, a list of parts, or `{parts: [...]}`."""
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, Mapping):
        if isinstance(content.get("parts"), list):
            return content_text(content["parts"])
        text = content.get("text")
        return text.strip() if isinstance(text, str) else ""
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and part.get("type", "text") in _TEXT_PARTS:
                text = part.get("text")
                if isinstance(text, str):
                    parts.append(text)
        return "\n".join(p.strip() for p in parts if p.strip())
    return ""


def is_message(obj: object) -> bool:
    """Whether `obj` looks like one chat message."""
    return isinstance(obj, Mapping) and (
        ("role" in obj and "content" in obj) or ("from" in obj and "value" in obj)
    )


def message_turns(messages: Sequence[object], skipped: Counter[str]) -> list[Turn]:
    """Turn OpenAI-style messages into turns, counting what was left out by role."""
    ids = TurnIds()
    turns: list[Turn] = []
    for message in messages:
        if not isinstance(message, Mapping):
            skipped["non-message"] += 1
            continue
        raw_role = str(message.get("role", message.get("from", message.get("sender", ""))))
        raw_role = raw_role.lower()
        role = _ROLES.get(raw_role)
        if role is None:
            skipped[raw_role or "unknown"] += 1
            continue
        text = content_text(message.get("content", message.get("value")))
        if not text and isinstance(message.get("text"), str):
            text = message["text"].strip()
        if not text:
            continue
        name = message.get("name")
        time = next((t for k in _TIME_KEYS if (t := parse_time(message.get(k))) is not None), None)
        turns.append(
            Turn(
                speaker=name if isinstance(name, str) and name else _NAMES[role],
                role=role,
                text=text,
                id=ids.make(role, text, message.get("id", message.get("uuid"))),
                time=time,
            )
        )
    return turns


def _conversation(
    conv_id: str, turns: list[Turn], title: object, fmt: str = "openai-messages"
) -> Conversation | None:
    if not turns:
        return None
    sessions = split_sessions(turns, is_user, title if isinstance(title, str) else None)
    return Conversation(conv_id, fmt, sessions, speakers_of(sessions))


def parse_messages(obj: Any, stem: str, skipped: Counter[str]) -> list[Conversation]:
    """Read any of the OpenAI-style shapes (see the module docstring)."""
    if isinstance(obj, Mapping):
        obj = [obj]
    if not isinstance(obj, list):
        return []
    if any(is_message(m) for m in obj[:50]):
        found = _conversation(stem, message_turns(obj, skipped), None)
        return [found] if found else []
    conversations: list[Conversation] = []
    for index, item in enumerate(obj):
        if not isinstance(item, Mapping):
            continue
        messages = item.get("messages", item.get("conversations"))
        if not isinstance(messages, list):
            continue
        given = item.get("id", item.get("conversation_id"))
        fallback = stem if len(obj) == 1 else f"{stem}#{index + 1}"
        conv_id = str(given) if isinstance(given, str | int) and str(given) else fallback
        found = _conversation(conv_id, message_turns(messages, skipped), item.get("title"))
        if found:
            conversations.append(found)
    return conversations


def _path_to(mapping: Mapping[str, Any], leaf: object) -> list[str]:
    """Node ids from the root down to `leaf` (the branch the user last saw)."""
    if not isinstance(leaf, str) or leaf not in mapping:
        # No current node: take the last-created leaf.
        leaves = [k for k, v in mapping.items() if isinstance(v, Mapping) and not v.get("children")]
        leaf = leaves[-1] if leaves else None
    path: list[str] = []
    seen: set[str] = set()
    node_id = leaf
    while isinstance(node_id, str) and node_id in mapping and node_id not in seen:
        seen.add(node_id)
        path.append(node_id)
        node = mapping[node_id]
        node_id = node.get("parent") if isinstance(node, Mapping) else None
    path.reverse()
    return path


def _chatgpt_turn(node_id: str, node: object, ids: TurnIds, skipped: Counter[str]) -> Turn | None:
    message = node.get("message") if isinstance(node, Mapping) else None
    if not isinstance(message, Mapping):
        return None
    author = message.get("author")
    raw_role = str(author.get("role", "")) if isinstance(author, Mapping) else ""
    role = _ROLES.get(raw_role.lower())
    metadata = message.get("metadata")
    if isinstance(metadata, Mapping) and metadata.get("is_visually_hidden_from_conversation"):
        return None
    if role is None:
        skipped[raw_role or "unknown"] += 1
        return None
    content = message.get("content")
    if isinstance(content, Mapping) and content.get("content_type") not in (
        None,
        "text",
        "multimodal_text",
        "code",
    ):
        return None  # reasoning traces, browsing results, user profile context
    text = content_text(content)
    if not text:
        return None
    return Turn(
        speaker=_NAMES[role],
        role=role,
        text=text,
        id=ids.make(role, text, message.get("id") or node_id),
        time=parse_time(message.get("create_time")),
    )


def parse_chatgpt(obj: Any, stem: str, skipped: Counter[str]) -> list[Conversation]:
    """Read a ChatGPT export (`conversations.json`): one conversation per item."""
    items = obj if isinstance(obj, list) else [obj]
    conversations: list[Conversation] = []
    for index, item in enumerate(items):
        if not isinstance(item, Mapping) or not isinstance(item.get("mapping"), Mapping):
            continue
        mapping = item["mapping"]
        ids = TurnIds()
        turns = [
            turn
            for node_id in _path_to(mapping, item.get("current_node"))
            if (turn := _chatgpt_turn(node_id, mapping[node_id], ids, skipped)) is not None
        ]
        given = item.get("id", item.get("conversation_id"))
        conv_id = str(given) if isinstance(given, str) and given else f"{stem}#{index + 1}"
        found = _conversation(conv_id, turns, item.get("title"), "chatgpt-export")
        if found:
            conversations.append(found)
    return conversations


def parse_claude(obj: Any, stem: str, skipped: Counter[str]) -> list[Conversation]:
    """Read a Claude export: one conversation per item with `chat_messages`."""
    items = obj if isinstance(obj, list) else [obj]
    conversations: list[Conversation] = []
    for index, item in enumerate(items):
        if not isinstance(item, Mapping) or not isinstance(item.get("chat_messages"), list):
            continue
        given = item.get("uuid", item.get("id"))
        conv_id = str(given) if isinstance(given, str) and given else f"{stem}#{index + 1}"
        turns = message_turns(item["chat_messages"], skipped)
        found = _conversation(conv_id, turns, item.get("name"), "claude-export")
        if found:
            conversations.append(found)
    return conversations
