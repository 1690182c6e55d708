"""Time expressions in a query, read into a time range, an ordering or an event to resolve.

    "what did I decide last March"        → range [1 Mar, 1 Apr) of the anchor's year
    "the week before 9 June 2023"         → range [2 Jun, 9 Jun 2023)
    "when did she first go camping"       → ordering: earliest first
    "what did he do after the road trip"  → event "the road trip", relation "after"

Everything is relative to an `anchor` (a datetime in UTC) that the caller chooses: for a
conversation log it is the log's latest event time, not the wall clock, so "last week" in a
2023 chat means a week of 2023. No date library is used: `dateparser` returns points without
their granularity ("in 2023" becomes one day), splits "April 10, 2023" and reads "we" as a
Wednesday; the expressions that matter here are a small closed set, and orderings and events
are not dates at all. Pure functions only: no clock, no I/O.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

Order = Literal["asc", "desc"]

_MONTHS: dict[str, int] = {}
for _number in range(1, 13):
    _MONTHS[calendar.month_name[_number].lower()] = _number
    _MONTHS[calendar.month_abbr[_number].lower()] = _number
_MONTHS["sept"] = 9
_MONTH = r"(?P<{0}>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_FULL_MONTH = r"(?P<{0}>" + "|".join(calendar.month_name[1:]).lower() + r")"
_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "a couple of": 2,
    "a few": 3,
    "several": 3,
}
_COUNT = (
    r"(?P<n>\d{1,3}|a couple of|a few|several|"
    + "|".join(k for k in _NUMBERS if " " not in k)
    + ")"
)
_UNIT = r"(?P<unit>day|night|week|weekend|month|year)s?"
_YEAR = r"(?P<{0}>(?:19|20)\d\d)"
_DAY = r"(?P<{0}>[0-3]?\d)(?:st|nd|rd|th)?"
_SEASONS = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12}


@dataclass(frozen=True, slots=True)
class TimeIntent:
    """What a query says about time.

    Attributes:
        start: The range's first instant (unix seconds, inclusive), if bounded below.
        end: The range's end (unix seconds, exclusive), if bounded above.
        order: `asc` for "the first time", `desc` for "the last time" / "recently".
        event: A phrase naming an event ("the trip") whose time bounds the range.
        relation: `before` or `after` that event.
        phrases: The text that was read, for `explain`.
    """

    start: float | None = None
    end: float | None = None
    order: Order | None = None
    event: str | None = None
    relation: Literal["before", "after"] | None = None
    phrases: tuple[str, ...] = field(default=())

    @property
    def has_range(self) -> bool:
        """True when the intent bounds time on at least one side."""
        return self.start is not None or self.end is not None

    def is_empty(self) -> bool:
        """True when the query says nothing about time."""
        return not (self.has_range or self.order or self.event)


# -- calendar helpers (all UTC) --------------------------------------------------------------


def _day(d: datetime) -> datetime:
    return d.replace(hour=0, minute=0, second=0, microsecond=0)


def _add_months(d: datetime, months: int) -> datetime:
    index = d.year * 12 + d.month - 1 + months
    return d.replace(year=index // 12, month=index % 12 + 1, day=1)


Span = tuple[datetime, datetime]


def _month_span(year: int, month: int) -> Span:
    start = datetime(year, month, 1, tzinfo=UTC)
    return start, _add_months(start, 1)


def _unit_span(unit: str, around: datetime) -> Span:
    """The calendar unit (day, week from Monday, month, year) that contains `around`."""
    day = _day(around)
    if unit in ("day", "night"):
        return day, day + timedelta(days=1)
    if unit == "week":
        start = day - timedelta(days=day.weekday())
        return start, start + timedelta(days=7)
    if unit == "weekend":
        saturday = day - timedelta(days=(day.weekday() - 5) % 7)
        return saturday, saturday + timedelta(days=2)
    if unit == "month":
        return _month_span(day.year, day.month)
    start = day.replace(month=1, day=1)
    return start, start.replace(year=start.year + 1)


def _step(unit: str, count: int) -> timedelta | int:
    """A unit as a timedelta, or as a number of months for months and years."""
    if unit in ("day", "night"):
        return timedelta(days=count)
    if unit in ("week", "weekend"):
        return timedelta(weeks=count)
    return count * (12 if unit == "year" else 1)


def _shift(d: datetime, step: timedelta | int, sign: int) -> datetime:
    return d + sign * step if isinstance(step, timedelta) else _add_months(d, sign * step)


def _latest_month(month: int, anchor: datetime, strictly_before: bool = False) -> Span:
    """The most recent `month` that has begun by the anchor (before its month, if strict)."""
    year = anchor.year
    if month > anchor.month or (strictly_before and month == anchor.month):
        year -= 1
    return _month_span(year, month)


def _season_span(name: str, year: int) -> Span:
    start = datetime(year, _SEASONS[name], 1, tzinfo=UTC)
    return start, _add_months(start, 3)


def _count(text: str | None) -> int:
    if not text:
        return 1
    text = text.lower()
    return int(text) if text.isdigit() else _NUMBERS.get(text, 1)


# -- dates named in the text -----------------------------------------------------------------

_DATE_FORMS: list[tuple[str, str]] = [
    ("iso", r"(?P<y>(?:19|20)\d\d)-(?P<m>[01]\d)-(?P<d>[0-3]\d)"),
    (
        "dmy",
        _DAY.format("d") + r"\s+(?:of\s+)?" + _MONTH.format("mon") + r",?\s+" + _YEAR.format("y"),
    ),
    ("mdy", _MONTH.format("mon") + r"\s+" + _DAY.format("d") + r",?\s+" + _YEAR.format("y")),
    ("my", _MONTH.format("mon") + r",?\s+(?:of\s+)?" + _YEAR.format("y")),
    ("dm", _DAY.format("d") + r"\s+(?:of\s+)?" + _FULL_MONTH.format("mon")),
    ("md", _FULL_MONTH.format("mon") + r"\s+" + _DAY.format("d") + r"(?!\d)"),
    (
        "season",
        r"(?P<which>last|this|next)?\s*(?P<season>spring|summer|autumn|fall|winter)"
        r"(?:\s+(?:of\s+)?" + _YEAR.format("y") + ")?",
    ),
    ("month", r"(?P<which>last|this|next|early|late|mid)?[-\s]*" + _FULL_MONTH.format("mon")),
    ("year", _YEAR.format("y")),
]
_DATE_RES = [(name, re.compile(rf"\b{pattern}\b", re.I)) for name, pattern in _DATE_FORMS]
_DATE_ANY = (
    "(?:" + "|".join(re.sub(r"\(\?P<\w+>", "(?:", pattern) for name, pattern in _DATE_FORMS) + ")"
)


def read_date(text: str, anchor: datetime) -> Span | None:
    """The span a date phrase names ("9 June 2023" → that day, "March" → the latest March).

    Returns None when `text` (stripped, whole) is not one of the date forms.
    """
    text = text.strip(" ,.?!").lower()
    for name, pattern in _DATE_RES:
        match = pattern.fullmatch(text)
        if match is None:
            continue
        g = match.groupdict()
        try:
            if name in ("iso", "dmy", "mdy", "dm", "md"):
                month = int(g["m"]) if name == "iso" else _MONTHS[g["mon"]]
                day = int(g["d"])
                if g.get("y"):
                    year = int(g["y"])
                else:  # no year: the latest such day by the anchor
                    year = anchor.year
                    if datetime(year, month, day, tzinfo=UTC) > anchor:
                        year -= 1
                start = datetime(year, month, day, tzinfo=UTC)
                return start, start + timedelta(days=1)
            if name == "my":
                return _month_span(int(g["y"]), _MONTHS[g["mon"]])
            if name == "year":
                start = datetime(int(g["y"]), 1, 1, tzinfo=UTC)
                return start, start.replace(year=start.year + 1)
            if name == "season":
                season = g["season"]
                if g.get("y"):
                    return _season_span(season, int(g["y"]))
                year = anchor.year
                span = _season_span(season, year)
                while span[0] > anchor or (g["which"] == "last" and span[1] > anchor):
                    year -= 1
                    span = _season_span(season, year)
                return span
            if name == "month":
                return _latest_month(_MONTHS[g["mon"]], anchor, g.get("which") == "last")
        except (ValueError, OverflowError):  # 31 February and the like
            return None
    return None


# -- the grammar -----------------------------------------------------------------------------

_ANCHORED = re.compile(
    rf"\b(?:the\s+|last\s+)?(?:{_COUNT}\s+)?{_UNIT}\s+(?P<rel>before|after|of)\s+(?P<date>{_DATE_ANY})",
    re.I,
)
_RELATION_DATE = re.compile(
    rf"\b(?P<rel>before|after|since|until|till|prior to|by|earlier than|later than)\s+"
    rf"(?:the\s+end\s+of\s+|the\s+start\s+of\s+)?(?P<date>{_DATE_ANY})\b",
    re.I,
)
_IN_DATE = re.compile(
    rf"\b(?:(?:in|on|during|of|around|over)\s+(?:the\s+)?)?(?P<date>{_DATE_ANY})\b", re.I
)
_BARE = re.compile(r"\s*(?:" + "|".join([*_SEASONS, *calendar.month_name[1:]]) + r")\s*", re.I)
_AGO = re.compile(rf"\b{_COUNT}\s+{_UNIT}\s+ago\b", re.I)
_PAST_N = re.compile(
    rf"\b(?:in|over|during|within)?\s*the\s+(?:past|last|previous)\s+(?:{_COUNT}\s+)?{_UNIT}\b",
    re.I,
)
_LAST_UNIT = re.compile(rf"\b(?P<which>last|past|previous|this)\s+{_UNIT}\b", re.I)
_DAY_WORDS = re.compile(
    r"\b(?P<word>the\s+day\s+before\s+yesterday|yesterday|last\s+night|today|tonight|"
    r"this\s+(?:morning|afternoon|evening))\b",
    re.I,
)
_FIRST = re.compile(
    r"\b(?:(?:for\s+)?the\s+first\s+time|first\s+time|earliest|at\s+first|initially|"
    r"originally|to\s+begin\s+with|in\s+the\s+beginning|first\s+ever|"
    r"(?:his|her|their|my|our|your|its)\s+(?:very\s+)?first)\b",
    re.I,
)
_LAST = re.compile(
    r"\b(?:(?:the\s+)?last\s+time|latest|most\s+recent(?:ly)?|recent(?:ly)?|lately|nowadays|"
    r"currently|these\s+days|of\s+late|(?:his|her|their|my|our|your|its)\s+(?:very\s+)?"
    r"(?:last|latest|newest|current))\b",
    re.I,
)
_STOP = {
    "to", "in", "on", "at", "with", "and", "or", "for", "of", "from", "when", "where", "that",
    "did", "was", "were", "is", "has", "had", "she", "he", "they", "we", "i", "you", "it",
}  # fmt: skip
_EVENT = re.compile(
    r"\b(?P<rel>before|after|since|prior\s+to|following)\s+"
    r"(?P<event>(?:the|his|her|their|my|our|your|a|an)\s+[\w'-]+(?:\s+[\w'-]+){0,3})",
    re.I,
)


# Every expression above contains one of these; most queries contain none, and one search for
# them is ~50x cheaper than running the grammar (the parse runs on every search).
_TRIGGER = re.compile(
    r"\d|\b(?:"
    + "|".join(sorted(_MONTHS, key=len, reverse=True))
    + r"|spring|summer|autumn|fall|winter|yesterday|today|tonight|morning|afternoon|evening"
    r"|night|day|days|week|weeks|weekend|weekends|month|months|year|years|ago|recent|recently"
    r"|latest|last|first|earliest|lately|nowadays|currently|current|initially|originally"
    r"|begin|beginning|before|after|since|until|till|prior|following|newest|late)\b",
    re.I,
)


def parse(query: str, anchor: datetime) -> TimeIntent:
    """Read the time expressions of a query.

    Args:
        query: The question as the user wrote it.
        anchor: "Now" for relative expressions (UTC): the latest event time in scope.

    Returns:
        The intent; several ranges in one query are intersected (the first wins if they do
        not overlap).
    """
    if _TRIGGER.search(query) is None:
        return TimeIntent()
    if anchor.tzinfo is None:
        anchor = anchor.replace(tzinfo=UTC)
    text = query
    spans: list[Span] = []
    open_start: list[datetime] = []
    open_end: list[datetime] = []
    phrases: list[str] = []

    def take(match: re.Match[str]) -> None:
        nonlocal text
        phrases.append(match.group(0).strip())
        # Blank the phrase out so later, looser patterns do not read it again.
        text = text[: match.start()] + " " * (match.end() - match.start()) + text[match.end() :]

    for match in list(_ANCHORED.finditer(text)):
        span = read_date(match["date"], anchor)
        if span is None:
            continue
        unit, count = match["unit"].lower(), _count(match["n"])
        rel = match["rel"].lower()
        if rel == "of":  # "the week of 23 August 2023"
            spans.append(_unit_span(unit, span[0]))
        elif rel == "before":
            spans.append((_shift(span[0], _step(unit, count), -1), span[0]))
        else:
            spans.append((span[1], _shift(span[1], _step(unit, count), 1)))
        take(match)
    for match in list(_RELATION_DATE.finditer(text)):
        span = read_date(match["date"], anchor)
        if span is None:
            continue
        rel = match["rel"].lower()
        if rel in ("before", "prior to", "earlier than"):
            open_end.append(span[0])
        elif rel in ("until", "till", "by"):
            open_end.append(span[1])
        elif rel in ("after", "later than"):
            open_start.append(span[1])
        else:  # since
            open_start.append(span[0])
        take(match)
    for match in list(_AGO.finditer(text)):
        unit, count = match["unit"].lower(), _count(match["n"])
        step = _step(unit, count)
        center = _shift(anchor, step, -1)
        one = _step(unit, 1)
        spans.append((_shift(center, one, -1), _shift(center, one, 1)))
        take(match)
    for match in list(_PAST_N.finditer(text)):
        unit, count = match["unit"].lower(), _count(match["n"])
        today = _day(anchor)
        spans.append((_shift(today, _step(unit, count), -1), today + timedelta(days=1)))
        take(match)
    for match in list(_DAY_WORDS.finditer(text)):
        word = " ".join(match["word"].lower().split())
        back = 2 if word.startswith("the day") else 1 if word in ("yesterday", "last night") else 0
        day = _day(anchor) - timedelta(days=back)
        spans.append((day, day + timedelta(days=1)))
        take(match)
    for match in list(_LAST_UNIT.finditer(text)):
        unit = match["unit"].lower()
        current = _unit_span(unit, anchor)
        if match["which"].lower() == "this":
            spans.append(current)
        elif unit == "weekend":
            # The latest weekend that is over by the anchor.
            weekend = current[0] if current[1] <= anchor else current[0] - timedelta(days=7)
            spans.append((weekend, weekend + timedelta(days=2)))
        else:
            spans.append((_shift(current[0], _step(unit, 1), -1), current[0]))
        take(match)
    for match in list(_IN_DATE.finditer(text)):
        if match.group(0).strip() == match["date"].strip() and _BARE.fullmatch(match["date"]):
            continue  # a bare "may", "march" or "spring" is more often a verb or a noun
        span = read_date(match["date"], anchor)
        if span is None:
            continue
        spans.append(span)
        take(match)

    event: str | None = None
    relation: Literal["before", "after"] | None = None
    for match in _EVENT.finditer(text):
        words = match["event"].split()
        kept = [words[0]]
        for word in words[1:]:
            if word.lower() in _STOP:
                break
            kept.append(word)
        if len(kept) < 2:
            continue
        event = " ".join(kept).strip("?,.!")
        relation = "before" if match["rel"].lower() in ("before", "prior to") else "after"
        phrases.append(f"{match['rel']} {event}")
        break

    order: Order | None = None
    first, last = _FIRST.search(text), _LAST.search(text)
    if first and (not last or first.start() <= last.start()):
        order = "asc"
        phrases.append(first.group(0))
    elif last:
        order = "desc"
        phrases.append(last.group(0))

    start, end = _combine(spans, open_start, open_end)
    return TimeIntent(
        start=None if start is None else start.timestamp(),
        end=None if end is None else end.timestamp(),
        order=order,
        event=event,
        relation=relation,
        phrases=tuple(phrases),
    )


def _combine(
    spans: list[Span], open_start: list[datetime], open_end: list[datetime]
) -> tuple[datetime | None, datetime | None]:
    """Intersect the closed spans and the open bounds; the first span wins a conflict."""
    start: datetime | None = None
    end: datetime | None = None
    for lo, hi in spans:
        new_lo = lo if start is None else max(start, lo)
        new_hi = hi if end is None else min(end, hi)
        if new_lo < new_hi:
            start, end = new_lo, new_hi
    for lo in open_start:
        if end is None or lo < end:
            start = lo if start is None else max(start, lo)
    for hi in open_end:
        if start is None or hi > start:
            end = hi if end is None else min(end, hi)
    return start, end
