"""Knowledge updates judged by an LLM behind the facts endpoint (OpenAI-compatible chat API).

The candidate pairs are the ones the rule would look at (a newer fact or memory and a similar
older one); the model is shown them in batches and answers

    {"results": [{"pair": 1, "supersedes": true}, ...]}

Requests, timeouts and retries go through `llm_chat.JsonChat`. When the endpoint fails, `judge`
raises `IngestError` and the caller falls back to the rule (`supersede.supersedes`).
"""

from __future__ import annotations

import functools
import json
import logging
import typing
from collections.abc import Sequence

from recalld.config import Secret, Settings, SupersedeMode
from recalld.embeddings.openai_compat import RetryPolicy
from recalld.errors import ConfigError
from recalld.ingest.llm_chat import JsonChat, UnusableAnswer

logger = logging.getLogger(__name__)

BATCH_PAIRS = 16
SUPERSEDE_MODES: tuple[str, ...] = typing.get_args(SupersedeMode)

SYSTEM_PROMPT = """\
You maintain a long-term memory. For each pair of statements, decide whether the newer one \
replaces the older one: both are about the same subject and the same attribute (where someone \
lives, works, their job, partner, age, a favourite or a preference, ...) and the newer one \
gives a different, current value, so the older one is no longer true. Statements that add \
detail, are about different things, or can both be true are not replacements.
Answer with a JSON object only, with one entry for every pair given:
{"results": [{"pair": <pair number>, "supersedes": true or false}]}"""


def parse_answer(content: str, pairs: int) -> list[bool]:
    """Validate the model's JSON; a pair it leaves out counts as no replacement.

    Raises:
        UnusableAnswer: The content is not JSON of the agreed shape.
    """
    try:
        document = json.loads(content)
    except ValueError:
        raise UnusableAnswer("the answer is not JSON") from None
    entries = document.get("results") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise UnusableAnswer('the answer has no "results" list')
    found = [False] * pairs
    for entry in entries:
        number = entry.get("pair") if isinstance(entry, dict) else None
        verdict = entry.get("supersedes") if isinstance(entry, dict) else None
        if not isinstance(number, int) or not 1 <= number <= pairs or not isinstance(verdict, bool):
            raise UnusableAnswer(f"an entry is out of shape: {entry!r}")
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
        self.chat = JsonChat(
            "supersession check",
            model,
            base_url=base_url,
            api_key=api_key,
            timeout_s=timeout_s,
            retry=retry,
        )
        self.model = model

    async def judge(self, pairs: Sequence[tuple[str, str]]) -> list[bool]:
        """For each `(newer, older)` pair, whether newer supersedes older.

        Raises:
            IngestError: The endpoint failed after the retries or kept answering out of shape.
        """
        verdicts: list[bool] = []
        for start in range(0, len(pairs), BATCH_PAIRS):
            batch = pairs[start : start + BATCH_PAIRS]
            shown = [
                {"pair": number, "older": older, "newer": newer}
                for number, (newer, older) in enumerate(batch, start=1)
            ]
            verdicts += await self.chat.ask(
                SYSTEM_PROMPT, {"pairs": shown}, functools.partial(parse_answer, pairs=len(batch))
            )
        return verdicts

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self.chat.aclose()


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
