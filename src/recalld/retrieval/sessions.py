"""Session-first scoring: match small, return big (Memsense's session-first hybrid scoring).

A conversation's turn-level units (rounds, turn windows, facts) match a question's words
closely; the session around them holds the context a reader needs. With
`search.session_first`, each turn-level candidate adds bounded support to the session (part)
it belongs to, and the sessions are returned in place of their turns:

    session score = own score + min(session_support_cap, session_support_weight x best turn)

where the own score is the session's fused score when recall found it and 0 when it did not
(a granularity filter keeps sessions out of recall: then sessions rank by their turns only),
and "best turn" is the highest score among the session's turn-level candidates. Memsense's
published constants are a cap of 0.12 and a weight of 0.6 (over RRF scores); a cap of 1 and a
weight of 1 rank sessions by their best turn alone. Candidates outside conversation sessions
(documents, memories) keep their score. `explain` gives each session its own score, the
support, how many turns supported it and the best of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from recalld.retrieval.pipeline import Candidates, Query, Stage
from recalld.types import Chunk

SESSION = "session"
_MAX_DEPTH = 3  # fact → round → session part; window → round → session part


@dataclass(frozen=True, slots=True)
class Support:
    """How a session was scored from its turns."""

    own: float
    support: float
    turns: int
    best_turn: int

    def as_dict(self) -> dict[str, Any]:
        """For `explain`."""
        return {
            "own": round(self.own, 6),
            "support": round(self.support, 6),
            "supporting_turns": self.turns,
            "best_turn": self.best_turn,
        }


async def session_of(found: Candidates, ids: list[int]) -> dict[int, int]:
    """The session chunk each of `ids` belongs to (conversation chunks below a session only).

    Parents are read from the store level by level; the sessions found are added to
    `found.chunks`.
    """
    known: dict[int, Chunk] = {c: found.chunks[c] for c in ids if c in found.chunks}
    frontier = {c: known[c] for c in ids if c in known and _below_session(known[c])}
    out: dict[int, int] = {}
    for _ in range(_MAX_DEPTH):
        if not frontier:
            break
        wanted = sorted({ch.parent_id for ch in frontier.values() if ch.parent_id is not None})
        missing = [p for p in wanted if p not in known]
        if missing:
            known.update(await _read(found, missing))
        nxt: dict[int, Chunk] = {}
        for cid, chunk in frontier.items():
            parent = known.get(chunk.parent_id) if chunk.parent_id is not None else None
            if parent is None:
                continue
            if parent.granularity == SESSION:
                out[cid] = parent.id
            else:
                nxt[cid] = parent
        frontier = nxt
    for cid, chunk in known.items():
        if chunk.granularity == SESSION:
            found.chunks.setdefault(cid, chunk)
    return out


async def _read(found: Candidates, ids: list[int]) -> dict[int, Chunk]:
    return await found.store.read(lambda c: c.chunks_by_id(ids))


def _below_session(chunk: Chunk) -> bool:
    return chunk.kind == "conversation" and chunk.granularity != SESSION


def aggregate(
    order: list[int],
    scores: Mapping[int, float],
    sessions: Mapping[int, int],
    cap: float,
    weight: float,
) -> tuple[list[int], dict[int, float], dict[int, Support]]:
    """Replace turn-level candidates by their sessions, scored with bounded turn support.

    Args:
        order: The candidates, best first.
        scores: Their scores.
        sessions: Turn-level candidate to its session.
        cap: The most support a session can get from its turns.
        weight: The share of the best turn's score that becomes support.

    Returns:
        The new order (best first), every kept candidate's score, and each session's support.
    """
    best: dict[int, int] = {}
    count: dict[int, int] = {}
    for cid in order:
        session = sessions.get(cid)
        if session is None:
            continue
        count[session] = count.get(session, 0) + 1
        if session not in best or scores[cid] > scores[best[session]]:
            best[session] = cid
    new: dict[int, float] = {c: scores[c] for c in order if c not in sessions}
    support: dict[int, Support] = {}
    for session, turn in best.items():
        # Its fused score when recall found it (also beyond the pool), else 0.
        own = scores.get(session, 0.0)
        lift = min(cap, weight * max(scores[turn], 0.0))
        new[session] = own + lift
        support[session] = Support(own, lift, count.get(session, 0), turn)
    ranked = sorted(new, key=lambda c: (-new[c], c))
    return ranked, new, support


class SessionFirst(Stage):
    """`search.session_first`: sessions returned in place of their turns, with bounded support."""

    name = "sessions"

    def enabled(self, query: Query) -> bool:
        return query.settings.session_first

    async def run(self, query: Query, found: Candidates) -> None:
        found.summary["session_first"] = True
        if not found.order:
            return
        sessions = await session_of(found, found.order)
        if not sessions:
            return
        opts = query.settings
        found.order, found.scores, support = aggregate(
            found.order,
            found.scores,
            sessions,
            opts.session_support_cap,
            opts.session_support_weight,
        )
        for session, how in support.items():
            found.fused.setdefault(session, how.own)
        await found.load()
        found.notes(self.name).update({s: how.as_dict() for s, how in support.items()})
