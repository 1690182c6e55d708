"""Knowledge-update detection: the rule on hand-labelled pairs, and the LLM detector against a
real local HTTP server."""

from __future__ import annotations

import json

import pytest

from recalld.config import load_settings
from recalld.embeddings.openai_compat import RetryPolicy
from recalld.errors import ConfigError, IngestError
from recalld.ingest.supersede import Claim, claim, supersedes
from recalld.ingest.supersede_llm import (
    LLMSupersessionDetector,
    parse_answer,
    supersession_detector,
)
from tests.helpers.fake_openai import FakeOpenAI, Reply

# Hand-labelled (newer, older, does newer supersede older?). Written for this test in the
# shapes LoCoMo's heuristic facts and typed memories take; the rule must get every one right.
LABELLED = [
    ("Caroline moved to Lisbon in March 2024.", "Caroline lives in Porto.", True),
    ("I live in Berlin now", "I live in Hamburg", True),
    ("Melanie now works at Globex.", "Melanie works at Initech as a designer.", True),
    ("Jon got a new job at the bakery on Main Street.", "Jon works for the city council.", True),
    ("My favourite colour is green.", "My favorite color is blue.", True),
    ("Gina is 34 years old.", "Gina is 33 years old.", True),
    ("The user prefers tea for breakfast.", "The user prefers coffee for breakfast.", True),
    ("Jon works as a dance teacher.", "Jon works as a banker.", True),
    ("Caroline is married to Sam.", "Caroline is dating Alex.", True),
    # Not updates: same value, other subject, other attribute, added detail, unreadable.
    ("Caroline lives in Lisbon, Portugal.", "Caroline moved to Lisbon last year.", False),
    ("Melanie lives in Porto.", "Caroline lives in Lisbon.", False),
    ("Caroline works at the library.", "Caroline lives in Porto.", False),
    ("Caroline moved to Lisbon with her dog.", "Caroline moved to Lisbon.", False),
    ("Caroline loves Lisbon.", "Caroline lives in Porto.", False),
    ("Melanie's kids love painting.", "Melanie's kids love pottery.", False),
    ("Caroline said that the stories were inspiring.", "Caroline lives in Porto.", False),
    ("The user prefers tea for breakfast.", "The user prefers coffee for dinner.", False),
    ("Jon is 34 years old.", "Jon works as a banker.", False),
]


@pytest.mark.parametrize(("newer", "older", "expected"), LABELLED)
def test_rule_on_hand_labelled_pairs(newer: str, older: str, expected: bool) -> None:
    assert supersedes(newer, older) is expected


def test_rule_precision_and_recall_on_the_labelled_set() -> None:
    said = [supersedes(n, o) for n, o, _ in LABELLED]
    truth = [e for _, _, e in LABELLED]
    true_pos = sum(s and t for s, t in zip(said, truth, strict=True))
    assert true_pos / max(1, sum(said)) == 1.0  # precision
    assert true_pos / sum(truth) == 1.0  # recall on the shapes the table knows


def test_claims_read_subject_attribute_and_value() -> None:
    assert claim("Caroline moved to Lisbon in March 2024.") == Claim(
        "caroline", "residence", "lisbon"
    )
    assert claim("I'm living in Porto these days") == Claim("user", "residence", "porto")
    # A quoted speaker is the subject of what they say about themselves.
    assert claim("Caroline said: I moved to Lisbon") == Claim("caroline", "residence", "lisbon")
    assert claim("How are you?") is None


def test_llm_answers_are_validated() -> None:
    assert parse_answer(json.dumps({"results": [{"pair": 2, "supersedes": True}]}), 2) == [
        False,
        True,
    ]
    for bad in ("nope", "{}", json.dumps({"results": [{"pair": 3, "supersedes": True}]})):
        with pytest.raises(Exception, match=r"answer|shape"):
            parse_answer(bad, 2)


async def test_llm_detector_asks_the_endpoint() -> None:
    with FakeOpenAI() as server:
        server.script(
            "chat/completions",
            Reply(content=json.dumps({"results": [{"pair": 1, "supersedes": True}]})),
        )
        detector = LLMSupersessionDetector("m", base_url=server.base_url)
        try:
            # The rule cannot read this pair; the model's verdict is what counts.
            verdicts = await detector.judge([("Ana switched teams.", "Ana is on the red team.")])
        finally:
            await detector.aclose()
        [request] = server.requests_to("chat/completions")
    assert verdicts == [True]
    shown = json.loads(request.body["messages"][-1]["content"])
    assert shown == {
        "pairs": [{"pair": 1, "older": "Ana is on the red team.", "newer": "Ana switched teams."}]
    }
    assert request.body["response_format"] == {"type": "json_object"}


async def test_llm_detector_failure_is_an_ingest_error() -> None:
    with FakeOpenAI() as server:
        server.script("chat/completions", Reply(status=400))
        detector = LLMSupersessionDetector(
            "m", base_url=server.base_url, retry=RetryPolicy(max_retries=0)
        )
        try:
            with pytest.raises(IngestError, match="supersession check"):
                await detector.judge([("a", "b")])
        finally:
            await detector.aclose()


def test_llm_detector_only_with_the_facts_endpoint(tmp_path) -> None:
    env = {"RECALLD_HOME": str(tmp_path)}
    assert supersession_detector(load_settings(None, env).settings) is None
    url = {"facts.base_url": "http://127.0.0.1:9/v1"}
    assert supersession_detector(load_settings(None, env, url).settings) is not None
    rule = {**url, "links.supersede": "heuristic"}
    assert supersession_detector(load_settings(None, env, rule).settings) is None
    with pytest.raises(ConfigError, match=r"links\.supersede"):
        supersession_detector(load_settings(None, env, {"links.supersede": "maybe"}).settings)
