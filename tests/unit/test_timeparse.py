"""The query time parser and the time boost, with fixed anchors (no wall clock)."""

from datetime import UTC, datetime

import pytest

from recalld.retrieval import temporal
from recalld.retrieval.timeparse import parse, read_date
from recalld.types import Filters

# A Sunday afternoon; the latest session of a 2023 conversation, say.
ANCHOR = datetime(2023, 10, 22, 14, 0, tzinfo=UTC)


def day(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("what did we talk about yesterday", "2023-10-21", "2023-10-22"),
        ("anything today?", "2023-10-22", "2023-10-23"),
        ("the day before yesterday", "2023-10-20", "2023-10-21"),
        ("what did Caroline do last week", "2023-10-09", "2023-10-16"),
        ("what happened this week", "2023-10-16", "2023-10-23"),
        ("plans made last month", "2023-09-01", "2023-10-01"),
        ("Where did John go on a road trip last year?", "2022-01-01", "2023-01-01"),
        ("what did I decide last March", "2023-03-01", "2023-04-01"),
        ("When did Melanie go camping in June?", "2023-06-01", "2023-07-01"),
        ("What setback did Melanie face in October 2023?", "2023-10-01", "2023-11-01"),
        ("How many times has she gone to the beach in 2022?", "2022-01-01", "2023-01-01"),
        ("What did Jon find on 1 February, 2023?", "2023-02-01", "2023-02-02"),
        ("Who did Maria have dinner with on May 3, 2023?", "2023-05-03", "2023-05-04"),
        ("notes from 2023-05-03", "2023-05-03", "2023-05-04"),
        ("what did they enjoy last summer", "2023-06-01", "2023-09-01"),
        ("the week before 9 June 2023", "2023-06-02", "2023-06-09"),
        ("the week of 23 August 2023", "2023-08-21", "2023-08-28"),
        ("What did Maria do last weekend before April 10, 2023?", "2023-04-03", "2023-04-10"),
        ("two weekends before 17 July 2023", "2023-07-03", "2023-07-17"),
        ("in the past two weeks", "2023-10-08", "2023-10-23"),
        ("what happened before 2023-05-01 and since March 2022", "2022-03-01", "2023-05-01"),
        ("her 13 August birthday", "2023-08-13", "2023-08-14"),
    ],
)
def test_ranges(query: str, start: str, end: str):
    intent = parse(query, ANCHOR)
    assert (intent.start, intent.end) == (day(start), day(end)), intent.phrases
    assert intent.phrases


def test_open_ranges():
    before = parse("what did I say before June 2023", ANCHOR)
    assert (before.start, before.end) == (None, day("2023-06-01"))
    after = parse("anything after 3 May 2023?", ANCHOR)
    assert (after.start, after.end) == (day("2023-05-04"), None)
    since = parse("since 2016", ANCHOR)
    assert (since.start, since.end) == (day("2016-01-01"), None)


def test_ago_is_a_window_around_the_point():
    intent = parse("where did she move from 4 years ago?", ANCHOR)
    assert intent.start is not None and intent.end is not None
    assert intent.start < datetime(2019, 10, 22, tzinfo=UTC).timestamp() < intent.end


def test_anchor_decides_the_year_of_a_month_without_one():
    assert parse("in June", datetime(2024, 3, 1, tzinfo=UTC)).start == day("2023-06-01")
    assert parse("in June", datetime(2024, 6, 15, tzinfo=UTC)).start == day("2024-06-01")
    assert parse("last June", datetime(2024, 6, 15, tzinfo=UTC)).start == day("2023-06-01")


@pytest.mark.parametrize(
    ("query", "order"),
    [
        ("When did John have his first firefighter call-out?", "asc"),
        ("the first time we met", "asc"),
        ("what was the earliest plan", "asc"),
        ("What did Melanie paint recently?", "desc"),
        ("the last time she went hiking", "desc"),
        ("what is his latest project", "desc"),
        ("where does she currently live", "desc"),
    ],
)
def test_orderings(query: str, order: str):
    intent = parse(query, ANCHOR)
    assert intent.order == order
    assert not intent.has_range


def test_events():
    intent = parse("What did Melanie do after the road trip to relax?", ANCHOR)
    assert (intent.event, intent.relation) == ("the road trip", "after")
    assert parse("what happened before the trip", ANCHOR).relation == "before"


@pytest.mark.parametrize(
    "query",
    [
        "Why may she go?",
        "what did she say about the summer",
        "kind of dance piece did Gina's team perform to win first place",
        "how do I rotate the keys",
        "They march to the square",
    ],
)
def test_no_time(query: str):
    assert parse(query, ANCHOR).is_empty()


def test_read_date_refuses_impossible_dates():
    assert read_date("31 February 2023", ANCHOR) is None
    assert read_date("hello", ANCHOR) is None


def test_a_range_and_an_order_together():
    intent = parse("their latest project in July 2023", ANCHOR)
    assert intent.order == "desc"
    assert intent.start == day("2023-07-01")


async def test_read_intent_folds_the_event_into_the_range():
    async def find(phrase: str) -> float | None:
        assert phrase == "the trip"
        return day("2023-08-10") + 3600 * 15

    intent, note = await temporal.read_intent(
        "what did we do after the trip", ANCHOR.timestamp(), find
    )
    assert intent.start == day("2023-08-10")  # the event's own day counts
    assert note["event"]["at"] == "2023-08-10T15:00:00Z"
    assert note["anchor"] == "2023-10-22T14:00:00Z"
    before, _ = await temporal.read_intent("what happened before the trip", 0.0, find)
    assert before.end == day("2023-08-11")


def test_proximity_and_boost():
    start, end = day("2023-06-01"), day("2023-07-01")
    assert temporal.proximity(day("2023-06-15"), start, end) == 1.0
    assert temporal.proximity(None, start, end) == 0.0
    # Outside, it halves every range width (30 days here).
    assert temporal.proximity(end + 30 * 86400, start, end) == pytest.approx(0.5)
    assert temporal.proximity(start - 60 * 86400, start, end) == pytest.approx(0.25)
    intent = parse("in June 2023", ANCHOR)
    times = {1: day("2023-10-01"), 2: day("2023-06-10"), 3: None}
    order, scores, detail = temporal.boost(
        [1, 2, 3], {1: 1.0, 2: 0.9, 3: 0.95}, times, intent, range_weight=0.5, order_weight=0.0
    )
    assert order == [2, 1, 3]
    assert scores[2] == pytest.approx(1.35)
    assert detail[3]["multiplier"] == 1.0


def test_order_scores():
    assert temporal.order_scores([3.0, 1.0, None, 2.0], "asc") == [0.0, 1.0, 0.0, 0.5]
    assert temporal.order_scores([3.0, 1.0, 2.0], "desc") == [1.0, 0.0, 0.5]
    assert temporal.order_scores([1.0, None], "asc") == [0.0, 0.0]


def test_narrow_intersects_explicit_filters():
    intent = parse("in 2023", ANCHOR)
    narrowed = temporal.narrow(Filters(since=day("2023-03-01")), intent)
    assert (narrowed.since, narrowed.until) == (day("2023-03-01"), day("2024-01-01"))
