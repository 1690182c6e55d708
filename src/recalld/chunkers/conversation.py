"""Session, round, window and fact chunks for a parsed conversation.

For each session: the session chunk(s) first, then each round followed by its facts, then
(with `turn_windows`) a window per turn: the turn with the turn before it. A
session chunk is the whole session as "Speaker: text" lines under a header with the session's
title and date; only a session longer than `max_tokens` becomes several chunks, cut between
rounds where possible (keys `...#p2`, `...#p3`). A round chunk (parent: the session chunk that
holds its first turn) carries the date line and its turns. Fact chunks (parent: the round)
hold one statement each, from the LLM facts the caller passes or, failing those, from the
offline heuristic.

Keys are built from the log's own ids, namespaced so they cannot collide:
`<conversation>/s:<session>`, `<conversation>/r:<round>`, `<conversation>/f:<round>:<hash>`,
`<conversation>/w:<turn>`.
A grown log therefore keeps the keys of everything it already had.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from recalld.chunkers.facts import heuristic_facts
from recalld.chunkers.formats.model import Conversation, Round, Session, format_time
from recalld.chunkers.options import DEFAULT_OPTIONS, ChunkOptions, KeyMaker, short_hash
from recalld.chunkers.split import split_text
from recalld.chunkers.text import pack_lines
from recalld.types import ChunkDraft, Granularity


def _lines(rnd: Round) -> list[str]:
    return [f"{turn.speaker}: {turn.text}" for turn in rnd.turns]


def _speakers(rounds: Sequence[Round]) -> list[str]:
    return list(dict.fromkeys(t.speaker for r in rounds for t in r.turns))


def _turn_ids(rounds: Sequence[Round]) -> list[str]:
    return [t.id for r in rounds for t in r.turns]


class _Builder:
    def __init__(self, conv: Conversation, options: ChunkOptions, keys: KeyMaker) -> None:
        self.conv = conv
        self.options = options
        self.count = options.count_tokens
        self.keys = keys
        self.chunks: list[ChunkDraft] = []

    def meta(self, session: Session, rounds: Sequence[Round], **extra: Any) -> dict[str, Any]:
        ids = _turn_ids(rounds)
        meta: dict[str, Any] = {
            "format": self.conv.format,
            "conversation_id": self.conv.id,
            "session_id": session.id,
            "speakers": _speakers(rounds),
            "turn_ids": ids,
        }
        if self.conv.format == "locomo":
            meta["dia_ids"] = ids
        if session.title:
            meta["title"] = session.title
        meta.update(extra)
        return meta

    def emit(
        self,
        text: str,
        granularity: Granularity,
        key: str,
        parent: str | None,
        time: float | None,
        meta: dict[str, Any],
    ) -> str:
        key = self.keys.make(key)
        self.chunks.append(
            ChunkDraft(
                text=text,
                kind="conversation",
                granularity=granularity,
                key=key,
                parent_key=parent,
                event_time=time,
                meta=meta,
            )
        )
        return key

    def session_parts(self, session: Session, header: str) -> list[tuple[str, list[Round]]]:
        """Cut a session into texts of at most `max_tokens`, between rounds where possible."""
        budget = self.options.max_tokens - self.count(header)
        parts: list[tuple[list[str], list[Round]]] = [([], [])]
        used = 0
        for rnd in session.rounds:
            lines = _lines(rnd)
            tokens = sum(self.count(line) for line in lines)
            if parts[-1][0] and used + tokens > budget:
                parts.append(([], []))
                used = 0
            if tokens <= budget:
                parts[-1][0].extend(lines)
                parts[-1][1].append(rnd)
                used += tokens
                continue
            # A round longer than a whole chunk: its lines (or pieces of them) go on as
            # parts of their own, each listing the round.
            pieces = pack_lines(lines, budget, self.count, self.options.overlap_tokens)
            for number, piece in enumerate(pieces):
                if number:
                    parts.append(([], []))
                parts[-1][0].append(piece)
                parts[-1][1].append(rnd)
            used = self.count(pieces[-1]) if pieces else 0
        return [(f"{header}\n" + "\n".join(lines), rounds) for lines, rounds in parts if lines]

    def session(
        self, index: int, session: Session, facts: Mapping[str, Sequence[str]] | None
    ) -> None:
        title = session.title or f"Conversation {self.conv.id}"
        if not session.title and len(self.conv.sessions) > 1:
            title += f", session {index + 1}"
        time = session.time
        if time is None:
            time = next((r.time for r in session.rounds if r.time is not None), None)
        header = f"{title} \u2014 {format_time(time)}" if time is not None else title
        room = self.options.max_tokens // 3
        if self.count(header) > room:
            # A long title (agent summaries can be) must leave room for the dialogue.
            header = split_text(header, room, 0, self.count)[0]
        base = f"{self.conv.id}/s:{session.id}"
        parent_of: dict[str, str] = {}
        for number, (text, rounds) in enumerate(self.session_parts(session, header)):
            key = base if number == 0 else f"{base}#p{number + 1}"
            meta = self.meta(session, rounds)
            if number:
                meta["part"] = number + 1
            key = self.emit(text, "session", key, None, time, meta)
            for rnd in rounds:
                parent_of.setdefault(rnd.id, key)  # the part where the round starts
        round_keys = {
            rnd.id: self.round(session, rnd, parent_of.get(rnd.id, base), facts)
            for rnd in session.rounds
        }
        if self.options.turn_windows:
            self.windows(session, round_keys)

    def windows(self, session: Session, round_keys: Mapping[str, str]) -> None:
        """A `window` chunk per turn: the turn with the turn before it in the session (the
        session's first turn alone), whose parent is the turn's round. A question and the
        answer that opens the next round then share a unit."""
        placed = [(turn, rnd) for rnd in session.rounds for turn in rnd.turns]
        for index, (turn, rnd) in enumerate(placed):
            pair = [t for t, _ in placed[max(0, index - 1) : index + 1]]
            time = turn.time if turn.time is not None else rnd.time
            time = time if time is not None else session.time
            date = format_time(time) if time is not None else None
            body = "\n".join(f"{t.speaker}: {t.text}" for t in pair)
            header_tokens = self.count(f"[{date}]") if date else 0
            pieces = split_text(
                body,
                self.options.max_tokens - header_tokens,
                self.options.overlap_tokens,
                self.count,
            )
            base = f"{self.conv.id}/w:{turn.id}"
            ids = [t.id for t in pair]
            for number, piece in enumerate(pieces):
                meta = self.meta(session, [rnd], round_id=rnd.id, turn_id=turn.id)
                meta["speakers"] = list(dict.fromkeys(t.speaker for t in pair))
                meta["turn_ids"] = ids
                if self.conv.format == "locomo":
                    meta["dia_ids"] = ids
                if number:
                    meta["part"] = number + 1
                text = f"[{date}]\n{piece}" if date else piece
                key = base if number == 0 else f"{base}#p{number + 1}"
                self.emit(text, "window", key, round_keys[rnd.id], time, meta)

    def round(
        self,
        session: Session,
        rnd: Round,
        parent: str,
        facts: Mapping[str, Sequence[str]] | None,
    ) -> str:
        """Emit the round's chunk(s) and facts; returns the key of its (first) chunk."""
        time = rnd.time if rnd.time is not None else session.time
        date = format_time(time) if time is not None else None
        body = "\n".join(_lines(rnd))
        header_tokens = self.count(f"[{date}]") if date else 0
        pieces = split_text(
            body, self.options.max_tokens - header_tokens, self.options.overlap_tokens, self.count
        )
        base = f"{self.conv.id}/r:{rnd.id}"
        round_key = base
        for number, piece in enumerate(pieces):
            meta = self.meta(session, [rnd], round_id=rnd.id)
            if number:
                meta["part"] = number + 1
            text = f"[{date}]\n{piece}" if date else piece
            key = self.emit(
                text, "round", base if number == 0 else f"{base}#p{number + 1}", parent, time, meta
            )
            round_key = key if number == 0 else round_key
        statements: list[tuple[str, str | None, str]]
        if facts is not None:
            statements = [(s, None, "llm") for s in facts.get(rnd.id, ()) if s.strip()]
        elif self.options.facts:
            statements = [
                (f.text, f.speaker, "heuristic")
                for f in heuristic_facts(rnd, self.conv.speakers, time)
            ]
        else:
            statements = []
        for statement, speaker, extractor in statements:
            text = " ".join(statement.split())
            extra: dict[str, Any] = {"round_id": rnd.id, "extractor": extractor}
            meta = self.meta(session, [rnd], **extra)
            if speaker is not None:
                meta["speakers"] = [speaker]
            for piece in split_text(
                text, self.options.max_tokens, self.options.overlap_tokens, self.count
            ):
                self.emit(
                    piece,
                    "fact",
                    f"{self.conv.id}/f:{rnd.id}:{short_hash(piece)}",
                    round_key,
                    time,
                    dict(meta),
                )
        return round_key


def conversation_chunks(
    conv: Conversation,
    options: ChunkOptions = DEFAULT_OPTIONS,
    facts: Mapping[str, Sequence[str]] | None = None,
    keys: KeyMaker | None = None,
) -> list[ChunkDraft]:
    """Build the session, round and fact chunks of one conversation.

    Args:
        conv: A conversation from `parse_conversations`.
        options: Size limits, the token counter and whether to make heuristic facts.
        facts: Facts by `Round.id`, e.g. from an LLM extractor (a round missing from the
            mapping gets none). None means: heuristic facts if `options.facts`.
        keys: Shared key maker when several conversations go into one file's chunks.

    Returns:
        Chunks with `kind="conversation"`, in session order: each session's chunk(s), then
        each round followed by its facts. Every chunk's `meta` has `conversation_id`,
        `session_id`, `speakers` and `turn_ids` (`dia_ids` too for LoCoMo); facts have
        `extractor` (`llm` or `heuristic`).
    """
    builder = _Builder(conv, options, keys or KeyMaker())
    for index, session in enumerate(conv.sessions):
        builder.session(index, session, facts)
    return builder.chunks
