"""Facts from conversation rounds, extracted by an LLM behind an OpenAI-compatible chat API.

`LLMFactExtractor.extract` takes parsed conversations and returns, per conversation, facts by
round id, which the pipeline hands to `conversation_chunks`. Rounds are sent in batches
(`facts.batch_rounds` per chat completion, `facts.concurrency` requests at a time) with
`response_format={"type": "json_object"}`, asking for

    {"facts": [{"round": 1, "facts": ["Caroline moved to Lisbon in March 2024.", ...]}, ...]}

The answer is validated strictly (every entry names a round of the batch, once; facts are
strings); an answer that does not fit is retried like a failed request, since a second sample
of the model usually fits. Timeouts, back-off and `Retry-After` follow
`recalld.embeddings.openai_compat`.

Cache: facts are kept by a hash of what the model is shown for a round (speakers, text, date)
plus the model name and prompt version, in memory and in an append-only JSON-lines file under
the cache dir. A re-ingest — of a grown log, after a restart, or of the same rounds in another
file — asks only for rounds it has never seen. JSON lines rather than SQLite because only
`storage` opens SQL connections; appends are cheap, a torn last line is skipped on load, and the
file only grows with rounds the user actually has (a few hundred bytes each).

When the endpoint cannot be used, `extract` raises `IngestError`; the pipeline then stores the
rounds with heuristic facts and says so in the ingest notes.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recalld import private
from recalld.chunkers import Conversation, Round, Session
from recalld.chunkers.formats.model import format_time
from recalld.config import Secret, Settings
from recalld.embeddings.openai_compat import RetryPolicy, endpoint_host
from recalld.errors import ConfigError, IngestError
from recalld.ingest.llm_chat import JsonChat, UnusableAnswer

logger = logging.getLogger(__name__)

# Part of every cache key: a new prompt must not reuse answers to the old one.
PROMPT_VERSION = 1
CACHE_FILE = "facts.jsonl"
# Bounds on what one round may send and get back, so one huge agent turn cannot blow a request.
MAX_TURN_CHARS = 4000
MAX_BATCH_CHARS = 24000
MAX_FACTS_PER_ROUND = 20
MAX_FACT_CHARS = 400

SYSTEM_PROMPT = """\
You extract facts from conversation rounds for a long-term memory.
For each round, list the facts worth remembering later. Each fact is one short, \
self-contained statement in the third person that names the speaker it is about, for \
example "Caroline moved to Lisbon in March 2024." Never write "I", "you" or "we". Resolve \
pronouns, and turn relative dates ("last week") into dates using the round's date when it \
has one. Keep each fact under 30 words. Skip greetings, small talk, questions and anything \
not stated as true. A round with nothing worth remembering gets an empty list.
Answer with a JSON object only, in exactly this shape, with one entry for every round given:
{"facts": [{"round": <round number>, "facts": ["...", "..."]}]}"""


@dataclass
class _Job:
    """One distinct round to ask about, and every (conversation, round id) it stands for."""

    key: str
    payload: dict[str, Any]
    targets: list[tuple[int, str]] = field(default_factory=list)


def round_payload(session: Session, rnd: Round) -> dict[str, Any]:
    """What the model is shown for one round (and what its cache key is computed from)."""
    payload: dict[str, Any] = {}
    time = rnd.time if rnd.time is not None else session.time
    if time is not None:
        payload["date"] = format_time(time)
    payload["turns"] = [
        {
            "speaker": turn.speaker,
            "text": turn.text
            if len(turn.text) <= MAX_TURN_CHARS
            else turn.text[: MAX_TURN_CHARS - 1] + "\u2026",
        }
        for turn in rnd.turns
    ]
    return payload


def cache_key(model: str, payload: dict[str, Any]) -> str:
    """The cache key of one round's facts from one model."""
    text = json.dumps(
        [PROMPT_VERSION, model, payload], ensure_ascii=False, sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def parse_answer(content: str, rounds: int) -> list[list[str]]:
    """Validate the model's JSON and return facts for rounds 1..`rounds`, in order.

    A round the answer leaves out gets no facts; anything else out of shape is refused.

    Raises:
        UnusableAnswer: The content is not JSON of the agreed shape.
    """
    try:
        document = json.loads(content)
    except ValueError:
        raise UnusableAnswer("the answer is not JSON") from None
    entries = document.get("facts") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise UnusableAnswer('the answer has no "facts" list')
    found: dict[int, list[str]] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            raise UnusableAnswer("an entry is not an object")
        number = entry.get("round")
        if isinstance(number, str) and number.strip().isdigit():
            number = int(number)
        if not isinstance(number, int) or isinstance(number, bool) or not 1 <= number <= rounds:
            raise UnusableAnswer(f"an entry names round {number!r}, not one of 1..{rounds}")
        if number in found:
            raise UnusableAnswer(f"round {number} appears twice")
        facts = entry.get("facts")
        if not isinstance(facts, list) or not all(isinstance(f, str) for f in facts):
            raise UnusableAnswer(f"round {number}'s facts are not a list of strings")
        cleaned = [" ".join(f.split()) for f in facts]
        kept = [f for f in dict.fromkeys(cleaned) if f and len(f) <= MAX_FACT_CHARS]
        found[number] = kept[:MAX_FACTS_PER_ROUND]
    return [found.get(number, []) for number in range(1, rounds + 1)]


class FactCache:
    """Facts by cache key: in memory, and in an append-only JSON-lines file if given a path.

    Args:
        path: The file; None keeps the cache in memory only.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._facts: dict[str, list[str]] | None = None
        self._lock = asyncio.Lock()

    async def load(self) -> dict[str, list[str]]:
        """Read the file once; later calls return the same dict."""
        if self._facts is None:
            facts = await asyncio.to_thread(self._read) if self.path else {}
            if self._facts is None:
                self._facts = facts
        return self._facts

    async def add(self, entries: Sequence[tuple[str, list[str]]]) -> None:
        """Remember facts, appending them to the file."""
        facts = await self.load()
        for key, found in entries:
            facts[key] = found
        if self.path is not None and entries:
            lines = "".join(
                json.dumps({"key": k, "facts": f}, ensure_ascii=False) + "\n" for k, f in entries
            )
            async with self._lock:
                await asyncio.to_thread(self._append, lines)

    def _read(self) -> dict[str, list[str]]:
        assert self.path is not None
        facts: dict[str, list[str]] = {}
        bad = 0
        try:
            with self.path.open(encoding="utf-8", errors="replace") as handle:
                for line in handle:
                    try:
                        entry = json.loads(line)
                        key, found = entry["key"], entry["facts"]
                    except (ValueError, TypeError, KeyError):
                        bad += 1
                        continue
                    if isinstance(key, str) and isinstance(found, list):
                        facts[key] = [f for f in found if isinstance(f, str)]
        except FileNotFoundError:
            return facts
        except OSError as exc:
            logger.warning("cannot read the fact cache %s: %s", self.path, exc.strerror or exc)
            return facts
        if bad:
            logger.warning("fact cache %s: %d unreadable lines skipped", self.path, bad)
        return facts

    def _append(self, lines: str) -> None:
        assert self.path is not None
        try:
            private.private_dir(self.path.parent)
            # 0600: the facts are the user's conversations in other words.
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "a", encoding="utf-8") as handle:
                handle.write(lines)
        except OSError as exc:
            # A cache that cannot be written costs money later, not data now.
            logger.warning("cannot write the fact cache %s: %s", self.path, exc.strerror or exc)


class LLMFactExtractor:
    """Extracts facts from rounds with a chat model behind an OpenAI-compatible endpoint.

    Args:
        model: The endpoint's chat model, e.g. `gpt-4o-mini` or `llama3.1:8b`.
        base_url: The API root, e.g. `http://localhost:11434/v1`.
        api_key: Sent as a bearer token; None for keyless local servers.
        timeout_s: Read timeout per request (connecting gets at most 5 s).
        retry: Retries for timeouts, connection errors, 408/409/429/5xx and unusable answers.
        batch_rounds: Rounds per request.
        concurrency: Requests in flight at once.
        cache_path: The JSON-lines cache file; None: cache in memory only.

    Raises:
        ConfigError: A parameter is out of range.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        api_key: Secret | None = None,
        timeout_s: float = 60.0,
        retry: RetryPolicy | None = None,
        batch_rounds: int = 8,
        concurrency: int = 4,
        cache_path: Path | None = None,
    ) -> None:
        self.host = endpoint_host(base_url, "facts.base_url")
        checks = (
            (bool(model.strip()), "facts.model needs a model name"),
            (timeout_s > 0, "facts.timeout_s must be positive"),
            (batch_rounds >= 1, "facts.batch_rounds must be at least 1"),
            (concurrency >= 1, "facts.concurrency must be at least 1"),
            (retry is None or retry.max_retries >= 0, "facts.max_retries must not be negative"),
        )
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)
        self.chat = JsonChat(
            "fact extraction",
            model,
            base_url=base_url,
            api_key=api_key,
            timeout_s=timeout_s,
            retry=retry,
        )
        self.model = model
        self.batch_rounds = batch_rounds
        self.concurrency = concurrency
        self.cache = FactCache(cache_path)

    async def extract(self, conversations: Sequence[Conversation]) -> list[dict[str, list[str]]]:
        """Facts by round id for each conversation, asking the model only about new rounds.

        Returns:
            One mapping per conversation, in order; every round has an entry (maybe empty).

        Raises:
            IngestError: The endpoint failed after the retries, refused the request, or kept
                answering out of shape. Facts for batches that succeeded are cached.
        """
        cached = await self.cache.load()
        results: list[dict[str, list[str]]] = [{} for _ in conversations]
        jobs: dict[str, _Job] = {}
        for index, conv in enumerate(conversations):
            for session in conv.sessions:
                for rnd in session.rounds:
                    payload = round_payload(session, rnd)
                    key = cache_key(self.model, payload)
                    if key in cached:
                        results[index][rnd.id] = list(cached[key])
                    else:
                        jobs.setdefault(key, _Job(key, payload)).targets.append((index, rnd.id))
        batches = self._batches(list(jobs.values()))
        if batches:
            logger.info(
                "asking %s at %s for facts of %d rounds in %d requests (%d cached)",
                self.model,
                self.host,
                len(jobs),
                len(batches),
                sum(len(r) for r in results),
            )
        gate = asyncio.Semaphore(self.concurrency)

        async def run(batch: list[_Job]) -> None:
            async with gate:
                answers = await self._ask(batch)
            for job, facts in zip(batch, answers, strict=True):
                for index, round_id in job.targets:
                    results[index][round_id] = list(facts)
            await self.cache.add(
                [(job.key, facts) for job, facts in zip(batch, answers, strict=True)]
            )

        try:
            async with asyncio.TaskGroup() as group:
                for batch in batches:
                    group.create_task(run(batch))
        except* IngestError as failed:
            # The first failure cancels the other requests: the endpoint is likely down.
            raise failed.exceptions[0] from None
        return results

    def _batches(self, jobs: list[_Job]) -> list[list[_Job]]:
        batches: list[list[_Job]] = []
        size = 0
        for job in jobs:
            cost = len(json.dumps(job.payload, ensure_ascii=False))
            if batches and len(batches[-1]) < self.batch_rounds and size + cost <= MAX_BATCH_CHARS:
                batches[-1].append(job)
                size += cost
            else:
                batches.append([job])
                size = cost
        return batches

    async def _ask(self, batch: list[_Job]) -> list[list[str]]:
        rounds = [{"round": number, **job.payload} for number, job in enumerate(batch, start=1)]

        def parse(text: str) -> list[list[str]]:
            return parse_answer(text, len(batch))

        return await self.chat.ask(SYSTEM_PROMPT, {"rounds": rounds}, parse)

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self.chat.aclose()


def fact_extractor(settings: Settings) -> LLMFactExtractor | None:
    """The extractor `settings.facts` describes, or None when LLM facts are off.

    Facts are off when `facts.enabled` is false, no `facts.base_url` is set, or chunk facts
    are switched off altogether (`chunk.facts`).

    Raises:
        ConfigError: A facts setting is out of range.
    """
    facts = settings.facts
    if not (facts.enabled and facts.base_url and settings.chunk.facts):
        return None
    return LLMFactExtractor(
        facts.model,
        base_url=facts.base_url,
        api_key=facts.api_key,
        timeout_s=facts.timeout_s,
        retry=RetryPolicy(max_retries=facts.max_retries),
        batch_rounds=facts.batch_rounds,
        concurrency=facts.concurrency,
        cache_path=Path(settings.cache_dir).expanduser() / CACHE_FILE,
    )
