"""The JSONL transcripts that coding agents write, one event per line.

Three dialects are read. Claude Code style: `{type, message: {role, content}, uuid, sessionId,
timestamp}`, where `content` is a string or a list of blocks. Codex CLI style: `{type:
"response_item", payload: {type: "message", role, content}, timestamp}` with a `session_meta`
event naming the session. Gemini CLI style: a `{sessionId, projectHash}` line, then `{id,
timestamp, type: "user" | "gemini" | ..., content}` records. Only text blocks are kept:
tool calls, tool results and thinking are machine traffic, often huge, and a user event that
carries only tool results is not a new question. Harness boilerplate (command echoes,
environment context) is left out too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from recalld.chunkers.formats.messages import content_text
from recalld.chunkers.formats.model import (
    Conversation,
    Session,
    Turn,
    TurnIds,
    build_rounds,
    is_user,
    parse_time,
    speakers_of,
)

# Text the agent harness injects into the user's side of the log.
_BOILERPLATE = (
    "<command-name>",
    "<command-message>",
    "<local-command-",
    "<environment_context>",
    "<user_instructions>",
    "Caveat: The messages below were generated",
)


def is_agent_event(obj: object) -> bool:
    """Whether `obj` looks like one event of an agent transcript."""
    if not isinstance(obj, Mapping) or not isinstance(obj.get("type"), str):
        return False
    if isinstance(obj.get("message"), Mapping):
        return "sessionId" in obj or "uuid" in obj or "timestamp" in obj
    if obj["type"] in _GEMINI_ROLES:
        return "id" in obj and "content" in obj
    payload = obj.get("payload")
    return isinstance(payload, Mapping) and "timestamp" in obj


# Gemini CLI's chat recording (JSONL since 2026: a `{sessionId, projectHash, ...}` line, then
# `{id, timestamp, type: user | gemini | info | error, content}` records; google-gemini/gemini-cli
# packages/core/src/services/chatRecordingService.ts): its `type` is the speaker.
_GEMINI_ROLES = {"user": "user", "gemini": "assistant"}


def _message(event: Mapping[str, Any]) -> Mapping[str, Any] | None:
    message = event.get("message")
    if isinstance(message, Mapping):
        return message
    role = _GEMINI_ROLES.get(str(event.get("type")))
    if role is not None and "content" in event and "id" in event:
        return {"role": role, "content": event["content"], "id": event["id"]}
    payload = event.get("payload")
    # Codex logs each message twice (response_item and event_msg); read one of them.
    if (
        event.get("type") == "response_item"
        and isinstance(payload, Mapping)
        and payload.get("type") == "message"
    ):
        return payload
    return None


def parse_agent(events: Sequence[object], stem: str, skipped: Counter[str]) -> list[Conversation]:
    """Read an agent transcript: one conversation, one session per `sessionId`."""
    by_session: dict[str, list[Turn]] = {}
    ids = TurnIds()
    current = "main"
    title: str | None = None
    for event in events:
        if not isinstance(event, Mapping):
            continue
        kind = event.get("type")
        payload = event.get("payload")
        if kind == "summary" and isinstance(event.get("summary"), str):
            title = title or event["summary"]
            continue
        if kind == "session_meta" and isinstance(payload, Mapping) and payload.get("id"):
            current = str(payload["id"])
            continue
        if kind is None and isinstance(event.get("sessionId"), str):
            current = event["sessionId"]  # Gemini CLI's first line names the session
            continue
        message = _message(event)
        if message is None or event.get("isMeta"):
            continue
        role = str(message.get("role", kind or "")).lower()
        if role not in ("user", "assistant"):
            skipped[role or "unknown"] += 1
            continue
        text = content_text(message.get("content"))
        if not text or text.startswith(_BOILERPLATE):
            continue
        session = event.get("sessionId", event.get("session_id", current))
        by_session.setdefault(str(session), []).append(
            Turn(
                speaker="User" if role == "user" else "Assistant",
                role=role,
                text=text,
                id=ids.make(role, text, event.get("uuid", message.get("id"))),
                time=parse_time(event.get("timestamp")),
            )
        )
    sessions = tuple(
        Session(
            id=session_id,
            time=next((t.time for t in turns if t.time is not None), None),
            rounds=build_rounds(turns, is_user),
            title=title,
        )
        for session_id, turns in by_session.items()
    )
    if not sessions:
        return []
    return [Conversation(stem, "agent-jsonl", sessions, speakers_of(sessions))]
