"""One JSON-answering chat endpoint (OpenAI-compatible), shared by the LLM fact extractor and
the knowledge-update judge: the client, the time limits, retries with back-off that honour
`Retry-After`, and one error naming the endpoint when it keeps failing.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from recalld.config import Secret
from recalld.embeddings.openai_compat import (
    CONNECT_TIMEOUT_S,
    Failure,
    RetryPolicy,
    classify_error,
    client_options,
    endpoint_host,
)
from recalld.errors import IngestError
from recalld.extras import require

if TYPE_CHECKING:
    from openai import AsyncOpenAI

logger = logging.getLogger(__name__)

T = TypeVar("T")


class UnusableAnswer(Exception):
    """The endpoint answered, but not in the agreed shape (worth asking again)."""


class JsonChat:
    """Asks a chat model for a JSON object and parses it.

    Args:
        task: What the requests are for, in error messages ("fact extraction").
        model: The chat model.
        base_url: The API root.
        api_key: Bearer token; None for keyless local servers.
        timeout_s: Read timeout per request.
        retry: Retries for timeouts, connection errors, 408/409/429/5xx and unusable answers.
    """

    def __init__(
        self,
        task: str,
        model: str,
        *,
        base_url: str,
        api_key: Secret | None = None,
        timeout_s: float = 60.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        require(("openai",), "openai", f"{task} through an LLM (facts.base_url)")
        self.task = task
        self.host = endpoint_host(base_url, "facts.base_url")
        self.model = model
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy(max_retries=3)
        self._api_key = api_key
        self._client: AsyncOpenAI | None = None

    async def ask(self, system: str, user: dict[str, Any], parse: Callable[[str], T]) -> T:
        """Send `user` as JSON under the `system` prompt; `parse` the answer's text.

        `parse` raises `UnusableAnswer` for an answer out of shape; that is retried too.

        Raises:
            IngestError: The endpoint failed after the retries or kept answering out of shape.
        """
        attempt = 0
        while True:
            result = await self._try(system, user, parse)
            if not isinstance(result, Failure):
                return result
            wait = self.retry.delay(attempt, result.retry_after) if result.retryable else None
            if wait is None:
                tries = f" after {attempt + 1} attempts" if attempt else ""
                raise IngestError(
                    f"{self.task} with {self.model} at {self.host} failed{tries}: {result.reason}",
                    data={"endpoint": self.host, "model": self.model, "reason": result.reason},
                )
            logger.info(
                "%s request to %s failed (%s); retry %d of %d in %.2f s",
                self.task,
                self.host,
                result.reason,
                attempt + 1,
                self.retry.max_retries,
                wait,
            )
            await asyncio.sleep(wait)
            attempt += 1

    async def _try(
        self, system: str, user: dict[str, Any], parse: Callable[[str], T]
    ) -> T | Failure:
        import openai

        messages: list[Any] = [
            {"role": "system", "content": system},
            {"role": "user", "content": json.dumps(user, ensure_ascii=False)},
        ]
        try:
            # The client's read timeout bounds each wait for bytes; this bounds the whole call.
            async with asyncio.timeout(self.timeout_s + CONNECT_TIMEOUT_S):
                raw = await self._get_client().chat.completions.with_raw_response.create(
                    model=self.model,
                    messages=messages,
                    response_format={"type": "json_object"},
                    temperature=0,
                )
            return parse(message_text(raw.http_response.content))
        except (openai.APIError, TimeoutError) as exc:
            return classify_error(exc, self._api_key)
        except UnusableAnswer as exc:
            return Failure(True, f"unusable answer: {exc}")

    def _get_client(self) -> AsyncOpenAI:
        if self._client is None:
            import openai

            options = client_options(self.base_url, self._api_key, self.timeout_s)
            self._client = openai.AsyncOpenAI(**options)
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        if self._client is not None:
            await self._client.close()
            self._client = None


def message_text(payload: bytes) -> str:
    """The assistant message's text in a chat completion body.

    Raises:
        UnusableAnswer: It is not a chat completion with text, or the text was cut off.
    """
    try:
        document = json.loads(payload)
        choice = document["choices"][0]
        content = choice["message"]["content"]
    except (ValueError, TypeError, KeyError, IndexError):
        raise UnusableAnswer("the response is not a chat completion") from None
    if not isinstance(content, str):
        raise UnusableAnswer("the chat completion has no text")
    if choice.get("finish_reason") == "length":
        raise UnusableAnswer("the answer was cut off at the length limit")
    return content
