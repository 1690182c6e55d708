"""The prompt hook's confidence rule on the real packaged model: relevant prompts bring their
memory, unrelated coding and chat prompts bring nothing; and the session start stays within a
budget counted with the model's own tokenizer."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.conftest import Daemon

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.model]

MEMORIES = [
    "The billing service retries failed webhooks five times with exponential backoff",
    "We decided to keep PostgreSQL for the billing ledger instead of moving to DynamoDB",
    "Deploys to production happen on Thursdays after the release review",
    "The staging database password rotates every 30 days via the vault job",
    "I prefer small pull requests with tests written first",
    "The frontend uses React 18 with Vite and TypeScript strict mode",
    "Alice owns the payments API and reviews all changes to it",
    "The CI pipeline runs on GitHub Actions with a 2-core runner",
]
RELATED = {
    "how many times do we retry webhooks?": 0,
    "which database do we use for the ledger": 1,
    "when can I deploy to prod": 2,
    "who should review my payments API change": 6,
    "what frontend framework does this project use": 5,
}
UNRELATED = [
    "write a haiku about autumn leaves",
    "what is the capital of Australia",
    "explain quicksort in python",
    "fix the typo in the README",
    "how do I center a div",
    "translate hello into French",
    "what's 17 times 23",
    "summarize the plot of Hamlet",
    "add a unit test for the parser",
    "rename variable foo to bar",
]


def test_prompt_gate_and_start_budget_on_the_real_model(
    make_daemon: Callable[..., Daemon], model_cache: Path
) -> None:
    daemon = make_daemon(RECALLD_EMBED__MODEL="local", RECALLD_CACHE_DIR=str(model_cache))
    daemon.start()
    daemon.wait_ready(timeout=120)
    try:
        ids = [
            daemon.client.call("remember", {"text": text, "project": "/work/app"})["id"]
            for text in MEMORIES
        ]

        def injected(prompt: str) -> list[int]:
            result = daemon.client.context("prompt", project="/work/app", prompt=prompt)
            return [item["id"] for item in result["items"]]

        right = sum(injected(prompt)[:1] == [ids[i]] for prompt, i in RELATED.items())
        # Measured: 4 of 5 (the frontend question scores below the bar); 0 of 10 unrelated.
        assert right >= 3
        assert [p for p in UNRELATED if injected(p)] == []

        start = daemon.client.context("start", project="/work/app", budget_tokens=60)
        assert 0 < start["tokens"] <= 60 and start["text"].count("\n- ") >= 1
    finally:
        daemon.stop()
