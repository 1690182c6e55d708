"""The LoCoMo and LongMemEval benchmark shapes.

LoCoMo: a list of samples (or one), each `{sample_id, conversation: {speaker_a, speaker_b,
session_N: [{speaker, dia_id, text, blip_caption?}], session_N_date_time: "1:56 pm on 8 May,
2023"}, qa, ...}`. Both speakers are people, so both get `role="user"`, and rounds open with
the session opener's turns (see `formats.model`). A shared photo survives only as its
caption, which is kept in the turn's text: it is often what a later question asks about.

LongMemEval: a list of items `{question_id, haystack_sessions: [[{role, content}]],
haystack_dates, haystack_session_ids, ...}`; each item becomes one conversation, since the
benchmark asks each question against its own haystack.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

from recalld.chunkers.formats.messages import message_turns
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

_SESSION_KEY = re.compile(r"session_(\d+)")


def is_locomo(obj: object) -> bool:
    """Whether `obj` looks like one LoCoMo sample."""
    if not isinstance(obj, Mapping) or not isinstance(obj.get("conversation"), Mapping):
        return False
    conversation = obj["conversation"]
    return "speaker_a" in conversation or any(_SESSION_KEY.fullmatch(k) for k in conversation)


def is_longmemeval(obj: object) -> bool:
    """Whether `obj` looks like one LongMemEval item."""
    return isinstance(obj, Mapping) and isinstance(obj.get("haystack_sessions"), list)


def _locomo_session(number: int, raw: list[Any], date: object, ids: TurnIds) -> Session:
    turns: list[Turn] = []
    for item in raw:
        if not isinstance(item, Mapping) or not isinstance(item.get("text"), str):
            continue
        text = item["text"].strip()
        caption = item.get("blip_caption")
        if isinstance(caption, str) and caption.strip():
            text = f"{text} [shares {caption.strip()}]"
        if not text:
            continue
        turns.append(
            Turn(
                speaker=str(item.get("speaker") or "?"),
                role="user",
                text=text,
                id=ids.make("user", text, item.get("dia_id")),
            )
        )
    time = parse_time(date)
    opener = turns[0].speaker if turns else ""
    return Session(
        id=f"session_{number}",
        time=time,
        rounds=build_rounds(turns, lambda t: t.speaker == opener, time),
        title=f"Session {number}",
    )


def parse_locomo(obj: Any, stem: str) -> list[Conversation]:
    """Read LoCoMo samples; one conversation per `sample_id`."""
    samples = obj if isinstance(obj, list) else [obj]
    conversations: list[Conversation] = []
    for index, sample in enumerate(samples):
        if not is_locomo(sample):
            continue
        conversation = sample["conversation"]
        numbers = sorted(
            int(m.group(1))
            for key, value in conversation.items()
            if (m := _SESSION_KEY.fullmatch(key)) and isinstance(value, list)
        )
        ids = TurnIds()
        sessions = tuple(
            session
            for n in numbers
            if (
                session := _locomo_session(
                    n, conversation[f"session_{n}"], conversation.get(f"session_{n}_date_time"), ids
                )
            ).rounds
        )
        named = [conversation.get(k) for k in ("speaker_a", "speaker_b")]
        speakers = dict.fromkeys(
            [*(s for s in named if isinstance(s, str)), *speakers_of(sessions)]
        )
        given = sample.get("sample_id")
        conv_id = str(given) if given else f"{stem}#{index + 1}"
        conversations.append(Conversation(conv_id, "locomo", sessions, tuple(speakers)))
    return conversations


def parse_longmemeval(obj: Any, stem: str, skipped: Counter[str]) -> list[Conversation]:
    """Read LongMemEval items; one conversation per `question_id`."""
    items = obj if isinstance(obj, list) else [obj]
    conversations: list[Conversation] = []
    for index, item in enumerate(items):
        if not is_longmemeval(item):
            continue
        dates = item.get("haystack_dates") or []
        names = item.get("haystack_session_ids") or []
        sessions: list[Session] = []
        for number, raw in enumerate(item["haystack_sessions"]):
            if not isinstance(raw, list):
                continue
            session_id = str(names[number]) if number < len(names) else f"s{number + 1}"
            # Turn ids are content hashes; the session id keeps them apart across sessions.
            turns = [
                Turn(t.speaker, t.role, t.text, f"{session_id}:{t.id}", t.time)
                for t in message_turns(raw, skipped)
            ]
            time = parse_time(dates[number]) if number < len(dates) else None
            if turns:
                sessions.append(Session(session_id, time, build_rounds(turns, is_user, time)))
        given = item.get("question_id")
        conv_id = str(given) if given else f"{stem}#{index + 1}"
        conversations.append(
            Conversation(conv_id, "longmemeval", tuple(sessions), speakers_of(sessions))
        )
    return conversations
