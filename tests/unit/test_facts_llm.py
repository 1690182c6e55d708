"""LLM fact extraction against a real OpenAI-compatible HTTP server on 127.0.0.1, directly and
through the ingest pipeline (real SQLite store, hash embedder)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from recalld.api import AsyncMemory
from recalld.chunkers import Conversation, parse_conversations
from recalld.config import Secret, Settings, load_settings
from recalld.embeddings.base import HashEmbedder
from recalld.embeddings.openai_compat import RetryPolicy
from recalld.errors import IngestError
from recalld.ingest.facts_llm import (
    CACHE_FILE,
    LLMFactExtractor,
    fact_extractor,
    parse_answer,
)
from recalld.ingest.llm_chat import UnusableAnswer
from recalld.ingest.pipeline import Ingestor
from recalld.types import Chunk, Filters
from tests.helpers.fake_openai import FakeOpenAI, Reply

FAST = RetryPolicy(max_retries=2, base_delay_s=0.01, max_delay_s=0.05)
TURNS = [
    ("I moved to Lisbon in March 2024.", "Lisbon is lovely."),
    ("I adopted a cat named Miso.", "Congratulations on Miso!"),
    ("My sister Ana is a marine biologist.", "That sounds fascinating."),
    ("I am learning Portuguese on Tuesdays.", "Boa sorte!"),
    ("I switched my team to Postgres last week.", "How did the migration go?"),
]


def chat_log(turns: list[tuple[str, str]] = TURNS) -> bytes:
    messages: list[dict[str, str]] = []
    for user, assistant in turns:
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    return json.dumps({"messages": messages}).encode()


def conversations(turns: list[tuple[str, str]] = TURNS) -> list[Conversation]:
    found, _ = parse_conversations("chat.json", chat_log(turns))
    return found


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
async def extractors(server: FakeOpenAI, tmp_path: Path) -> AsyncIterator[Any]:
    """Build extractors against the server (sharing a cache file); all closed after the test."""
    made: list[LLMFactExtractor] = []

    def build(**options: Any) -> LLMFactExtractor:
        options.setdefault("base_url", server.base_url)
        options.setdefault("retry", FAST)
        options.setdefault("cache_path", tmp_path / "cache" / CACHE_FILE)
        extractor = LLMFactExtractor("test-chat", **options)
        made.append(extractor)
        return extractor

    yield build
    for extractor in made:
        await extractor.aclose()


def settings_for(home: Path, **overrides: str) -> Settings:
    return load_settings(None, {"RECALLD_HOME": str(home)}, overrides).settings


async def stored_chunks(memory: AsyncMemory, source: str) -> list[Chunk]:
    doc = await memory.store.read(lambda c: c.document_by_source(source))
    assert doc is not None

    async def read(conn: Any) -> list[Chunk]:
        rows = await conn.fetchall(
            "SELECT id FROM chunks WHERE document_id = ? ORDER BY position", (doc.id,)
        )
        found = await conn.chunks_by_id([r[0] for r in rows])
        return sorted(found.values(), key=lambda c: c.position)

    return await memory.store.read(read)


async def test_extracts_facts_in_batches(server, extractors):
    convs = conversations()
    [facts] = await extractors(batch_rounds=2).extract(convs)
    rounds = convs[0].sessions[0].rounds
    assert facts == {
        r.id: [f"User said that {user}"] for r, (user, _) in zip(rounds, TURNS, strict=True)
    }
    requests = server.requests_to("chat/completions")
    sent = [json.loads(r.body["messages"][1]["content"])["rounds"] for r in requests]
    assert sorted(len(rounds) for rounds in sent) == [1, 2, 2]  # in flight together
    assert all([r["round"] for r in rounds] == list(range(1, len(rounds) + 1)) for rounds in sent)
    texts = sorted(r["turns"][0]["text"] for rounds in sent for r in rounds)
    assert texts == sorted(user for user, _ in TURNS)
    assert {"speaker": "User", "text": TURNS[0][0]} in [r["turns"][0] for b in sent for r in b]
    body = requests[0].body
    assert body["model"] == "test-chat"
    assert body["response_format"] == {"type": "json_object"}
    assert "third person" in body["messages"][0]["content"]


async def test_cache_means_a_round_is_paid_for_once(server, extractors):
    first = extractors()
    await first.extract(conversations())
    assert len(server.requests_to("chat/completions")) == 1
    await first.extract(conversations())
    # A fresh extractor (a restart) reads the cache file.
    again = await extractors().extract(conversations())
    assert len(server.requests_to("chat/completions")) == 1
    assert again[0][conversations()[0].sessions[0].rounds[0].id] == [
        f"User said that {TURNS[0][0]}"
    ]
    # A grown log asks only about its new round.
    grown = [*TURNS, ("I ran a marathon in Porto.", "Impressive!")]
    await extractors().extract(conversations(grown))
    requests = server.requests_to("chat/completions")
    assert len(requests) == 2
    [new_round] = json.loads(requests[1].body["messages"][1]["content"])["rounds"]
    assert new_round["turns"][0]["text"] == "I ran a marathon in Porto."
    # Another model is another cache entry.
    await extractors().extract(conversations())
    assert len(server.requests_to("chat/completions")) == 2
    other = LLMFactExtractor("other-model", base_url=server.base_url, cache_path=first.cache.path)
    try:
        await other.extract(conversations())
    finally:
        await other.aclose()
    assert len(server.requests_to("chat/completions")) == 3


async def test_unusable_answer_is_retried(server, extractors):
    server.script("chat/completions", Reply(content='{"facts": [oops'))
    [facts] = await extractors().extract(conversations())
    assert len(server.requests_to("chat/completions")) == 2
    assert all(len(f) == 1 for f in facts.values())


async def test_keeps_answering_out_of_shape(server, extractors):
    bad = json.dumps({"facts": [{"round": 99, "facts": ["?"]}]})
    server.script("chat/completions", *[Reply(content=bad)] * 3)
    with pytest.raises(IngestError, match=r"after 3 attempts: unusable answer: .*round 99"):
        await extractors().extract(conversations())


async def test_rate_limit_waits_for_retry_after(server, extractors):
    server.script("chat/completions", Reply(status=429, headers={"Retry-After-Ms": "300"}))
    await extractors().extract(conversations())
    first, second = server.requests_to("chat/completions")
    assert second.at - first.at >= 0.3


async def test_timeout(server, extractors):
    server.script("chat/completions", Reply(delay_s=5), Reply(delay_s=5))
    started = time.monotonic()
    with pytest.raises(IngestError, match="timed out"):
        await extractors(
            timeout_s=0.3, retry=RetryPolicy(max_retries=1, base_delay_s=0.01)
        ).extract(conversations())
    assert time.monotonic() - started < 2.0


async def test_refused_key_is_not_retried_and_not_shown(server, extractors, caplog):
    caplog.set_level(logging.DEBUG)
    key = "sk-facts-SECRET-77"
    server.script("chat/completions", Reply(status=401, body=f'"bad key {key}"'.encode()))
    with pytest.raises(IngestError, match="refused the API key") as caught:
        await extractors(api_key=Secret(key)).extract(conversations())
    assert len(server.requests_to("chat/completions")) == 1
    assert key not in str(caught.value) and key not in caplog.text
    assert server.requests[0].headers["authorization"] == f"Bearer {key}"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("[]", 'no "facts" list'),
        ('{"facts": {"round": 1}}', 'no "facts" list'),
        ('{"facts": ["x"]}', "not an object"),
        ('{"facts": [{"round": true, "facts": []}]}', "round True"),
        ('{"facts": [{"round": 1, "facts": "x"}]}', "not a list of strings"),
        ('{"facts": [{"round": 1, "facts": [1]}]}', "not a list of strings"),
        ('{"facts": [{"round": 1, "facts": []}, {"round": "1", "facts": []}]}', "twice"),
    ],
)
def test_answers_are_validated_strictly(content, problem):
    with pytest.raises(UnusableAnswer, match=problem):
        parse_answer(content, 2)


def test_answers_are_cleaned():
    content = json.dumps(
        {"facts": [{"round": "2", "facts": ["  Ana  is\n a biologist. ", "", "x" * 500, "Ana"]}]}
    )
    assert parse_answer(content, 2) == [[], ["Ana is a biologist.", "Ana"]]


def test_settings_decide_whether_facts_use_an_llm(tmp_path: Path):
    assert fact_extractor(settings_for(tmp_path)) is None
    url = "http://127.0.0.1:9/v1"
    assert (
        fact_extractor(settings_for(tmp_path, **{"facts.base_url": url, "facts.enabled": "0"}))
        is None
    )
    assert (
        fact_extractor(settings_for(tmp_path, **{"facts.base_url": url, "chunk.facts": "0"}))
        is None
    )
    env = {"RECALLD_HOME": str(tmp_path), "FACTS_KEY": "sk-f"}
    overrides = {"facts.base_url": url, "facts.model": "m", "facts.api_key_env": "FACTS_KEY"}
    settings = load_settings(None, env, overrides).settings
    extractor = fact_extractor(settings)
    assert extractor is not None and extractor.model == "m" and extractor.host == "127.0.0.1:9"
    assert extractor.cache.path == Path(settings.cache_dir) / CACHE_FILE
    assert settings.facts.api_key is not None and settings.facts.api_key.reveal() == "sk-f"


@pytest.fixture
async def memory(tmp_path: Path) -> AsyncIterator[AsyncMemory]:
    settings = settings_for(tmp_path / "home", **{"embed.model": "hash:64"})
    async with await AsyncMemory.open(settings, embedder=HashEmbedder(64)) as opened:
        yield opened


def ingestor(memory: AsyncMemory, extractor: LLMFactExtractor) -> Ingestor:
    return Ingestor(memory.store, memory.embedder, memory.settings.chunk, facts=extractor)


async def test_pipeline_stores_llm_facts(server, extractors, memory):
    report = await ingestor(memory, extractors()).ingest_bytes("chat.json", "chat.json", chat_log())
    assert report.status == "ingested" and report.notes == []
    chunks = await stored_chunks(memory, "chat.json")
    facts = [c for c in chunks if c.granularity == "fact"]
    assert [c.text for c in facts] == [f"User said that {user}" for user, _ in TURNS]
    assert all(c.meta["extractor"] == "llm" and c.meta["model"] == "test-chat" for c in facts)
    assert sum(c.granularity == "round" for c in chunks) == len(TURNS)
    by_id = {c.id: c for c in chunks}
    assert all(by_id[c.parent_id].granularity == "round" for c in facts)  # type: ignore[index]
    result = await memory.search("Miso the cat", filters=Filters(granularities=("fact",)))
    assert "Miso" in result.hits[0].chunk.text


async def test_pipeline_second_ingest_makes_no_request(server, extractors, memory, tmp_path):
    await ingestor(memory, extractors()).ingest_bytes("a.json", "chat.json", chat_log())
    assert len(server.requests_to("chat/completions")) == 1
    # The same rounds in a fresh store, through a fresh extractor: answered from the cache.
    settings = settings_for(tmp_path / "other", **{"embed.model": "hash:64"})
    async with await AsyncMemory.open(settings, embedder=HashEmbedder(64)) as other:
        report = await ingestor(other, extractors()).ingest_bytes("a.json", "chat.json", chat_log())
        facts = [c for c in await stored_chunks(other, "a.json") if c.granularity == "fact"]
    assert report.status == "ingested" and len(facts) == len(TURNS)
    assert all(c.meta["extractor"] == "llm" for c in facts)
    assert len(server.requests_to("chat/completions")) == 1


async def test_pipeline_falls_back_to_heuristic_facts(server, extractors, memory, caplog):
    extractor = extractors()
    server.stop()
    report = await ingestor(memory, extractor).ingest_bytes("chat.json", "chat.json", chat_log())
    assert report.status == "ingested"
    [note] = report.notes
    assert "LLM facts unavailable" in note and "cannot connect" in note
    assert "heuristic facts stored instead" in note
    chunks = await stored_chunks(memory, "chat.json")
    assert sum(c.granularity == "round" for c in chunks) == len(TURNS)
    facts = [c for c in chunks if c.granularity == "fact"]
    assert facts and all(c.meta["extractor"] == "heuristic" for c in facts)
    assert "User moved to Lisbon in March 2024." in [c.text for c in facts]
    assert any(
        r.levelno == logging.WARNING and "heuristic" in r.getMessage() for r in caplog.records
    )
    assert await memory.store.read(lambda c: c.errors()) == []


async def test_pipeline_leaves_other_files_alone(server, extractors, memory):
    report = await ingestor(memory, extractors()).ingest_bytes(
        "notes.md", "notes.md", b"# Notes\n\nI moved to Lisbon."
    )
    assert report.status == "ingested"
    assert server.requests == []
