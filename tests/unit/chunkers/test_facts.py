"""The offline heuristic fact extractor."""

from __future__ import annotations

import pytest

from recalld.chunkers import Round, Turn
from recalld.chunkers.facts import heuristic_facts, pin_dates, rewrite, third_person
from recalld.chunkers.formats.model import parse_time

MAY_8 = parse_time("1:56 pm on 8 May, 2023")


def facts_of(
    *turns: tuple[str, str], speakers: tuple[str, ...] = ("Caroline", "Melanie")
) -> list[str]:
    rnd = Round(
        id="r1",
        turns=tuple(
            Turn(speaker=s, role="user", text=t, id=f"t{i}") for i, (s, t) in enumerate(turns)
        ),
    )
    return [f.text for f in heuristic_facts(rnd, speakers, MAY_8)]


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        ("I moved to Lisbon in March", "Caroline moved to Lisbon in March"),
        ("I love hiking", "Caroline loves hiking"),
        ("I really enjoy pottery", "Caroline really enjoys pottery"),
        ("I'm a counselor", "Caroline is a counselor"),
        ("I've got two cats", "Caroline has got two cats"),
        ("I'd love to adopt", "Caroline would love to adopt"),
        ("My mom gave me a necklace", "Caroline's mom gave Caroline a necklace"),
        (
            "We went camping and our tent broke",
            "Caroline and others went camping and their tent broke",
        ),
        ("Your painting is lovely", "Melanie's painting is lovely"),
        ("You're so brave", "Melanie is so brave"),
        ("I try to watch the news", "Caroline tries to watch the news"),
    ],
)
def test_rewrite_into_third_person(sentence: str, expected: str) -> None:
    assert rewrite(sentence, "Caroline", "Melanie") == expected


def test_third_person_verbs() -> None:
    assert [third_person(v) for v in ("go", "fix", "carry", "play", "went", "can", "have")] == [
        "goes",
        "fixes",
        "carries",
        "plays",
        "went",
        "can",
        "has",
    ]


def test_questions_greetings_and_filler_are_dropped() -> None:
    assert (
        facts_of(
            ("Caroline", "Hey Mel! Good to see you! How have you been?"),
            ("Melanie", "Thanks! Wow, that's great. Sounds like fun. I'm so happy for you!"),
        )
        == []
    )


def test_statements_are_kept_attributed_and_dated() -> None:
    facts = facts_of(
        ("Caroline", "I went to a support group yesterday. The stories were so moving and raw."),
        ("Melanie", "Oh, my kids start swimming lessons next month."),
    )
    assert facts == [
        "Caroline went to a support group yesterday (7 May 2023).",
        "Caroline said that the stories were so moving and raw.",
        "Melanie's kids start swimming lessons next month (June 2023).",
    ]


def test_assistant_turns_and_code_are_skipped() -> None:
    rnd = Round(
        id="r",
        turns=(
            Turn("User", "user", "I deploy with Ansible. config = {'a': 1}; x = f(y) / z;", "1"),
            Turn("Assistant", "assistant", "I recommend Terraform for your setup.", "2"),
        ),
    )
    assert [f.text for f in heuristic_facts(rnd, ("User", "Assistant"))] == [
        "User deploys with Ansible."
    ]


def test_relative_dates() -> None:
    assert pin_dates("Three weeks ago I ran a 10k; last year I swam.", MAY_8) == (
        "Three weeks ago (about 17 April 2023) I ran a 10k; last year (2022) I swam."
    )
    assert pin_dates("yesterday", None) == "yesterday"
