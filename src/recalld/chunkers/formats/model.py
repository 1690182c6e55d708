"""The parsed shape of a conversation log, shared by every log format.

A `Conversation` holds `Session`s, a session holds `Round`s, a round holds `Turn`s. Parsers
build turns; `build_rounds` and `split_sessions` give every format the same round and session
rules:

- A round is one user turn (or several in a row) with the turns that answer it, up to the next
  user turn. Turns before the first user turn form a round of their own.
- For two humans (LoCoMo) there is no "user": a round opens with each turn by the speaker who
  opened the session and holds the replies up to that speaker's next turn, so every round is a
  remark and its answer, and every turn belongs to exactly one round.
- Logs without explicit sessions but with timestamps are cut into sessions at gaps of more
  than `SESSION_GAP` seconds; each session is named after its first turn, so the names do
  not change as the log grows.

Ids come from the log (LoCoMo `dia_id`, agent `uuid`, ChatGPT node id). Where the log has none,
`TurnIds` derives one from the message's content, numbered on repeats, so re-reading a grown
log gives the old turns their old ids.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from recalld import limits
from recalld.chunkers.options import short_hash

SESSION_GAP = 4 * 3600.0


@dataclass(frozen=True)
class Turn:
    """One message.

    Attributes:
        speaker: Display name ("Caroline", "User", "Assistant").
        role: `user` for people (both LoCoMo speakers), `assistant` for models.
        text: The message text.
        id: The log's id for the message, or a content-derived one.
        time: Unix seconds (UTC) if the log says when.
    """

    speaker: str
    role: str
    text: str
    id: str
    time: float | None = None


@dataclass(frozen=True)
class Round:
    """A user turn with the answers to it (see the module docstring)."""

    id: str
    turns: tuple[Turn, ...]
    time: float | None = None


@dataclass(frozen=True)
class Session:
    """One sitting of a conversation."""

    id: str
    time: float | None
    rounds: tuple[Round, ...]
    title: str | None = None


@dataclass(frozen=True)
class Conversation:
    """A whole conversation log (one file may hold several).

    Attributes:
        id: Stable id from the log (LoCoMo `sample_id`, ChatGPT conversation id), else the
            file's stem.
        format: The detected log format (`locomo`, `chatgpt-export`, ...).
        sessions: In order.
        speakers: Everyone who speaks, in order of first appearance.
    """

    id: str
    format: str
    sessions: tuple[Session, ...]
    speakers: tuple[str, ...]


class TurnIds:
    """Content-derived turn ids for logs that have none: `h<hash>`, `h<hash>.2` on repeats."""

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}

    def make(self, role: str, text: str, given: object = None) -> str:
        """The log's own id if it has one, else one derived from role and text."""
        if isinstance(given, str | int) and not isinstance(given, bool) and str(given):
            base = str(given)
        else:
            base = "h" + short_hash(f"{role}\n{text}")
        count = self._seen.get(base, 0) + 1
        self._seen[base] = count
        return base if count == 1 else f"{base}.{count}"


_LOCOMO_TIME = re.compile(
    r"^\s*(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+(\w+),?\s+(\d{4})\s*$"
)
_LME_TIME = re.compile(r"^\s*(\d{4})/(\d{1,2})/(\d{1,2})\s*(?:\([A-Za-z]+\))?\s*(\d{1,2}):(\d{2})")


def parse_time(value: object) -> float | None:
    """Read a timestamp as unix seconds (UTC); None if it cannot be read.

    Accepts numbers (seconds, or milliseconds when implausibly large), ISO 8601 strings (naive
    ones are taken as UTC), LoCoMo's "1:56 pm on 8 May, 2023" and LongMemEval's
    "2023/05/20 (Sat) 02:21".
    """
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        seconds = float(value)
        seconds = seconds / 1000.0 if seconds > 1e11 else seconds
        # `1e400` reads as inf: a time no date can show is no time (`recalld.limits`).
        return seconds if limits.is_time(seconds) else None
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    when: datetime | None = None
    if match := _LOCOMO_TIME.match(text):
        hour, minute, half, day, month, year = match.groups()
        try:
            parsed = datetime.strptime(f"{day} {month} {year}", "%d %B %Y")
        except ValueError:
            try:
                parsed = datetime.strptime(f"{day} {month} {year}", "%d %b %Y")
            except ValueError:
                return None
        hours = int(hour) % 12 + (12 if half.lower() == "pm" else 0)
        when = parsed.replace(hour=hours, minute=int(minute))
    elif match := _LME_TIME.match(text):
        year, month, day, hour, minute = (int(g) for g in match.groups())
        try:
            when = datetime(year, month, day, hour, minute)
        except ValueError:
            return None
    else:
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            try:
                return parse_time(float(text))
            except ValueError:
                return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def format_time(seconds: float) -> str:
    """Render a timestamp the way people write dates: "8 May 2023, 1:56 pm"."""
    when = datetime.fromtimestamp(seconds, UTC)
    clock = when.strftime("%I:%M %p").lstrip("0").lower()
    return f"{when.day} {when.strftime('%B %Y')}, {clock}"


def build_rounds(
    turns: Sequence[Turn], opens: Callable[[Turn], bool], fallback_time: float | None = None
) -> tuple[Round, ...]:
    """Group turns into rounds: a new round at each opening turn that follows an answer.

    Args:
        turns: The session's turns in order.
        opens: Whether a turn opens a round (a user turn; for LoCoMo, the opener's turn).
        fallback_time: The time of rounds whose turns have none (the session's time).

    Returns:
        The rounds; each is named after its first turn.
    """
    groups: list[list[Turn]] = []
    for turn in turns:
        if not groups or (opens(turn) and any(not opens(t) for t in groups[-1])):
            groups.append([turn])
        else:
            groups[-1].append(turn)
    return tuple(
        Round(
            id=group[0].id,
            turns=tuple(group),
            time=next((t.time for t in group if t.time is not None), fallback_time),
        )
        for group in groups
    )


def split_sessions(
    turns: Sequence[Turn], opens: Callable[[Turn], bool], title: str | None = None
) -> tuple[Session, ...]:
    """Cut a session-less log into sessions at long pauses (only where turns have times)."""
    sessions: list[list[Turn]] = []
    last: float | None = None
    for turn in turns:
        gap = turn.time is not None and last is not None and turn.time - last > SESSION_GAP
        if not sessions or gap:
            sessions.append([])
        sessions[-1].append(turn)
        last = turn.time if turn.time is not None else last
    return tuple(
        Session(
            id=group[0].id,
            time=next((t.time for t in group if t.time is not None), None),
            rounds=build_rounds(group, opens),
            title=title,
        )
        for group in sessions
    )


def speakers_of(sessions: Iterable[Session]) -> tuple[str, ...]:
    """Everyone who speaks in `sessions`, in order of first appearance."""
    seen: dict[str, None] = {}
    for session in sessions:
        for rnd in session.rounds:
            for turn in rnd.turns:
                seen.setdefault(turn.speaker, None)
    return tuple(seen)


def is_user(turn: Turn) -> bool:
    """The round-opening rule for chats between a person and a model."""
    return turn.role == "user"
