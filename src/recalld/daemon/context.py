"""The `context` method: what a coding agent's hooks get from memory (issue 21).

- `start` (a session begins): the project's memories, the user's preferences and recent
  decisions, newest first, each text once, packed into `budget_tokens` of the model's
  tokenizer (the whole printed text counts, headings included).
- `prompt` (the user sent a prompt): a search with the prompt, keeping only hits the store is
  confident about: the result set passes the gate and each hit's vector is at least halfway
  from tau to the calibrated "high" similarity. An unrelated prompt gets nothing. A memory
  already given to the session is not given again.
- `stop` (a turn or session ended): the transcript becomes a conversation source recorded
  under the project. It is ingested as a job (`recalld jobs`), one per transcript at a time (a
  stop that arrives meanwhile makes it read the file once more), and like any file it is
  re-ingested incrementally, so a session is stored once however often it stops.

A project is a folder path (`recalld.projects`); with one, only that project's documents and
those of no project are read, never another project's.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recalld.daemon.jobs import Job, Work
from recalld.daemon.params import InvalidParams, Params
from recalld.projects import elsewhere
from recalld.types import Chunk, Filters

if TYPE_CHECKING:
    from recalld.daemon.methods import Context, Progress

logger = logging.getLogger(__name__)

EVENTS = ("start", "prompt", "stop")
DEFAULT_BUDGET = 800
# How many recent memories and facts a session start looks through.
START_CANDIDATES = 300
PROMPT_HITS = 8
# Sessions whose injected chunk ids are remembered (oldest forgotten first).
SESSIONS_KEPT = 256
# Words that mark a decision in a memory or a conversation fact.
DECISION = re.compile(
    r"\b(decided|decide|decision|agreed|we will|we'll|chose|chosen|going with|settled on|"
    r"switched to|from now on)\b",
    re.IGNORECASE,
)


@dataclass
class AgentSessions:
    """Per-daemon state of the agent hooks: what each session was given, and the transcript
    captures under way."""

    given: OrderedDict[str, set[int]] = field(default_factory=OrderedDict)
    captures: dict[str, Job] = field(default_factory=dict)
    again: set[str] = field(default_factory=set)

    def seen(self, session: str | None) -> set[int]:
        """The chunk ids already given to `session` (a fresh set for no session)."""
        if not session:
            return set()
        ids = self.given.pop(session, set())
        self.given[session] = ids  # most recent last
        while len(self.given) > SESSIONS_KEPT:
            self.given.popitem(last=False)
        return ids


def _line(chunk: Chunk) -> str:
    return "- " + " ".join(chunk.text.split())


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def pack_sections(
    sections: Iterable[tuple[str, list[Chunk]]],
    title: str,
    budget: int,
    count: Callable[[str], int],
) -> tuple[str, list[Chunk]]:
    """The sections' lines under `title`, best first, while the whole text fits `budget`
    tokens; each text appears once. Returns the text ('' when nothing fits) and its chunks.

    Lines are counted one by one (a WordPiece count is additive over lines: a newline is
    only a separator), then the joined text is counted once more and trimmed from the end
    should a tokenizer disagree, so the budget holds whatever the tokenizer."""
    lines: list[tuple[str, Chunk | None]] = [(title, None)]
    used_tokens = count(title)
    texts: set[str] = set()
    for heading, chunks in sections:
        heading_cost = count(heading) if heading else 0
        heading_added = not heading
        for chunk in chunks:
            key = _norm(chunk.text)
            if not key or key in texts:
                continue
            line = _line(chunk)
            cost = count(line) + (0 if heading_added else heading_cost)
            if used_tokens + cost > budget:
                continue  # a shorter one further down may still fit
            if not heading_added:
                lines.append((heading, None))
                heading_added = True
            lines.append((line, chunk))
            used_tokens += cost
            texts.add(key)
    while len(lines) > 1 and count("\n".join(text for text, _ in lines)) > budget:
        lines.pop()
        while len(lines) > 1 and lines[-1][1] is None:
            lines.pop()  # no heading without a line under it
    used = [chunk for _, chunk in lines if chunk is not None]
    if not used:
        return "", []
    return "\n".join(text for text, _ in lines), used


async def _start(ctx: Context, project: str | None, budget: int, seen: set[int]) -> dict[str, Any]:
    memory = ctx.memory
    scope = Filters(granularities=("memory", "fact"), project=project)
    candidates = await memory.store.read(lambda c: c.recent_chunks(scope, START_CANDIDATES))
    candidates = [c for c in candidates if c.status == "active" and c.id not in seen]
    own: set[str] = set()
    if project is not None:
        own = await memory.store.read(lambda r: r.sources_of(project=project))
    mine = [c for c in candidates if c.granularity == "memory" and c.source in own]
    preferences = [c for c in candidates if c.memory_type == "preference"]
    decisions = [c for c in candidates if DECISION.search(c.text)]
    name = os.path.basename(project) if project else "you"
    sections = [
        ("This project:", mine if project else []),
        ("Preferences:", preferences),
        ("Recent decisions:", decisions),
    ]
    title = f"From recalld (long-term memory) for {name}:"
    return await _packed("start", sections, title, budget, memory.embedder.count_tokens)


async def _prompt(
    ctx: Context, project: str | None, prompt: str, budget: int, seen: set[int]
) -> dict[str, Any]:
    memory = ctx.memory
    if not prompt.strip():
        return await _packed("prompt", [], "", budget, memory.embedder.count_tokens)
    # Searched without the project filter, which would take the exact vector path in a large
    # store, and then scoped here: a hit never comes from another project.
    result = await memory.search(prompt, limit=PROMPT_HITS * 3)
    searcher = memory.searcher
    tau = searcher.settings.tau or searcher.calibration.tau
    # Halfway from "no evidence" to "strong evidence": a prompt's words match many chunks
    # loosely, so the gate's own tau lets too much in for something injected unasked.
    floor = (tau + searcher.calibration.high) / 2
    confident = [
        h.chunk
        for h in result.hits
        if not result.rejected
        and h.chunk.id not in seen
        and h.explain.get("routes", {}).get("vector", {}).get("similarity", 0.0) >= floor
    ]
    if project is not None:
        owners = await memory.store.read(
            lambda r: r.projects_of(sources=sorted({c.source for c in confident}))
        )
        confident = [c for c in confident if owners.get(c.source, project) == project]
        confident = await asyncio.to_thread(
            lambda: [c for c in confident if not elsewhere(c.source, project)]
        )
    confident = confident[:PROMPT_HITS]
    title = "From recalld (long-term memory), related to this prompt:"
    return await _packed("prompt", [("", confident)], title, budget, memory.embedder.count_tokens)


async def _packed(
    event: str,
    sections: list[tuple[str, list[Chunk]]],
    title: str,
    budget: int,
    count: Callable[[str], int],
) -> dict[str, Any]:
    """Pack and count in a thread (tokenizing is blocking work) and build the result."""

    def work() -> tuple[str, list[Chunk], int]:
        text, used = pack_sections(sections, title, budget, count)
        return text, used, count(text) if text else 0

    text, used, tokens = await asyncio.to_thread(work)
    return {
        "event": event,
        "text": text,
        "tokens": tokens,
        "budget_tokens": budget,
        "items": [{"id": c.id, "source": c.source, "granularity": c.granularity} for c in used],
    }


def _capture_work(ctx: Context, path: Path, project: str | None) -> Work:
    """The job that ingests one transcript; it reads the file once more if another stop came
    in meanwhile."""
    key = os.fspath(path)
    sessions: AgentSessions = ctx.agents

    async def work(report: Progress) -> dict[str, Any]:
        reads = 0
        try:
            while True:
                sessions.again.discard(key)
                await ctx.memory.store.write(lambda r: r.set_project(source=key, project=project))
                last = (await ctx.scheduler.ingest_now(path, report)).as_dict()
                reads += 1
                if key not in sessions.again:
                    return {**last, "reads": reads, "project": project}
        finally:
            sessions.captures.pop(key, None)

    return work


async def _stop(ctx: Context, transcript: str | None, project: str | None) -> dict[str, Any]:
    if not transcript:
        return {"event": "stop", "captured": None}
    path = Path(transcript)
    if not path.is_absolute():
        raise InvalidParams("param 'transcript_path' must be an absolute path", "transcript_path")
    if not await asyncio.to_thread(path.is_file):
        return {"event": "stop", "captured": None, "reason": "no such file"}
    key = os.fspath(path)
    sessions: AgentSessions = ctx.agents
    running = sessions.captures.get(key)
    if running is not None:
        sessions.again.add(key)  # the running capture reads the file once more when done
        job = running
    else:
        job = ctx.jobs.start("capture", key, _capture_work(ctx, path, project))
        sessions.captures[key] = job
    return {"event": "stop", "captured": key, "project": project, "job": job.id}


async def context(ctx: Context, params: Params, progress: Progress) -> Any:
    """What an agent hook injects (`start`, `prompt`) or captures (`stop`); see the module
    docstring and docs/protocol.md."""
    event = params.string("event")
    if event not in EVENTS:
        raise InvalidParams(f"param 'event' must be one of {', '.join(EVENTS)}", "event")
    project = params.project("project")
    budget = params.integer("budget_tokens", DEFAULT_BUDGET, low=0, high=100_000)
    prompt = params.string("prompt", "", blank=True, longest=None)  # a pasted log may be long
    session = params.string("session_id", None, blank=True)
    transcript = params.string("transcript_path", None, blank=True)
    params.done()
    if event == "stop":
        return await _stop(ctx, transcript, project)
    if budget == 0:
        return {"event": event, "text": "", "tokens": 0, "budget_tokens": 0, "items": []}
    seen = ctx.agents.seen(session)
    if event == "start":
        # A start (new, resumed or compacted session) gives everything again: the model's
        # context is fresh. What it gave is then not repeated at the session's prompts.
        seen.clear()
        out = await _start(ctx, project, budget, seen)
    else:
        out = await _prompt(ctx, project, prompt, budget, seen)
    seen.update(item["id"] for item in out["items"])
    return out
