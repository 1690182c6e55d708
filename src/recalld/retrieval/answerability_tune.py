"""Answerability calibrated by each store on its own conversations, with no labels (issue 14).

The answerability stage (retrieval/answerability.py) rejects a result set whose ownership is
below a threshold. Which threshold separates answered questions from unanswered ones depends on
the store (how many people talk, how much their topics overlap) and on the units searched. The
store learns it the way it learns its fusion (retrieval/selftune.py), from pseudo-questions
whose answer it knows is there or not:

    answerable    a turn's speaker, named, with one to three of the turn's content words
                  ("Caroline adoption agencies"), searched as any query is
    unanswerable  the same search with every chunk that holds that turn taken out of the
                  hits: the store no longer holds what was asked, only what else matches

Both come from one search per pseudo-question, run once unfiltered (`all`) and once per
conversation unit the store has (`round`, `window`), since a search filtered to one unit sees
other owners. The pseudo-questions are `DRAWS` draws of up to `QUERIES` each (a unit's turn
drawn again comes with other words): the threshold sits where a few pseudo-questions more or
less cross the budget, and from one draw it moved with the seed. Per scope, for each k in
`KS` and threshold in `THRESHOLDS`, the share of
answerable pseudo-questions rejected (false) and of unanswerable ones rejected; the chosen
pair rejects the most unanswerable ones with at most `MAX_FALSE` of the answerable ones
(ties: the lower false share, the lower threshold, then the larger k, which reads more hits).
When no pair rejects `MIN_MARGIN` more unanswerable than answerable ones, the threshold is 0:
the store's ownership does not tell them apart, and nothing is rejected.

Sampling is seeded, so the same store calibrates to the same thresholds.
"""

from __future__ import annotations

import random
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from recalld.retrieval.answerability import measure_chunks, stem, turns_of
from recalld.storage.contract import Store
from recalld.storage.fts import query_terms
from recalld.types import Chunk

# Eight or ten hits: with fewer, a hit more or less owned moves the ownership by a large step,
# and the share of pseudo-questions under a threshold jumps past the budget at once.
KS = (8, 10)
# Steps of 0.05: at k = 5 a step of 0.1 can move the share of answerable pseudo-questions
# rejected by more than `MAX_FALSE`, from a threshold that rejects little to one over budget.
THRESHOLDS = (0.01, *(round(0.05 * n, 2) for n in range(1, 11)))
# Of the answerable pseudo-questions: the most a store may reject, under the 5 % the issue
# allows, with room for a store's sample. On LoCoMo dev real answerable questions were
# rejected about as often as the pseudo-questions were (README, Benchmarks).
MAX_FALSE = 0.04
QUERIES = 300
DRAWS = 2  # draws of up to QUERIES pseudo-questions each (see above)
# 2: ownership weighs each hit by the words its turn shares, and k is 8 or 10. A threshold
# learned for the signal before means something else: it is not used (the store learns anew).
SIGNAL = 2
MIN_MARGIN = 0.05
MIN_QUERIES = 20
WORDS = (1, 3)  # content words of the turn in a pseudo-question (drawn in this range)
MIN_WORDS = 3  # a turn with fewer content words makes no pseudo-question
HITS = 20  # deep enough to leave max(KS) hits once the turn's chunks are taken out
_PLAIN = re.compile(r"^[A-Za-z]{3,}$")
UNITS = ("round", "window")  # chunks whose lines are the turns they hold
ALL = "all"  # the scope of searches not filtered to one unit

# The search the pseudo-questions run: text, limit and the one granularity searched (None:
# every one) in, the hits' chunks in rank order out.
SearchChunks = Callable[[str, int, str | None], Awaitable[list[Chunk]]]


@dataclass(frozen=True)
class PseudoQuestion:
    """A turn's speaker and some of its words; `turn` is the id of the turn drawn from."""

    text: str
    turn: str


@dataclass
class AnswerabilityTuning:
    """What the store learned: the k and threshold, and how they did on its pseudo-questions."""

    k: int
    threshold: float
    queries: int
    rejected: float  # unanswerable pseudo-questions rejected at (k, threshold)
    false_rejection: float  # answerable pseudo-questions rejected at (k, threshold)
    skipped: str | None = None  # why nothing was learned (threshold 0)
    signal: int = 1  # the ownership it was learned for (records before `SIGNAL` 2 had none)

    def current(self) -> bool:
        """Whether it was learned for today's ownership signal, so searches may use it."""
        return self.signal == SIGNAL

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def pseudo_question(
    speaker: str, text: str, speakers: Sequence[str], rng: random.Random
) -> str | None:
    """The speaker's first name and `WORDS` of the turn's content words (in their order), or
    None when the turn has fewer than `MIN_WORDS` of them."""
    names = {stem(s.split()[0]) for s in speakers if s.split()}
    if not speaker.split():
        return None
    words = [
        w for w in query_terms(text) if _PLAIN.match(w) and stem(w) not in names and len(w) > 3
    ]
    if len(words) < MIN_WORDS:
        return None
    keep = sorted(rng.sample(range(len(words)), min(rng.randint(*WORDS), len(words))))
    return " ".join([speaker.split()[0], *(words[i] for i in keep)])


async def pseudo_questions(
    store: Store, ids: Sequence[int], count: int, rng: random.Random
) -> tuple[list[PseudoQuestion], set[str]]:
    """Up to `count` pseudo-questions from turns of conversations with two or more speakers,
    drawn from rounds and windows sampled with `rng`; and the units (granularities) seen."""
    picked_ids = sorted(rng.sample(list(ids), min(len(ids), count * 6)))
    picked = await store.read(lambda c: c.chunks_by_id(picked_ids))
    out: list[PseudoQuestion] = []
    seen: set[str] = set()
    units: set[str] = set()
    for cid in picked_ids:
        chunk = picked.get(cid)
        speakers = [str(s) for s in (chunk.meta.get("speakers") or [])] if chunk else []
        if chunk is None or chunk.granularity not in UNITS or len(speakers) < 2:
            continue
        units.add(chunk.granularity)
        # One turn per unit, among those with enough words to ask about.
        asked = [
            PseudoQuestion(question, turn)
            for turn, speaker, text in turns_of(chunk)
            if turn not in seen and (question := pseudo_question(speaker, text, speakers, rng))
        ]
        if asked:
            chosen = rng.choice(asked)
            seen.add(chosen.turn)
            out.append(chosen)
    rng.shuffle(out)
    return out[:count], units


def holds(chunk: Chunk, turn: str) -> bool:
    """Whether the chunk holds the turn (a session, round or window with it, or a fact drawn
    from its round)."""
    return turn in {str(t) for t in chunk.meta.get("turn_ids") or []}


def ownerships(
    question: PseudoQuestion, hits: Sequence[Chunk]
) -> tuple[dict[int, float | None], dict[int, float | None]]:
    """The ownership at every k of the hits as found (answerable) and with every chunk that
    holds the question's turn taken out (unanswerable)."""
    without = [c for c in hits if not holds(c, question.turn)]
    found = {k: measure_chunks(question.text, hits, k).ownership for k in KS}
    removed = {k: measure_chunks(question.text, without, k).ownership for k in KS}
    return found, removed


def rejected_share(values: Sequence[float | None], threshold: float) -> float:
    """The share of the pseudo-questions whose ownership is below the threshold (None: kept)."""
    if not values:
        return 0.0
    return sum(1 for v in values if v is not None and v < threshold) / len(values)


def choose(
    answerable: dict[int, list[float | None]], unanswerable: dict[int, list[float | None]]
) -> AnswerabilityTuning:
    """The (k, threshold) that rejects the most unanswerable pseudo-questions with at most
    `MAX_FALSE` of the answerable ones; threshold 0 when none does by `MIN_MARGIN`."""
    queries = len(answerable[KS[0]])
    best: tuple[float, float, float, int] | None = None  # (rejected, -false, -threshold, k)
    for k in KS:
        for threshold in THRESHOLDS:
            false = rejected_share(answerable[k], threshold)
            caught = rejected_share(unanswerable[k], threshold)
            if false > MAX_FALSE or caught - false < MIN_MARGIN:
                continue
            option = (caught, -false, -threshold, k)
            if best is None or option > best:
                best = option
    if best is None:
        k = KS[-1]
        return AnswerabilityTuning(k, 0.0, queries, 0.0, 0.0, signal=SIGNAL)
    caught, false, threshold, k = best
    return AnswerabilityTuning(
        k, -threshold, queries, round(caught, 4), round(-false, 4), signal=SIGNAL
    )


def scope_of(granularities: Sequence[str]) -> str:
    """The scope a search filtered to `granularities` uses: the unit when it is one."""
    return granularities[0] if len(granularities) == 1 else ALL


async def calibrate(
    store: Store,
    search: SearchChunks,
    *,
    queries: int = QUERIES,
    seed: int = 0,
    progress: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
) -> dict[str, AnswerabilityTuning]:
    """Learn the store's answerability thresholds from pseudo-questions on its conversations,
    for unfiltered searches (`all`) and for each conversation unit it holds.

    Args:
        store: The store (read only; the result is recorded with the fusion calibration).
        search: Runs one pseudo-question as a search with rejection off.
        queries: Pseudo-questions per draw (`DRAWS` draws; each costs one search per scope).
        seed: Sampling seed (the same store and seed give the same thresholds).
        progress: Told `{"kind": "answerability", "done", "total"}` every 20 searches.
    """
    by_kind = await store.read(lambda r: r.chunk_ids_by_kind())
    ids = by_kind.get("conversation", [])
    rng = random.Random(f"{seed}:answerability")
    drawn: list[PseudoQuestion] = []
    units: set[str] = set()
    for _ in range(DRAWS if ids else 0):
        more, seen = await pseudo_questions(store, ids, queries, rng)
        drawn += more
        units |= seen
    if len(drawn) < MIN_QUERIES:
        why = f"{len(drawn)} pseudo-questions (fewer than {MIN_QUERIES})"
        return {
            ALL: AnswerabilityTuning(KS[-1], 0.0, len(drawn), 0.0, 0.0, skipped=why, signal=SIGNAL)
        }
    scopes = [ALL, *sorted(units)]
    learned: dict[str, AnswerabilityTuning] = {}
    done = 0
    for scope in scopes:
        answerable: dict[int, list[float | None]] = {k: [] for k in KS}
        unanswerable: dict[int, list[float | None]] = {k: [] for k in KS}
        for question in drawn:
            hits = await search(question.text, HITS, None if scope == ALL else scope)
            found, removed = ownerships(question, hits)
            for k in KS:
                answerable[k].append(found[k])
                unanswerable[k].append(removed[k])
            done += 1
            if progress is not None and done % 20 == 0:
                total = len(drawn) * len(scopes)
                await progress({"kind": "answerability", "done": done, "total": total})
        learned[scope] = choose(answerable, unanswerable)
    return learned
