"""The time-aware stage: a query's time intent as a filter or as a soft boost on fused scores.

    intent (timeparse) ─▶ filter: narrow `Filters.since/until` before recall
                      └─▶ boost:  score * (1 + w_range * proximity + w_order * place-in-time)

A chunk's event time is when it was said or written, while the query names when something
happened: people mention last month's trip this month. So the boost is soft: full inside the
range, halving every `grace` outside it (grace = the range's width, at least a week), and the
filter is opt-in (measured on LoCoMo dev; README, Benchmarks). Pure functions on plain lists,
and the ranking stage (`TimeBoost`) that applies the boost to a search's candidates.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from recalld.retrieval.pipeline import Candidates, Query, Stage
from recalld.retrieval.timeparse import TimeIntent, parse
from recalld.types import Filters

DAY = 86400.0
MIN_GRACE = 7 * DAY


def iso(seconds: float | None) -> str | None:
    """A timestamp as an ISO 8601 UTC string, for `explain`."""
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


async def read_intent(
    query: str,
    anchor: float,
    find_event: Callable[[str], Awaitable[float | None]],
) -> tuple[TimeIntent, dict[str, Any]]:
    """Parse the query against the anchor and resolve a named event to its time.

    Args:
        query: The user's question.
        anchor: "Now" for the question: the latest event time in its scope (unix seconds).
        find_event: Looks up an event phrase ("the trip") and returns when it was mentioned.

    Returns:
        The intent (with the event folded into its range) and its `explain` entry.
    """
    intent = parse(query, datetime.fromtimestamp(anchor, UTC))
    note: dict[str, Any] = {"anchor": iso(anchor)}
    if intent.event and intent.relation:
        when = await find_event(intent.event)
        note["event"] = {"phrase": intent.event, "relation": intent.relation, "at": iso(when)}
        if when is not None:
            # The day the event was mentioned counts on both sides: one session often tells
            # what came before and after it.
            day = when - when % DAY
            if intent.relation == "before":
                end = day + DAY if intent.end is None else min(intent.end, day + DAY)
                intent = dataclasses.replace(intent, end=end)
            else:
                start = day if intent.start is None else max(intent.start, day)
                intent = dataclasses.replace(intent, start=start)
    note.update(
        {
            "phrases": list(intent.phrases),
            "start": iso(intent.start),
            "end": iso(intent.end),
            "order": intent.order,
        }
    )
    return intent, note


def narrow(filters: Filters, intent: TimeIntent) -> Filters:
    """The filters with the intent's range intersected into their time bounds."""
    since, until = filters.since, filters.until
    if intent.start is not None:
        since = intent.start if since is None else max(since, intent.start)
    if intent.end is not None:
        until = intent.end if until is None else min(until, intent.end)
    return dataclasses.replace(filters, since=since, until=until)


def proximity(when: float | None, start: float | None, end: float | None) -> float:
    """1 inside [start, end), halving every grace period outside; 0 for unknown times."""
    if when is None:
        return 0.0
    width = (end - start) if start is not None and end is not None else 0.0
    grace = max(width, MIN_GRACE)
    if start is not None and when < start:
        return float(0.5 ** ((start - when) / grace))
    if end is not None and when >= end:
        return float(0.5 ** ((when - end) / grace))
    return 1.0


def order_scores(times: Sequence[float | None], order: str) -> list[float]:
    """Each candidate's place in time, 1 for the earliest (`asc`) or latest (`desc`), 0 for
    the other end and for unknown times; equal times share a place."""
    known = sorted({t for t in times if t is not None}, reverse=(order == "desc"))
    if len(known) < 2:
        return [0.0 for _ in times]
    place = {t: 1.0 - i / (len(known) - 1) for i, t in enumerate(known)}
    return [0.0 if t is None else place[t] for t in times]


def boost(
    order: list[int],
    scores: dict[int, float],
    times: dict[int, float | None],
    intent: TimeIntent,
    *,
    range_weight: float,
    order_weight: float,
) -> tuple[list[int], dict[int, float], dict[int, dict[str, float]]]:
    """Multiply each candidate's score by its time boost and re-sort.

    Returns:
        The new order, the boosted scores and each boosted candidate's detail for `explain`.
    """
    use_range = intent.has_range and range_weight > 0
    use_order = intent.order is not None and order_weight > 0
    if not order or not (use_range or use_order):
        return order, scores, {}
    places = order_scores([times[c] for c in order], intent.order or "asc") if use_order else []
    boosted = dict(scores)
    detail: dict[int, dict[str, float]] = {}
    for index, cid in enumerate(order):
        parts: dict[str, float] = {}
        if use_range:
            parts["in_range"] = round(proximity(times[cid], intent.start, intent.end), 4)
        if use_order:
            parts["time_order"] = round(places[index], 4)
        factor = 1.0 + range_weight * parts.get("in_range", 0.0)
        factor += order_weight * parts.get("time_order", 0.0)
        # A negative score (vector mode, dissimilar) must still move up when boosted.
        boosted[cid] = scores[cid] * factor if scores[cid] >= 0 else scores[cid] / factor
        parts["multiplier"] = round(factor, 4)
        detail[cid] = parts
    return sorted(order, key=lambda c: (-boosted[c], c)), boosted, detail


class TimeBoost(Stage):
    """The query's time intent boosts (or, filtered in recall already, orders) the candidates."""

    name = "time"

    def enabled(self, query: Query) -> bool:
        return query.intent is not None

    async def run(self, query: Query, found: Candidates) -> None:
        assert query.intent is not None  # enabled() says so
        opts = query.settings
        # A filtered range needs no boost; an ordering still applies.
        found.order, found.scores, detail = boost(
            found.order,
            found.scores,
            {c: found.chunks[c].event_time for c in found.order},
            query.intent,
            range_weight=opts.time_weight if opts.time_mode == "boost" else 0.0,
            order_weight=opts.time_order_weight,
        )
        found.notes(self.name).update(detail)
        found.summary["time"] = {**(query.time_note or {}), "mode": opts.time_mode}
