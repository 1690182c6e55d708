"""A memory holding one LoCoMo-shaped conversation, on SQLite or on PostgreSQL."""

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from recalld.api import AsyncMemory
from recalld.config import load_settings
from tests.helpers.postgres import VECTOR_INDEX


def ana_and_ben(sample_id: str) -> dict[str, Any]:
    """One session of four turns: Ana's beagle, Ben's cello."""
    return {
        "sample_id": sample_id,
        "conversation": {
            "speaker_a": "Ana",
            "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a beagle puppy last week."},
                {"speaker": "Ben", "dia_id": "D1:2", "text": "Lovely! I started cello lessons."},
                {"speaker": "Ana", "dia_id": "D1:3", "text": "The beagle chews every shoe I own."},
                {"speaker": "Ben", "dia_id": "D1:4", "text": "My cello teacher is very strict."},
            ],
        },
    }


# The dates `ana_and_ben_sessions` gives its sessions, in order.
SESSION_DATES = ("1:56 pm on 8 May, 2023", "2:10 pm on 20 May, 2023")


def ana_and_ben_sessions(sample_id: str, *sessions: list[dict[str, Any]]) -> dict[str, Any]:
    """A LoCoMo sample of Ana and Ben's `sessions` (turns of `speaker` and `text`), each turn
    given its `dia_id` ("D<session>:<turn>") and each session its date from `SESSION_DATES`."""
    conversation: dict[str, Any] = {"speaker_a": "Ana", "speaker_b": "Ben"}
    for s, (turns, date) in enumerate(zip(sessions, SESSION_DATES, strict=False), start=1):
        for i, turn in enumerate(turns, start=1):
            turn["dia_id"] = f"D{s}:{i}"
        conversation[f"session_{s}_date_time"] = date
        conversation[f"session_{s}"] = turns
    return {"sample_id": sample_id, "conversation": conversation}


@asynccontextmanager
async def memory_with(
    tmp_path: Path, sample: dict[str, Any], source: str, pg_url: str | None = None
) -> AsyncIterator[AsyncMemory]:
    """An open memory (hash vectors; PostgreSQL at `pg_url`, else a SQLite file) holding
    `sample` ingested as `source`."""
    env = {"RECALLD_HOME": str(tmp_path), "RECALLD_EMBED__MODEL": "hash:64"}
    if pg_url is not None:
        env["RECALLD_STORE__PATH"] = pg_url
        env["RECALLD_STORE__VECTOR_INDEX"] = VECTOR_INDEX
    settings = load_settings(None, env).settings
    async with await AsyncMemory.open(settings) as opened:
        await opened.ingestor.ingest_bytes(source, "locomo.json", json.dumps(sample).encode())
        yield opened
