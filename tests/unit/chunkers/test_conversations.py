"""Conversation logs: shape detection, parsing, and session/round/fact chunks."""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from recalld.chunkers import (
    ChunkOptions,
    chunk_file,
    conversation_chunks,
    parse_conversations,
)
from recalld.errors import ParseError
from recalld.types import ChunkDraft

# The development data sits beside the checkout (../shared), never inside it.
LOCOMO_DEV = Path(__file__).resolve().parents[4] / "shared" / "data" / "locomo" / "locomo_dev.json"


def ts(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def by_granularity(chunks: list[ChunkDraft]) -> dict[str, list[ChunkDraft]]:
    out: dict[str, list[ChunkDraft]] = {"session": [], "round": [], "fact": []}
    for chunk in chunks:
        out[chunk.granularity].append(chunk)
    return out


def check_tree(chunks: list[ChunkDraft]) -> None:
    """Keys are unique and every parent key names an earlier chunk of the right level."""
    keys = [c.key for c in chunks]
    assert len(keys) == len(set(keys))
    level = {c.key: c.granularity for c in chunks}
    for chunk in chunks:
        assert chunk.kind == "conversation"
        if chunk.granularity == "session":
            assert chunk.parent_key is None
        elif chunk.granularity == "round":
            assert chunk.parent_key is not None and level[chunk.parent_key] == "session"
        else:
            assert chunk.parent_key is not None and level[chunk.parent_key] == "round"
            assert chunk.meta["extractor"] in ("heuristic", "llm")
        for field in ("conversation_id", "session_id", "speakers", "turn_ids"):
            assert field in chunk.meta


OPENAI = {
    "id": "trip-planning",
    "title": "Lisbon trip",
    "messages": [
        {"role": "system", "content": "You are a helpful travel assistant."},
        {
            "role": "user",
            "content": "I moved to Lisbon in March. Can you suggest quiet cafés near Alfama?",
            "timestamp": "2024-03-10T09:00:00Z",
        },
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Try Café Tati and Pois Café."}],
            "timestamp": "2024-03-10T09:00:05Z",
        },
        {
            "role": "user",
            "content": "Thanks! My sister Ana visits next month and she loves fado.",
            "timestamp": "2024-03-10T09:02:00Z",
        },
        {"role": "assistant", "content": None, "tool_calls": [{"id": "x"}]},
        {"role": "tool", "content": '{"venues": []}'},
        {"role": "assistant", "content": "Clube de Fado is a classic.", "timestamp": 1710061330},
    ],
}


def test_openai_messages_object() -> None:
    result = chunk_file("chat.json", json.dumps(OPENAI).encode())
    assert (result.kind, result.format) == ("conversation", "openai-messages")
    assert "messages left out by role: 1 system, 1 tool" in result.notes
    check_tree(result.chunks)
    levels = by_granularity(result.chunks)
    assert len(levels["session"]) == 1 and len(levels["round"]) == 2
    session = levels["session"][0]
    assert session.text.startswith("Lisbon trip \u2014 10 March 2024, 9:00 am\n")
    assert "User: I moved to Lisbon in March." in session.text
    assert "Assistant: Try Café Tati" in session.text
    assert session.event_time == ts("2024-03-10T09:00:00")
    assert session.key == "trip-planning/s:" + session.meta["session_id"]
    facts = [c.text for c in levels["fact"]]
    assert "User moved to Lisbon in March." in facts
    assert any(f.startswith("User's sister Ana visits next month (April 2024)") for f in facts)
    assert not any("cafés near Alfama" in f for f in facts)  # a question is not a fact
    assert all(c.meta["extractor"] == "heuristic" for c in levels["fact"])


def test_openai_message_list_and_jsonl_agree() -> None:
    messages = OPENAI["messages"]
    as_list = chunk_file("chat.json", json.dumps(messages).encode())
    as_lines = chunk_file("chat.jsonl", "\n".join(json.dumps(m) for m in messages).encode())
    assert as_list.format == as_lines.format == "openai-messages"
    assert [c.text for c in as_list.chunks] == [c.text for c in as_lines.chunks]
    assert [c.key for c in as_list.chunks] == [c.key for c in as_lines.chunks]


def test_malformed_jsonl_lines_are_skipped_and_reported() -> None:
    lines = [json.dumps(m) for m in OPENAI["messages"]]
    lines.insert(2, '{"role": "user", "content": "cut off')
    lines.insert(5, "not json at all")
    result = chunk_file("chat.jsonl", "\n".join(lines).encode())
    assert "2 malformed lines skipped (lines 3, 6)" in result.notes
    assert len(by_granularity(result.chunks)["round"]) == 2


def test_nothing_parses_is_a_parse_error() -> None:
    with pytest.raises(ParseError) as info:
        chunk_file("chat.jsonl", b'{"role": "user"\n{broken\n')
    assert info.value.data == {"path": "chat.jsonl", "reason": "invalid JSON"}


def test_json_that_is_not_a_log_is_chunked_as_text() -> None:
    result = chunk_file("package.json", b'{"name": "demo", "version": "1.0.0"}')
    assert (result.kind, result.format) == ("text", "json")
    assert "demo" in result.chunks[0].text


def test_growing_log_keeps_its_keys() -> None:
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"Message {i} about pottery."}
        for i in range(10)
    ]
    before = chunk_file("log.jsonl", "\n".join(json.dumps(m) for m in messages[:6]).encode())
    after = chunk_file("log.jsonl", "\n".join(json.dumps(m) for m in messages).encode())
    old = {c.key for c in before.chunks if c.granularity == "round"}
    new = {c.key for c in after.chunks if c.granularity == "round"}
    assert old < new


def agent_events() -> list[dict[str, object]]:
    session = "5e1c0de0-0000-4000-8000-000000000001"
    return [
        {"type": "summary", "summary": "Fix the flaky upload test", "leafUuid": "u4"},
        {
            "type": "user",
            "sessionId": session,
            "uuid": "u1",
            "timestamp": "2025-01-05T10:00:00.000Z",
            "message": {"role": "user", "content": "The upload test fails on CI. I use pytest 8."},
        },
        {
            "type": "assistant",
            "sessionId": session,
            "uuid": "u2",
            "timestamp": "2025-01-05T10:00:03.000Z",
            "message": {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Let me look."},
                    {"type": "text", "text": "I'll run the test first."},
                    {
                        "type": "tool_use",
                        "id": "t1",
                        "name": "Bash",
                        "input": {"command": "pytest"},
                    },
                ],
            },
        },
        {
            "type": "user",
            "sessionId": session,
            "uuid": "u3",
            "timestamp": "2025-01-05T10:00:09.000Z",
            "message": {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "1 failed"}],
            },
        },
        {
            "type": "assistant",
            "sessionId": session,
            "uuid": "u4",
            "timestamp": "2025-01-05T10:01:00.000Z",
            "message": {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "The test sleeps; I replaced it with an Event."}
                ],
            },
        },
        {
            "type": "user",
            "sessionId": session,
            "uuid": "u5",
            "isMeta": True,
            "timestamp": "2025-01-05T10:02:00.000Z",
            "message": {"role": "user", "content": "<command-name>/clear</command-name>"},
        },
    ]


def test_agent_jsonl_transcript() -> None:
    lines = [json.dumps(e) for e in agent_events()]
    lines.insert(3, '{"type": "assistant", "message": ')
    result = chunk_file("5e1c0de0.jsonl", "\n".join(lines).encode())
    assert (result.kind, result.format) == ("conversation", "agent-jsonl")
    assert "1 malformed line skipped (line 4)" in result.notes
    check_tree(result.chunks)
    levels = by_granularity(result.chunks)
    # The tool result is not a new question: one round holds everything.
    assert [c.key for c in levels["round"]] == ["5e1c0de0/r:u1"]
    round_text = levels["round"][0].text
    assert "I'll run the test first." in round_text and "replaced it with an Event" in round_text
    assert "1 failed" not in round_text and "Let me look" not in round_text
    assert levels["session"][0].text.startswith("Fix the flaky upload test \u2014 5 January 2025")
    assert levels["round"][0].meta["turn_ids"] == ["u1", "u2", "u4"]
    assert levels["round"][0].event_time == ts("2025-01-05T10:00:00")
    assert "User uses pytest 8." in [c.text for c in levels["fact"]]


def test_gemini_cli_transcript() -> None:
    # Gemini CLI's JSONL chat recording: a metadata line, then one record per message.
    records = [
        {"sessionId": "g-42", "projectHash": "ab12", "startTime": "2026-11-26T09:00:00.000Z"},
        {"id": "m1", "timestamp": "2026-11-26T09:00:01.000Z", "type": "user",
         "content": [{"text": "Why is the osprey build slow?"}]},
        {"id": "m2", "timestamp": "2026-11-26T09:00:05.000Z", "type": "gemini",
         "content": "The osprey build recompiles protobufs on every run."},
        {"id": "m3", "timestamp": "2026-11-26T09:00:06.000Z", "type": "info", "content": "saved"},
        {"$set": {"summary": "osprey build"}},
    ]  # fmt: skip
    result = chunk_file("session-2026.jsonl", "\n".join(json.dumps(r) for r in records).encode())
    assert (result.kind, result.format) == ("conversation", "agent-jsonl")
    levels = by_granularity(result.chunks)
    [round_] = levels["round"]
    assert "Why is the osprey build slow?" in round_.text
    assert "recompiles protobufs" in round_.text and "saved" not in round_.text
    assert round_.event_time == ts("2026-11-26T09:00:01")


def chatgpt_export() -> list[dict[str, object]]:
    def node(
        nid: str, parent: str | None, children: list[str], role: str | None, text: str
    ) -> dict[str, object]:
        message: dict[str, object] | None = None
        if role:
            message = {
                "id": nid,
                "author": {"role": role},
                "create_time": 1700000000 + len(nid),
                "content": {"content_type": "text", "parts": [text]},
            }
        return {"id": nid, "parent": parent, "children": children, "message": message}

    mapping = {
        "root": node("root", None, ["sys"], None, ""),
        "sys": node("sys", "root", ["q1"], "system", ""),
        "q1": node("q1", "sys", ["a1"], "user", "I'm training for the Berlin marathon."),
        "a1": node("a1", "q1", ["q2-old", "q2"], "assistant", "Great, when is the race?"),
        "q2-old": node("q2-old", "a1", [], "user", "It is in May."),
        "q2": node("q2", "a1", ["a2"], "user", "The race is on 29 September."),
        "a2": node("a2", "q2", [], "assistant", "That gives you about 16 weeks."),
    }
    return [
        {
            "id": "c-123",
            "title": "Marathon plan",
            "create_time": 1700000000.5,
            "current_node": "a2",
            "mapping": mapping,
        }
    ]


def test_chatgpt_export_follows_the_current_branch() -> None:
    result = chunk_file("conversations.json", json.dumps(chatgpt_export()).encode())
    assert (result.kind, result.format) == ("conversation", "chatgpt-export")
    check_tree(result.chunks)
    levels = by_granularity(result.chunks)
    assert [c.key for c in levels["round"]] == ["c-123/r:q1", "c-123/r:q2"]
    session = levels["session"][0]
    assert session.text.startswith("Marathon plan")
    assert "29 September" in session.text and "It is in May" not in session.text
    assert session.meta["conversation_id"] == "c-123"
    assert "User is training for the Berlin marathon." in [c.text for c in levels["fact"]]


LOCOMO = [
    {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Caroline",
            "speaker_b": "Melanie",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Caroline", "dia_id": "D1:1", "text": "Hey Mel! How have you been?"},
                {
                    "speaker": "Melanie",
                    "dia_id": "D1:2",
                    "text": "Good! I painted a lake sunrise last year. It's my favorite.",
                },
                {
                    "speaker": "Caroline",
                    "dia_id": "D1:3",
                    "text": "I went to a LGBTQ support group yesterday and it was powerful.",
                    "blip_caption": "a photo of a rainbow flag on a wall",
                },
                {"speaker": "Melanie", "dia_id": "D1:4", "text": "Wow, that's great!"},
            ],
            "session_2_date_time": "10:37 am on 27 June, 2023",
            "session_2": [
                {"speaker": "Melanie", "dia_id": "D2:1", "text": "I took the kids camping."},
                {"speaker": "Caroline", "dia_id": "D2:2", "text": "Fun! Where did you go?"},
                {"speaker": "Melanie", "dia_id": "D2:3", "text": "We went to Big Sur."},
            ],
        },
        "qa": [{"question": "When did Caroline go?", "answer": "7 May 2023", "evidence": ["D1:3"]}],
    }
]


def test_locomo_small() -> None:
    result = chunk_file("locomo.json", json.dumps(LOCOMO).encode())
    assert (result.kind, result.format) == ("conversation", "locomo")
    check_tree(result.chunks)
    levels = by_granularity(result.chunks)
    assert [c.key for c in levels["session"]] == ["conv-x/s:session_1", "conv-x/s:session_2"]
    first = levels["session"][0]
    assert first.text.startswith("Session 1 \u2014 8 May 2023, 1:56 pm\nCaroline: Hey Mel!")
    assert first.event_time == ts("2023-05-08T13:56:00")
    assert first.meta["dia_ids"] == ["D1:1", "D1:2", "D1:3", "D1:4"]
    assert first.meta["speakers"] == ["Caroline", "Melanie"]
    # Rounds open with the session opener's turns: (D1:1, D1:2), (D1:3, D1:4); session 2 is
    # opened by Melanie.
    assert [c.meta["dia_ids"] for c in levels["round"]] == [
        ["D1:1", "D1:2"],
        ["D1:3", "D1:4"],
        ["D2:1", "D2:2"],
        ["D2:3"],
    ]
    facts = {c.text: c for c in levels["fact"]}
    assert "Caroline went to a LGBTQ support group yesterday (7 May 2023)" in " ".join(facts)
    assert "Caroline shared a photo of a rainbow flag on a wall." in facts
    assert "Melanie painted a lake sunrise last year (2022)." in facts
    assert "Melanie took the kids camping." in facts
    assert "Melanie and others went to Big Sur." in facts
    assert not any("great" in f.lower() for f in facts)
    camping = facts["Melanie took the kids camping."]
    assert camping.parent_key == "conv-x/r:D2:1"
    assert camping.meta["dia_ids"] == ["D2:1", "D2:2"]
    assert camping.meta["speakers"] == ["Melanie"]
    assert camping.event_time == ts("2023-06-27T10:37:00")


def test_llm_facts_replace_the_heuristic() -> None:
    conversations, notes = parse_conversations("locomo.json", json.dumps(LOCOMO).encode())
    assert notes == []
    (conv,) = conversations
    assert [r.id for s in conv.sessions for r in s.rounds] == ["D1:1", "D1:3", "D2:1", "D2:3"]
    chunks = conversation_chunks(conv, facts={"D1:3": ["Caroline attended a support group."]})
    facts = [c for c in chunks if c.granularity == "fact"]
    assert [(f.text, f.parent_key, f.meta["extractor"]) for f in facts] == [
        ("Caroline attended a support group.", "conv-x/r:D1:3", "llm")
    ]
    none = conversation_chunks(conv, ChunkOptions(facts=False))
    assert not [c for c in none if c.granularity == "fact"]


def test_long_session_is_split_between_rounds() -> None:
    turns = [
        {"speaker": "A" if i % 2 == 0 else "B", "dia_id": f"D1:{i + 1}", "text": f"Turn {i} " * 12}
        for i in range(30)
    ]
    sample = {
        "sample_id": "long",
        "conversation": {"speaker_a": "A", "speaker_b": "B", "session_1": turns},
    }
    result = chunk_file("long.json", json.dumps(sample).encode(), ChunkOptions(max_tokens=120))
    check_tree(result.chunks)
    levels = by_granularity(result.chunks)
    keys = [c.key for c in levels["session"]]
    assert keys[0] == "long/s:session_1" and keys[1] == "long/s:session_1#p2"
    assert all(c.text.startswith("Session 1\n") for c in levels["session"])
    covered = [d for c in levels["session"] for d in c.meta["dia_ids"]]
    assert covered == [t["dia_id"] for t in turns]
    for rnd in levels["round"]:
        parent = next(c for c in levels["session"] if c.key == rnd.parent_key)
        assert rnd.meta["dia_ids"][0] in parent.meta["dia_ids"]


LONGMEMEVAL = [
    {
        "question_id": "q-001",
        "question_type": "single-session-user",
        "question": "What breed is my dog?",
        "answer": "A beagle",
        "haystack_session_ids": ["s-a", "s-b"],
        "haystack_dates": ["2023/05/20 (Sat) 02:21", "2023/05/22 (Mon) 18:05"],
        "haystack_sessions": [
            [
                {"role": "user", "content": "I adopted a beagle named Max last week."},
                {"role": "assistant", "content": "Congratulations! Beagles are friendly."},
            ],
            [
                {"role": "user", "content": "Thanks! Can you recommend a dog food?"},
                {"role": "assistant", "content": "Look for one with real meat first."},
            ],
        ],
        "answer_session_ids": ["s-a"],
    }
]


def test_longmemeval() -> None:
    result = chunk_file("longmemeval_s.json", json.dumps(LONGMEMEVAL).encode())
    assert (result.kind, result.format) == ("conversation", "longmemeval")
    check_tree(result.chunks)
    levels = by_granularity(result.chunks)
    assert [c.meta["session_id"] for c in levels["session"]] == ["s-a", "s-b"]
    assert levels["session"][0].event_time == ts("2023-05-20T02:21:00")
    assert levels["round"][0].key.startswith("q-001/r:s-a:h")
    facts = [c.text for c in levels["fact"]]
    assert facts == ["User adopted a beagle named Max last week (the week before 20 May 2023)."]


CLAUDE_EXPORT = [
    {
        "uuid": "9b1f",
        "name": "Garden plans",
        "created_at": "2024-04-02T08:00:00Z",
        "chat_messages": [
            {
                "uuid": "m1",
                "sender": "human",
                "text": "I grow tomatoes on my balcony in Porto.",
                "content": [{"type": "text", "text": "I grow tomatoes on my balcony in Porto."}],
                "created_at": "2024-04-02T08:00:00Z",
            },
            {
                "uuid": "m2",
                "sender": "assistant",
                "text": "Cherry tomatoes suit balconies well.",
                "created_at": "2024-04-02T08:00:04Z",
            },
        ],
    }
]


def test_claude_export() -> None:
    result = chunk_file("conversations.json", json.dumps(CLAUDE_EXPORT).encode())
    assert (result.kind, result.format) == ("conversation", "claude-export")
    check_tree(result.chunks)
    levels = by_granularity(result.chunks)
    assert [c.key for c in levels["round"]] == ["9b1f/r:m1"]
    assert levels["session"][0].text.startswith("Garden plans \u2014 2 April 2024, 8:00 am")
    assert [c.text for c in levels["fact"]] == ["User grows tomatoes on User's balcony in Porto."]


def test_every_shape_is_detected_once() -> None:
    shapes = {
        "a.json": (json.dumps(OPENAI), "openai-messages"),
        "b.jsonl": ("\n".join(json.dumps(e) for e in agent_events()), "agent-jsonl"),
        "c.json": (json.dumps(chatgpt_export()), "chatgpt-export"),
        "d.json": (json.dumps(LOCOMO[0]), "locomo"),
        "e.json": (json.dumps(LONGMEMEVAL), "longmemeval"),
        "g.json": (json.dumps(CLAUDE_EXPORT), "claude-export"),
        "f.jsonl": (
            "\n".join(json.dumps({"messages": OPENAI["messages"]}) for _ in range(2)),
            "openai-messages",
        ),
    }
    for name, (text, fmt) in shapes.items():
        conversations, _ = parse_conversations(name, text.encode())
        assert conversations and {c.format for c in conversations} == {fmt}, name
    two, _ = parse_conversations("f.jsonl", shapes["f.jsonl"][0].encode())
    assert [c.id for c in two] == ["f#1", "f#2"]


@pytest.mark.slow
@pytest.mark.skipif(not LOCOMO_DEV.exists(), reason="LoCoMo dev split not available")
def test_locomo_dev_file() -> None:
    data = LOCOMO_DEV.read_bytes()
    result = chunk_file("locomo_dev.json", data)
    assert (result.kind, result.format) == ("conversation", "locomo")
    check_tree(result.chunks)
    counts = Counter(c.granularity for c in result.chunks)
    samples = json.loads(data)
    sessions = sum(
        1
        for s in samples
        for k, v in s["conversation"].items()
        if k.startswith("session_") and isinstance(v, list)
    )
    assert counts["session"] >= sessions
    assert counts["round"] > 1000
    # The heuristic yields tens of facts per session.
    assert counts["fact"] >= 10 * sessions
    covered: dict[str, set[str]] = {}
    for chunk in result.chunks:
        assert chunk.event_time is not None
        if chunk.granularity == "round":
            covered.setdefault(chunk.meta["conversation_id"], set()).update(chunk.meta["dia_ids"])
    # Evidence strings sometimes hold two ids ("D8:6; D9:17").
    evidence = {
        (s["sample_id"], e)
        for s in samples
        for q in s["qa"]
        for field in q.get("evidence", [])
        for e in re.split(r"[;,\s]+", field)
        if e
    }
    turns = {
        (s["sample_id"], t["dia_id"])
        for s in samples
        for k, v in s["conversation"].items()
        if k.startswith("session_") and isinstance(v, list)
        for t in v
    }
    # Three evidence ids in the file name no turn at all ("D", "D:11:26", a D10:19 that the
    # session does not have); every other one must be covered by a round chunk.
    real = evidence & turns
    assert len(evidence - real) <= 3
    assert all(e in covered[conv] for conv, e in real)


LOCOMO_QA = {
    "sample_id": "conv-w",
    "conversation": {
        "speaker_a": "Ana",
        "speaker_b": "Ben",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ana", "dia_id": "D1:1", "text": "I finally adopted a dog."},
            {"speaker": "Ben", "dia_id": "D1:2", "text": "Great! What did you name it?"},
            {"speaker": "Ana", "dia_id": "D1:3", "text": "Biscuit, after my favourite snack."},
            {"speaker": "Ben", "dia_id": "D1:4", "text": "Cute. I bought a cello."},
        ],
    },
    "qa": [],
}


def test_turn_windows_keep_a_question_with_the_answer_that_opens_the_next_round() -> None:
    data = json.dumps(LOCOMO_QA).encode()
    plain = chunk_file("locomo.json", data)
    assert not [c for c in plain.chunks if c.granularity == "window"]  # off by default
    result = chunk_file("locomo.json", data, ChunkOptions(turn_windows=True))
    rounds = [c for c in result.chunks if c.granularity == "round"]
    windows = [c for c in result.chunks if c.granularity == "window"]
    # Rounds open with the session opener (Ana): Ben's question and Ana's answer are split.
    assert [c.meta["dia_ids"] for c in rounds] == [["D1:1", "D1:2"], ["D1:3", "D1:4"]]
    # One window per turn, each the turn with the one before it; the first turn alone.
    assert [c.meta["dia_ids"] for c in windows] == [
        ["D1:1"],
        ["D1:1", "D1:2"],
        ["D1:2", "D1:3"],
        ["D1:3", "D1:4"],
    ]
    question_and_answer = windows[2]
    assert question_and_answer.text == (
        "[8 May 2023, 1:56 pm]\nBen: Great! What did you name it?\n"
        "Ana: Biscuit, after my favourite snack."
    )
    assert question_and_answer.key == "conv-w/w:D1:3"
    assert question_and_answer.meta["speakers"] == ["Ben", "Ana"]
    # Its parent is the round that holds its own turn; the rest of the tree is unchanged.
    assert question_and_answer.parent_key == rounds[1].key
    assert [c.key for c in result.chunks if c.granularity != "window"] == [
        c.key for c in plain.chunks
    ]
    assert question_and_answer.event_time == rounds[1].event_time
