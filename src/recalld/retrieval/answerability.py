"""Answerability beyond off-topic: do the hits hold what the query asks about (issue 14)?

The similarity gate catches questions about nothing in the store. A question about the people
and topics of a conversation whose answer is not there passes it: its words match turns about
the same topic, said by someone else ("What did Melanie paint?" when Caroline painted). The
hits say who owns what they hold:

    ownership  the query names people who speak in the hits (by first name, possessives too);
               in each of the top `k` hits, the turn (or fact) that shares most of the
               query's other words belongs to one of them, or not. Each hit weighs its rank
               (1, 1/2, 1/3, ...) times the number of words that turn shares, over the hits
               where some turn shares a word; None when the query names no speaker or no
               turn shares a word (then it says nothing).

A hit whose best turn shares one word of the query says less than one that shares four: an
unanswered question still finds turns with one of its words said by its person, and an
answered one a turn with most of them. Counting every hit alike made the store-learned
threshold land on either side of the target from one sample of pseudo-questions to the next
(LoCoMo dev, README, Benchmarks).

A turn belongs to the people who said it, and so does a question someone else asks when the
next turn, its reply, is theirs: the question holds the words ("What books do you enjoy?"),
the reply the answer, so a round of question and reply is about the one who replies. Without
this, a question about someone was read as owned by whoever asked them about it, and answered
questions looked unanswered (LoCoMo dev, round granularity: README, Benchmarks).

A result set whose ownership is below `search.answerability_threshold` (0: off) is
`rejected`; `explain` carries the figures either way (the `AnswerabilityCheck` stage, last).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from recalld.retrieval.pipeline import Candidates, Query, Stage
from recalld.storage.fts import query_terms
from recalld.types import Chunk, Hit

_LINE = re.compile(r"^([^:\n]{1,60}): (.+)$")
_WORD = re.compile(r"\w+(?:'\w+)*")
_SUFFIXES = ("ing", "ed", "es", "s")


@dataclass(frozen=True, slots=True)
class Answerability:
    """What the top hits say about whether the query is answered."""

    ownership: float | None
    people: tuple[str, ...]
    k: int

    def as_dict(self) -> dict[str, object]:
        return {
            "ownership": None if self.ownership is None else round(self.ownership, 4),
            "people": list(self.people),
            "k": self.k,
        }


def stem(word: str) -> str:
    """A crude stem, enough to match "volunteer" with "volunteering" and "Maria's" with "Maria"."""
    word = word.lower()
    word = word[:-2] if word.endswith("'s") else word
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def words_of(text: str) -> set[str]:
    """The stems of the text's words."""
    return {stem(w) for w in _WORD.findall(text)}


def named_people(query: str, speakers: Sequence[str]) -> tuple[str, ...]:
    """The speakers the query names by first name."""
    words = words_of(query)
    return tuple(s for s in speakers if s.split() and stem(s.split()[0]) in words)


def turns_of(chunk: Chunk) -> list[tuple[str, str, str]]:
    """(turn id, speaker, text) of a round's or window's lines; [] when they do not match its
    turn ids (a round split into parts)."""
    body = [ln for ln in chunk.text.split("\n") if not ln.startswith("[")]
    ids = [str(t) for t in chunk.meta.get("turn_ids") or []]
    if len(body) != len(ids):
        return []
    out = []
    for turn, line in zip(ids, body, strict=True):
        if m := _LINE.match(line):
            out.append((turn, m.group(1), m.group(2)))
    return out


def spoken_turns(chunk: Chunk) -> list[tuple[str, str]]:
    """(speaker, text) of the chunk's "Speaker: text" lines, in order; a fact (no such lines)
    is one turn said by its one speaker."""
    turns = [(m.group(1), m.group(2)) for m in map(_LINE.match, chunk.text.split("\n")) if m]
    speakers = chunk.meta.get("speakers") or []
    if not turns and len(speakers) == 1:
        turns = [(str(speakers[0]), chunk.text)]
    return turns


def best_turn(turns: Sequence[tuple[str, str]], terms: set[str]) -> int | None:
    """The index of the turn that shares most of `terms` (the first on ties); None if none
    shares any."""
    best, best_overlap = None, 0
    for index, (_, text) in enumerate(turns):
        overlap = len(terms & words_of(text))
        if overlap > best_overlap:
            best, best_overlap = index, overlap
    return best


def belongs(turns: Sequence[tuple[str, str]], index: int, firsts: set[str]) -> bool:
    """Whether the turn at `index` belongs to the people with these first names (stemmed):
    one of them said it, or it is a question whose next turn, its reply, one of them said."""

    def said_by_them(i: int) -> bool:
        speaker = turns[i][0].split()
        return bool(speaker) and stem(speaker[0]) in firsts

    if said_by_them(index):
        return True
    asked = turns[index][1].rstrip().endswith("?")
    return asked and index + 1 < len(turns) and said_by_them(index + 1)


def measure(query: str, hits: Sequence[Hit], k: int = 3) -> Answerability:
    """The ownership of the top `k` hits for `query` (see the module docstring)."""
    return measure_chunks(query, [h.chunk for h in hits[:k]], k)


def measure_chunks(query: str, chunks: Sequence[Chunk], k: int = 3) -> Answerability:
    """The ownership of the top `k` chunks for `query` (see the module docstring)."""
    top = list(chunks[:k])
    speakers = list(dict.fromkeys(str(s) for c in top for s in c.meta.get("speakers") or []))
    people = named_people(query, speakers)
    if not people:
        return Answerability(None, (), k)
    firsts = {stem(p.split()[0]) for p in people}
    terms = {stem(t) for t in query_terms(query)} - firsts
    owned = seen = 0.0
    for rank, chunk in enumerate(top, start=1):
        turns = spoken_turns(chunk)
        index = best_turn(turns, terms)
        if index is None:
            continue
        weight = len(terms & words_of(turns[index][1])) / rank
        seen += weight
        if belongs(turns, index, firsts):
            owned += weight
    return Answerability(owned / seen if seen else None, people, k)


def rejects(found: Answerability, threshold: float) -> bool:
    """Whether `threshold` (0: off) rejects a result set with these signals."""
    return threshold > 0 and found.ownership is not None and found.ownership < threshold


class AnswerabilityCheck(Stage):
    """Measures the top hits' ownership on every search; below the threshold, rejects them."""

    name = "answerability"

    def enabled(self, query: Query) -> bool:
        return True  # the figures are in `explain` even when the threshold is off

    def reads_every_chunk(self, query: Query) -> bool:
        return False  # the top k

    async def run(self, query: Query, found: Candidates) -> None:
        k = query.settings.answerability_k
        await found.load(k)
        signals = measure_chunks(query.text, [found.chunks[c] for c in found.order[:k]], k)
        found.summary["answerability"] = {
            **signals.as_dict(),
            "threshold": query.settings.answerability_threshold,
            "learned": query.answerability_learned,
        }
        if found.order and rejects(signals, query.settings.answerability_threshold):
            found.order, found.rejected, found.tier = [], True, "low"
