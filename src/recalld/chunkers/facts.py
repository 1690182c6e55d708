"""Offline heuristic fact extraction, used when no LLM is configured.

This is deliberately simple and clearly labelled (`meta["extractor"] = "heuristic"`): it turns
what people say about themselves into short third-person statements that match questions such
as "Where did Caroline move?" better than the raw dialogue does. For each sentence of each
human turn of a round it

1. drops questions, greetings, thanks and filler ("Wow, that's great!"), and sentences with
   fewer than two content words;
2. strips leading interjections ("Oh, ", "Haha yeah, ");
3. rewrites first person into the speaker's name ("I moved" -> "Caroline moved", "my" ->
   "Caroline's", "we" -> "Caroline and others") and second person into the other speaker's,
   with the verb after a replaced "I" put in the third person ("I love" -> "Caroline loves");
4. attributes anything else to the speaker ("Caroline said that the stories were inspiring.");
5. pins relative dates to the session date ("yesterday" -> "yesterday (7 May 2023)").

Assistant turns are skipped: they answer, and what they say is not a fact about the user.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from recalld.chunkers.formats.model import Round
from recalld.chunkers.split import sentence_spans

_MAX_WORDS = 45
_MAX_FACTS_PER_TURN = 12

_STOP = frozenset(
    """a about above after again against all also am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    out over own same she should so some such than that the their theirs them then there these
    they this those through to too under until up very was we were what when where which while
    who whom why will with would you your yours yourself yourselves i'm i've i'll i'd it's that's
    there's what's don't didn't can't won't isn't wasn't aren't let's gonna wanna got get gets
    really one thing things lot lots bit kind sort way much many still even ever always never
    going go went come came make made something anything everything stuff yes yeah""".split()
)
_FILLER = frozenset(
    """wow cool awesome amazing great nice good lovely wonderful fantastic incredible beautiful
    glad happy thanks thank congrats congratulations sounds sound fun love proud sweet exciting
    excited sure ok okay hey hi hello bye lol haha omg well oh right true agree definitely
    absolutely totally indeed care luck hugs cheers welcome pleasure appreciate hope hear heard
    feel feels felt know knew mean see seen think guess bet super pretty inspiring inspired
    powerful hard tough cute interesting glad tell means meant pic pics photo photos picture
    pictures gorgeous stunning adorable""".split()
)
_DROP_OPENINGS = re.compile(
    r"^(?:thanks?\b|thank you|congrat|good luck|take care|see you|talk (?:to you )?soon|bye\b|"
    r"have an? (?:great|good|nice|fun)|(?:so |really )?(?:glad|sorry|happy|good|nice) to hear|"
    r"(?:that|it) sounds|sounds like|you'?re welcome|no problem|me too|same here|let me know|"
    r"keep (?:it )?up|can't wait to (?:hear|see)|tell me|good to see|nice to (?:see|meet))",
    re.IGNORECASE,
)
_INTERJECTION = re.compile(
    r"^(?i:oh+|wow+|yeah+|yes|yep|yup|haha+|hah|lol|well|hey+|hi|hello|omg|ah+|aw+|ooh+|hmm+|"
    r"okay|ok|sure|totally|absolutely|definitely|right|honestly|man|girl|dude|so)\b"
    r"(?:,?\s+[A-Z][a-z]+)?\s*[,!.\u2026-]+\s*"
)
# "So cool you found ..." -> "you found ...".
_PRAISE = re.compile(
    r"^(?i:(?:so|that's|that is|it's|how|really)\s+)?(?i:cool|great|awesome|amazing|nice|"
    r"wonderful|lovely|fantastic|sweet|good)\s+(?:that\s+)?(?=(?:you|I|we|your|my)\b)"
)
_CAPTION = re.compile(r"\s*\[shares ([^\]]+)\]")
_CODEY = re.compile(r"[{}<>=;`|\\/_#$]")

_ADVERBS = (
    r"really|also|just|still|always|never|usually|often|actually|totally|finally|recently|even|"
    r"sometimes|definitely|kinda|mostly|already|only|probably|truly|absolutely|seriously|"
    r"literally|especially|currently|now|then|once|first|both|all"
)
_I_VERB = re.compile(rf"\bI(\s+)((?:(?:{_ADVERBS})\s+){{0,3}})([A-Za-z][a-z']*)\b")
_CONTRACTION = re.compile(r"\b(I|[Yy]ou|[Ww]e)'(m|re|ve|ll|d)\b")
_YOU_AUX = re.compile(r"\b([Yy]ou)\s+(are|were|have|do|don't|haven't|aren't|weren't)\b")
_WE = re.compile(r"\b(?:[Ww]e|[Uu]s)\b")
_PRONOUNS = re.compile(
    r"\b(I|[Mm]e|[Mm]y|[Mm]ine|[Mm]yself|[Ww]e|[Uu]s|[Oo]ur|[Oo]urs|[Oo]urselves|[Yy]ou|[Yy]our|"
    r"[Yy]ours|[Yy]ourself)\b"
)

_AUX = {
    "am": "is",
    "are": "is",
    "were": "was",
    "have": "has",
    "do": "does",
    "don't": "doesn't",
    "haven't": "hasn't",
    "aren't": "isn't",
    "weren't": "wasn't",
}
_KEEP = frozenset(
    """can could will would shall should may might must was did had got went made took saw came
    found felt thought told gave knew left met bought brought began ran wrote heard kept lost paid
    put said sent set sat spent stood taught understood won wore drove ate fell forgot grew held
    hit hurt built caught chose cut drew drank let lit meant quit rode rose sang slept sold spoke
    swam threw woke became read led fed fled hid shot stuck struck dug hung spun sought fought
    broke froze stole swore tore bore forgave overcame shut bit slid lent dealt""".split()
)
_CONTRACTED = {"m": "is", "re": "is", "ve": "has", "ll": "will", "d": "would"}
_PLURAL_CONTRACTED = {"m": "are", "re": "are", "ve": "have", "ll": "will", "d": "would"}
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "a few": 3}
_AGO = re.compile(
    r"\b(\d+|a|an|one|two|three|four|five|a few|a couple of)\s+(day|week|month|year)s?\s+ago\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Fact:
    """One extracted statement and where it came from."""

    text: str
    speaker: str
    turn_id: str


def third_person(verb: str) -> str:
    """Put a verb that followed "I" into the third person singular ("love" -> "loves")."""
    low = verb.lower()
    if low in _AUX:
        return _AUX[low]
    if low in _KEEP or low.endswith(("ed", "n't")) or not low.isalpha():
        return verb
    if low.endswith(("s", "sh", "ch", "x", "z", "o")):
        return verb + "es"
    if low.endswith("y") and len(low) > 1 and low[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


def rewrite(sentence: str, name: str, other: str | None) -> str:
    """Rewrite first (and, given `other`, second) person into names."""
    group = f"{name} and others"

    def contraction(match: re.Match[str]) -> str:
        who, suffix = match.group(1).lower(), match.group(2)
        if who == "we":
            return f"{group} {_PLURAL_CONTRACTED[suffix]}"
        if who == "you" and other is None:
            return match.group(0)
        return f"{name if who == 'i' else other} {_CONTRACTED[suffix]}"

    text = _CONTRACTION.sub(contraction, sentence)
    text = _I_VERB.sub(lambda m: f"{name}{m.group(1)}{m.group(2)}{third_person(m.group(3))}", text)
    if other is not None:
        text = _YOU_AUX.sub(lambda m: f"{other} {_AUX[m.group(2)]}", text)
    replacements = {
        "i": name,
        "me": name,
        "myself": name,
        "my": f"{name}'s",
        "mine": f"{name}'s",
        "we": group,
        "us": group,
        "ourselves": group,
        # "We all have our paths": with "we" around, "our" is theirs, not the speaker's.
        "our": "their" if _WE.search(sentence) else f"{name}'s",
        "ours": "theirs" if _WE.search(sentence) else f"{name}'s",
    }
    if other is not None:
        replacements |= {
            "you": other,
            "yourself": other,
            "your": f"{other}'s",
            "yours": f"{other}'s",
        }
    return _PRONOUNS.sub(lambda m: replacements.get(m.group(1).lower(), m.group(1)), text)


def _date(when: datetime) -> str:
    return f"{when.day} {when.strftime('%B %Y')}"


def _month(when: datetime, delta: int) -> str:
    index = when.year * 12 + when.month - 1 + delta
    return datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC).strftime("%B %Y")


def pin_dates(sentence: str, time: float | None) -> str:
    """Annotate relative dates with the absolute date they mean, given the session time."""
    if time is None:
        return sentence
    day = datetime.fromtimestamp(time, UTC)
    fixed = {
        "yesterday": _date(day - timedelta(days=1)),
        "last night": _date(day - timedelta(days=1)),
        "today": _date(day),
        "tonight": _date(day),
        "this morning": _date(day),
        "tomorrow": _date(day + timedelta(days=1)),
        "last week": f"the week before {_date(day)}",
        "last weekend": f"the weekend before {_date(day)}",
        "next week": f"the week after {_date(day)}",
        "last month": _month(day, -1),
        "this month": _month(day, 0),
        "next month": _month(day, 1),
        "last year": str(day.year - 1),
        "this year": str(day.year),
        "next year": str(day.year + 1),
    }
    pattern = re.compile(r"\b(" + "|".join(fixed) + r")\b", re.IGNORECASE)
    done: set[str] = set()

    def pin(match: re.Match[str]) -> str:
        phrase = match.group(1).lower()
        if phrase in done:
            return match.group(0)
        done.add(phrase)
        return f"{match.group(0)} ({fixed[phrase]})"

    text = pattern.sub(pin, sentence)

    def ago(match: re.Match[str]) -> str:
        amount = match.group(1).lower()
        count = int(amount) if amount.isdigit() else _NUMBERS.get(amount, 2)
        unit = match.group(2).lower()
        if unit == "day":
            when = _date(day - timedelta(days=count))
        elif unit == "week":
            when = _date(day - timedelta(weeks=count))
        elif unit == "month":
            when = _month(day, -count)
        else:
            when = str(day.year - count)
        return f"{match.group(0)} (about {when})"

    return _AGO.sub(ago, text, count=1)


def _content_words(text: str, names: frozenset[str]) -> int:
    words = re.findall(r"[a-z][a-z'-]*", text.lower())
    return sum(
        1 for w in words if len(w) > 2 and w not in _STOP and w not in _FILLER and w not in names
    )


def _statement(sentence: str, name: str, other: str | None, names: frozenset[str]) -> str | None:
    """The fact a sentence states, or None if it states nothing worth keeping."""
    text = " ".join(sentence.replace("\u2019", "'").split()).lstrip("-*\u2022 ")
    while match := _INTERJECTION.match(text) or _PRAISE.match(text):
        text = text[match.end() :]
    if not text or text.endswith("?") or _DROP_OPENINGS.match(text):
        return None
    words = text.split()
    if len(words) > _MAX_WORDS or len(_CODEY.findall(text)) > len(words) // 4:
        return None
    if _content_words(text, names) < 2:
        return None
    text = text.rstrip(" .!\u2026")
    if _PRONOUNS.search(text):
        text = rewrite(text, name, other)
    else:
        first = text.split()[0]
        if first.lower() in _STOP or first.lower() in _FILLER:
            text = f"{name} said that {text[0].lower()}{text[1:]}"
        else:
            # The first word may be a name ("Lisbon is ..."), so its case is left alone.
            text = f"{name} said: {text}"
    return text[0].upper() + text[1:] + "."


def heuristic_facts(rnd: Round, speakers: Sequence[str], time: float | None = None) -> list[Fact]:
    """Extract short third-person facts from the human turns of one round.

    Args:
        rnd: The round.
        speakers: Everyone in the conversation; with exactly two people, "you" is rewritten
            into the other one's name, and with a model, into "the assistant".
        time: The session time, to pin relative dates.

    Returns:
        The facts in turn order, without duplicates.
    """
    people = list(speakers)
    names = frozenset(w.lower() for s in speakers for w in s.split())
    facts: list[Fact] = []
    seen: set[str] = set()
    for turn in rnd.turns:
        if turn.role != "user":
            continue
        if len(people) == 2 and turn.speaker in people:
            other: str | None = people[1 - people.index(turn.speaker)]
        else:
            other = "the assistant" if any(t.role == "assistant" for t in rnd.turns) else None
        if other is not None and other.lower() == "assistant":
            other = "the assistant"
        text = turn.text
        found: list[str] = []
        for caption in _CAPTION.findall(text):
            found.append(f"{turn.speaker} shared {caption.strip().rstrip('.')}.")
        text = _CAPTION.sub("", text)
        for start, end in sentence_spans(text):
            statement = _statement(text[start:end], turn.speaker, other, names)
            if statement is not None:
                found.append(pin_dates(statement, time))
        for statement in found[:_MAX_FACTS_PER_TURN]:
            folded = statement.lower()
            if folded not in seen:
                seen.add(folded)
                facts.append(Fact(statement, turn.speaker, turn.id))
    return facts
