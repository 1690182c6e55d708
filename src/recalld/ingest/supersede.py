"""Knowledge updates by rule: does a newer statement replace an older one? (issue 8, part 3)

A statement is read as a claim `(subject, attribute, value)` by a short table of patterns
("Caroline moved to Lisbon" -> (caroline, residence, lisbon)). A newer statement supersedes an
older one when both are claims about the same subject and attribute with different values.
The caller only asks about pairs that are already similar (a KNN over the store), so the
patterns need not be clever about topic, only about the slot. Anything the table cannot read
is left alone: this rule prefers missing an update to marking a current fact superseded.

The LLM detector (`supersede_llm.py`) judges the same candidate pairs when the facts endpoint
is configured.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SUBJECT = r"(?P<s>[A-Z][\w.-]*(?: [A-Z][\w.-]*){0,2}|I|[Tt]he user|[Uu]ser)"
_NOW = r"(?:now |currently |still |just |recently |finally |has |have |had )*"

# (attribute, pattern); a `(?P<a>...)` group refines the attribute ("favorite:color").
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (attribute, re.compile(rf"^{_SUBJECT}{pattern}$"))
    for attribute, pattern in (
        (
            "residence",
            " " + _NOW + r"(?:lives?|living|resides?|is based|(?:is|am) living) in (?P<v>.+)",
        ),
        (
            "residence",
            " " + _NOW + r"(?:moved|moves|relocated|is moving|am moving) (?:back )?to (?P<v>.+)",
        ),
        ("residence", r"'s (?:home|house|flat|apartment) is (?:now )?in (?P<v>.+)"),
        ("employer", " " + _NOW + r"(?:works?|working|is working|am working) (?:at|for) (?P<v>.+)"),
        (
            "employer",
            " "
            + _NOW
            + r"(?:started|began|starts) (?:a new job |working |to work )(?:at|for|with) (?P<v>.+)",
        ),
        (
            "employer",
            " "
            + _NOW
            + r"(?:got|took|accepted|started) a (?:new )?(?:job|position) (?:at|with) (?P<v>.+)",
        ),
        ("job", " " + _NOW + r"(?:works?|working) as (?:an? )?(?P<v>.+)"),
        ("job", r"'s (?:job|role|position|job title|occupation) is (?:now )?(?:an? )?(?P<v>.+)"),
        ("favorite", r"'s (?:new )?favou?rite (?P<a>[\w -]+?) is (?:now )?(?P<v>.+)"),
        (
            "partner",
            " "
            + _NOW
            + r"(?:is |am )?(?:married to|dating|engaged to|in a relationship with) (?P<v>.+)",
        ),
        ("age", r" (?:is|am|turned) (?P<v>\d+)(?: years? old)?"),
        ("preference", " " + _NOW + r"(?:prefers?|preferring) (?P<v>.+?) (?:for|when) (?P<a>.+)"),
        (
            "uses",
            " " + _NOW + r"(?:uses?|switched to|is using|am using) (?P<v>.+?) (?:for|as) (?P<a>.+)",
        ),
    )
)
# Where a value stops: time and reason clauses, asides, a second clause.
_VALUE_END = re.compile(
    r"\s*(?:\(|,|;| - | \u2014 | and | but | because | since | after | before | from | with | "
    r"when | where | which | who | last | this | next | in (?:\d|january|february|march|april|"
    r"may|june|july|august|september|october|november|december|the )|on \d| \d{4}\b| now$|"
    r" these days$| anymore$| at the moment$).*$",
    re.IGNORECASE,
)
_ARTICLE = re.compile(r"^(?:the|a|an|her|his|their|my|our|new) ", re.IGNORECASE)
_QUOTED = re.compile(r"^([A-Z][\w.-]*) said(?: that)?:? ")
_SELF = {"i", "user", "the user", "me"}


@dataclass(frozen=True, slots=True)
class Claim:
    """What a statement says: `subject`'s `attribute` is `value` (all lower case)."""

    subject: str
    attribute: str
    value: str


def _clean_value(value: str) -> str:
    value = _VALUE_END.sub("", value.strip().rstrip(".!"))
    while (stripped := _ARTICLE.sub("", value)) != value:
        value = stripped
    return " ".join(value.lower().split())


def _clean_subject(subject: str) -> str:
    subject = subject.lower()
    return "user" if subject in _SELF else subject


def claim(statement: str) -> Claim | None:
    """The claim a statement makes, or None when no pattern reads it."""
    text = " ".join(statement.replace("\u2019", "'").split()).rstrip(" .!")
    text = re.sub(r"^I'm ", "I am ", text)
    # Heuristic facts quote their speaker: "Caroline said: I ..." is about Caroline.
    quoted = _QUOTED.match(text)
    if quoted is not None:
        speaker, text = quoted.group(1), text[quoted.end() :]
        text = re.sub(r"^I'm ", "I am ", text)
        text = re.sub(r"^I\b", speaker, re.sub(r"^[Mm]y ", f"{speaker}'s ", text))
    text = re.sub(r"^[Mm]y ", "User's ", text)
    for attribute, pattern in _PATTERNS:
        match = pattern.match(text)
        if match is None:
            continue
        value = _clean_value(match.group("v"))
        if not value or len(value.split()) > 6:
            continue
        groups = match.groupdict()
        if groups.get("a"):
            aspect = _clean_value(groups["a"]).replace("colour", "color")
            attribute = f"{attribute}:{aspect}"
        return Claim(_clean_subject(match.group("s")), attribute, value)
    return None


def _same_value(a: str, b: str) -> bool:
    # "lisbon" and "lisbon portugal" name one place; so do "acme" and "acme corp".
    return a == b or a.startswith(b + " ") or b.startswith(a + " ")


def supersedes(newer: str, older: str) -> bool:
    """Whether `newer` states a new value for the same subject and attribute as `older`."""
    new, old = claim(newer), claim(older)
    if new is None or old is None:
        return False
    return (
        new.subject == old.subject
        and new.attribute == old.attribute
        and not _same_value(new.value, old.value)
    )
