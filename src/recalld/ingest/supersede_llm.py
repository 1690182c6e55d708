"""Knowledge updates judged by an LLM behind the facts endpoint (OpenAI-compatible chat API).

The candidate pairs are the ones the rule would look at (a newer fact or memory and a similar
older one); the model is shown them in batches and answers

    {"results": [{"pair": 1, "supersedes": true}, ...]}

Timeouts, retries and error classes follow `facts_llm`. When the endpoint fails, `judge`
raises `IngestError` and the caller falls back to the rule (`supersede.supersedes`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from recalld.config import Secret, Settings
from recalld.embeddings.openai_compat import (
    CONNECT_TIMEOUT_S,
    Failure,
    RetryPolicy,
    classify_error,
    client_options,
    endpoint_host,
)
from recalld.errors import ConfigError, IngestError

if TYPE_CHECKING:
    from openai import AsyncOpenAI

logger = logging.getLogger(__name__)

BATCH_PAIRS = 16
SUPERSEDE_MODES = ("llm", "heuristic", "off")

SYSTEM_PROMPT = """\
You maintain a long-term memory. For each pair of statements, decide whether the newer one \
replaces the older one: both are about the same subject and the same attribute (where someone \
lives, works, their job, partner, age, a favourite or a preference, ...) and the newer one \
gives a different, current value, so the older one is no longer true. Statements that add \
detail, are about different things, or can both be true are not replacements.
Answer with a JSON object only, with one entry for every pair given:
{"results": [{"pair": <pair number>, "supersedes": true or false}]}"""


class _Unusable(Exception):
    """The endpoint answered, but not in the agreed shape."""


def parse_answer(content: str, pairs: int) -> list[bool]:
    """Validate the model's JSON; a pair it leaves out counts as no replacement.

    Raises:
        _Unusable: The content is not JSON of the agreed shape.
    """
    try:
        document = json.loads(content)
    except ValueError:
        raise _Unusable("the answer is not JSON") from None
    entries = document.get("results") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise _Unusable('the answer has no "results" list')
    found = [False] * pairs
    for entry in entries:
        number = entry.get("pair") if isinstance(entry, dict) else None
        verdict = entry.get("supersedes") if isinstance(entry, dict) else None
        if not isinstance(number, int) or not 1 <= number <= pairs or not isinstance(verdict, bool):
            raise _Unusable(f"an entry is out of shape: {entry!r}")
        found[number - 1] = verdict
    return found


class LLMSupersessionDetector:
    """Judges (newer, older) statement pairs with a chat model.

    Args:
        model: The chat model.
        base_url: The API root.
        api_key: Bearer token; None for keyless local servers.
        timeout_s: Read timeout per request.
        retry: Retries for timeouts, connection errors, 408/409/429/5xx and unusable answers.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        api_key: Secret | None = None,
        timeout_s: float = 60.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.host = endpoint_host(base_url, "facts.base_url")
        self.model = model
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy(max_retries=3)
        self._api_key = api_key
        self._client: AsyncOpenAI | None = None

    async def judge(self, pairs: Sequence[tuple[str, str]]) -> list[bool]:
        """For each `(newer, older)` pair, whether newer supersedes older.

        Raises:
            IngestError: The endpoint failed after the retries or kept answering out of shape.
        """
        verdicts: list[bool] = []
        for start in range(0, len(pairs), BATCH_PAIRS):
            verdicts += await self._ask(list(pairs[start : start + BATCH_PAIRS]))
        return verdicts

    async def _ask(self, batch: list[tuple[str, str]]) -> list[bool]:
        attempt = 0
        while True:
            result = await self._try(batch)
            if isinstance(result, list):
                return result
            wait = self.retry.delay(attempt, result.retry_after) if result.retryable else None
            if wait is None:
                raise IngestError(
                    f"supersession check with {self.model} at {self.host} failed: {result.reason}",
                    data={"endpoint": self.host, "model": self.model, "reason": result.reason},
                )
            await asyncio.sleep(wait)
            attempt += 1

    async def _try(self, batch: list[tuple[str, str]]) -> list[bool] | Failure:
        import openai

        shown = [
            {"pair": number, "older": older, "newer": newer}
            for number, (newer, older) in enumerate(batch, start=1)
        ]
        messages: list[Any] = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": json.dumps({"pairs": shown}, ensure_ascii=False)},
        ]
        try:
            async with asyncio.timeout(self.timeout_s + CONNECT_TIMEOUT_S):
                response = await self._get_client().chat.completions.create(
                    model=self.model,
                    messages=messages,
                    response_format={"type": "json_object"},
                    temperature=0,
                )
            content = response.choices[0].message.content if response.choices else None
            if not isinstance(content, str):
                raise _Unusable("the chat completion has no text")
            return parse_answer(content, len(batch))
        except (openai.APIError, TimeoutError) as exc:
            return classify_error(exc, self._api_key)
        except _Unusable as exc:
            return Failure(True, f"unusable answer: {exc}")

    def _get_client(self) -> AsyncOpenAI:
        if self._client is None:
            import openai

            self._client = openai.AsyncOpenAI(
                **client_options(self.base_url, self._api_key, self.timeout_s)
            )
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        if self._client is not None:
            await self._client.close()
            self._client = None


def supersession_detector(settings: Settings) -> LLMSupersessionDetector | None:
    """The LLM detector when `links.supersede = "llm"` and the facts endpoint is configured."""
    facts = settings.facts
    if settings.links.supersede not in SUPERSEDE_MODES:
        raise ConfigError(
            f"links.supersede must be one of {', '.join(SUPERSEDE_MODES)}, "
            f"not {settings.links.supersede!r}"
        )
    if settings.links.supersede != "llm" or not (facts.enabled and facts.base_url):
        return None
    return LLMSupersessionDetector(
        facts.model,
        base_url=facts.base_url,
        api_key=facts.api_key,
        timeout_s=facts.timeout_s,
        retry=RetryPolicy(max_retries=facts.max_retries),
    )
