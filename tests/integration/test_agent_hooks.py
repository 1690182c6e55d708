"""`recalld context` as each host runs it: a real subprocess fed the host's documented hook
payloads (session start, prompt, stop) against a real daemon."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from recalld.embeddings.base import HashEmbedder
from tests.integration.conftest import Daemon

pytestmark = pytest.mark.integration

# Each host's event names for session start, a prompt and the end of a turn.
HOST_EVENTS = {
    "claude": ("SessionStart", "UserPromptSubmit", "Stop"),
    "gemini": ("SessionStart", "BeforeAgent", "AfterAgent"),
    "codex": ("SessionStart", "UserPromptSubmit", "Stop"),
}
MINE = "The billing service retries webhooks with exponential backoff capped at ten minutes"
THEIRS = "The billing service of the other team stores invoices in a Cassandra cluster"
PREFERENCE = "I prefer small pull requests with a failing test first"
DECISION = "We decided to keep PostgreSQL for the billing ledger"


def hook(
    daemon_socket: Path | str, host: str, payload: object, *extra: str, raw: bytes | None = None
) -> tuple[int, str, float]:
    data = raw if raw is not None else json.dumps(payload).encode()
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "recalld",
            "context",
            "--host",
            host,
            "--socket",
            str(daemon_socket),
            *extra,
        ],
        input=data,
        capture_output=True,
        timeout=30,
    )
    return proc.returncode, proc.stdout.decode(), time.monotonic() - started


def injected(out: str, event: str) -> str:
    if not out.strip():
        return ""
    message = json.loads(out)
    assert message["hookSpecificOutput"]["hookEventName"] == event
    text: str = message["hookSpecificOutput"]["additionalContext"]
    return text


def payload(host: str, event: str, cwd: Path, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "session_id": f"{host}-session-1",
        "transcript_path": str(cwd / "transcript.jsonl"),
        "cwd": str(cwd),
        "hook_event_name": event,
    }
    if host == "claude":
        base["permission_mode"] = "default"
    if host == "gemini":
        base["timestamp"] = "2026-11-26T10:00:00Z"
    if host == "codex":
        base["model"] = "gpt-5-codex"
    return {**base, **fields}


@pytest.fixture
def projects(tmp_path: Path) -> tuple[Path, Path]:
    mine, theirs = tmp_path / "billing", tmp_path / "other"
    for root in (mine, theirs):
        (root / ".git").mkdir(parents=True)
        (root / "src").mkdir()
    return mine, theirs


@pytest.fixture
def daemon(make_daemon: Callable[..., Daemon], projects: tuple[Path, Path]) -> Iterator[Daemon]:
    d = make_daemon()
    d.start()
    d.wait_ready()
    mine, theirs = projects
    d.client.call("remember", {"text": MINE, "project": str(mine)})
    d.client.call("remember", {"text": THEIRS, "project": str(theirs)})
    d.client.call("remember", {"text": PREFERENCE, "type": "preference"})
    d.client.call("remember", {"text": DECISION, "project": str(mine)})
    yield d
    d.stop()


@pytest.mark.parametrize("host", sorted(HOST_EVENTS))
def test_start_brings_this_projects_memories_within_the_budget(
    host: str, daemon: Daemon, projects: tuple[Path, Path]
) -> None:
    mine, _ = projects
    start = HOST_EVENTS[host][0]
    # From a subfolder: the project is the git root.
    code, out, _ = hook(daemon.socket, host, payload(host, start, mine / "src", source="startup"))
    assert code == 0
    text = injected(out, start)
    assert MINE in text and PREFERENCE in text and DECISION in text
    assert THEIRS not in text
    lines = [line for line in text.splitlines() if line.startswith("- ")]
    assert len(lines) == len(set(lines))  # never the same text twice

    budget = 25
    code, out, _ = hook(daemon.socket, host, payload(host, start, mine), "--budget", str(budget))
    text = injected(out, start)
    assert text and HashEmbedder().count_tokens(text) <= budget  # the daemon's own counter
    assert THEIRS not in text


def test_budget_zero_and_another_project(daemon: Daemon, projects: tuple[Path, Path]) -> None:
    mine, theirs = projects
    code, out, _ = hook(
        daemon.socket, "claude", payload("claude", "SessionStart", mine), "--budget", "0"
    )
    assert code == 0 and out == ""
    code, out, _ = hook(daemon.socket, "claude", payload("claude", "SessionStart", theirs))
    text = injected(out, "SessionStart")
    assert MINE not in text and DECISION not in text and PREFERENCE in text


@pytest.mark.parametrize("host", sorted(HOST_EVENTS))
def test_prompt_injects_only_what_is_relevant(
    host: str, daemon: Daemon, projects: tuple[Path, Path]
) -> None:
    mine, _ = projects
    prompt_event = HOST_EVENTS[host][1]
    unrelated = payload(host, prompt_event, mine, prompt="what rhymes with orange in a poem")
    code, out, _ = hook(daemon.socket, host, unrelated)
    assert code == 0 and out == ""

    related = payload(
        host, prompt_event, mine, prompt="how does the billing service retry webhooks with backoff"
    )
    code, out, _ = hook(daemon.socket, host, related)
    text = injected(out, prompt_event)
    assert MINE in text and THEIRS not in text
    # Given to this session once: the same prompt again brings nothing new.
    code, out, _ = hook(daemon.socket, host, related)
    assert out == ""


def write_transcript(path: Path, turns: list[tuple[str, str]]) -> None:
    lines = []
    for i, (role, text) in enumerate(turns):
        lines.append(
            json.dumps(
                {
                    "type": role,
                    "message": {"role": role, "content": text},
                    "uuid": f"u{i}",
                    "sessionId": "s-1",
                    "timestamp": f"2026-11-26T10:00:{i:02d}Z",
                }
            )
        )
    path.write_text("\n".join(lines) + "\n")


def host_transcript(host: str, turns: list[tuple[str, str]]) -> str:
    """A transcript in the host's own format (Gemini CLI's chat recording, Codex CLI's rollout)."""
    if host == "gemini":
        lines: list[object] = [
            {"sessionId": "g-1", "projectHash": "ab", "startTime": "2026-11-26T10:00:00Z"}
        ]
        for i, (role, text) in enumerate(turns):
            kind = "user" if role == "user" else "gemini"
            lines.append(
                {
                    "id": f"m{i}",
                    "timestamp": f"2026-11-26T10:00:{i:02d}Z",
                    "type": kind,
                    "content": text,
                }
            )
    else:
        lines = [
            {"type": "session_meta", "payload": {"id": "c-1"}, "timestamp": "2026-11-26T10:00:00Z"}
        ]
        for i, (role, text) in enumerate(turns):
            part = "input_text" if role == "user" else "output_text"
            message = {"type": "message", "role": role, "content": [{"type": part, "text": text}]}
            lines.append(
                {
                    "type": "response_item",
                    "payload": message,
                    "timestamp": f"2026-11-26T10:00:{i:02d}Z",
                }
            )
    return "\n".join(json.dumps(line) for line in lines) + "\n"


@pytest.mark.parametrize("host", ["gemini", "codex"])
def test_stop_captures_gemini_and_codex_transcripts_once(
    host: str, daemon: Daemon, projects: tuple[Path, Path]
) -> None:
    mine, _ = projects
    transcript = mine / f"{host}-session.jsonl"
    transcript.write_text(
        host_transcript(
            host,
            [("user", "Where do the kestrel logs go?"), ("assistant", "Kestrel logs go to loki.")],
        )
    )
    stop = payload(host, HOST_EVENTS[host][2], mine, transcript_path=str(transcript))
    for _ in range(2):
        code, out, _ = hook(daemon.socket, host, stop)
        assert code == 0 and out == ""
    daemon.wait_for(lambda s: s["counts"]["documents"] == 5)
    hits = daemon.client.search("kestrel logs loki", mode="bm25")["hits"]
    assert hits and {h["source"] for h in hits} == {str(transcript)}
    assert {h["granularity"] for h in hits} & {"round", "session"}  # read as a conversation


def test_stop_captures_the_transcript_once(daemon: Daemon, projects: tuple[Path, Path]) -> None:
    mine, theirs = projects
    transcript = mine / "session.jsonl"
    write_transcript(
        transcript,
        [
            ("user", "Why does the flamingo deploy fail on staging?"),
            ("assistant", "The flamingo deploy fails because the staging token expired."),
        ],
    )
    stop = payload("claude", "Stop", mine, transcript_path=str(transcript), stop_hook_active=False)
    for _ in range(2):
        code, out, _ = hook(daemon.socket, "claude", stop)
        assert code == 0 and out == ""
    daemon.wait_for(lambda s: s["counts"]["documents"] == 5)  # four memories and the session
    hits = daemon.client.search("flamingo deploy staging token", mode="bm25")["hits"]
    assert hits and {h["source"] for h in hits} == {str(transcript)}
    mine_hits = daemon.client.search(
        "flamingo deploy", mode="bm25", filters={"project": str(mine)}
    )["hits"]
    theirs_hits = daemon.client.search(
        "flamingo deploy", mode="bm25", filters={"project": str(theirs)}
    )["hits"]
    assert mine_hits and not theirs_hits

    # The session grows: the next stop adds only the new turn, to the same document.
    write_transcript(
        transcript,
        [
            ("user", "Why does the flamingo deploy fail on staging?"),
            ("assistant", "The flamingo deploy fails because the staging token expired."),
            ("user", "Rotate the pelican credentials too."),
        ],
    )
    hook(daemon.socket, "claude", stop)
    daemon.wait_for(lambda s: bool(daemon.search_sources("pelican credentials")))
    assert daemon.client.status()["counts"]["documents"] == 5


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("malformed", b'{"hook_event_name": "SessionStart", "cwd": '),
        ("empty", b""),
        ("not an object", b"[1, 2]"),
        ("unknown event", b'{"hook_event_name": "PreToolUse", "cwd": "/"}'),
    ],
)
def test_bad_payloads_print_nothing(name: str, raw: bytes, daemon: Daemon) -> None:
    code, out, elapsed = hook(daemon.socket, "claude", None, raw=raw)
    assert code == 0 and out == "", name
    assert elapsed < 15  # a hang shows here (the hook gives up after 2 s), not a speed figure


@pytest.mark.parametrize("host", sorted(HOST_EVENTS))
def test_daemon_down_prints_nothing(host: str, tmp_path: Path) -> None:
    for event in HOST_EVENTS[host]:
        code, out, elapsed = hook(
            tmp_path / "nobody.sock", host, payload(host, event, tmp_path, prompt="hello")
        )
        assert code == 0 and out == "" and elapsed < 15


def test_remember_and_search_by_project_from_the_command_line(
    daemon: Daemon, projects: tuple[Path, Path]
) -> None:
    mine, theirs = projects

    def cli(*args: str, cwd: Path) -> Any:
        proc = subprocess.run(
            [sys.executable, "-m", "recalld", *args, "--json"],
            env=daemon.env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    cli("remember", "The kiwi cache is warmed at boot", "--project", cwd=mine / "src")
    cli(
        "remember",
        "The kiwi cache belongs to the other service",
        "--project",
        str(theirs),
        cwd=mine,
    )
    cli("remember", "The kiwi fruit is green", "--global", cwd=mine)
    here = {
        h["text"] for h in cli("search", "kiwi", "--mode", "bm25", "--project", cwd=mine)["hits"]
    }
    assert here == {"The kiwi cache is warmed at boot", "The kiwi fruit is green"}
    everywhere = {h["text"] for h in cli("search", "kiwi", "--mode", "bm25", cwd=mine)["hits"]}
    assert len(everywhere) == 3


def test_files_belong_to_the_repository_they_live_in(
    daemon: Daemon, projects: tuple[Path, Path]
) -> None:
    mine, theirs = projects
    (mine / "src" / "notes.md").write_text("The albatross queue drains every night.\n")
    (theirs / "src" / "notes.md").write_text(
        "The albatross queue of the other team never drains.\n"
    )
    daemon.client.ingest(mine / "src")
    daemon.client.ingest(theirs / "src")
    scoped = daemon.client.search(
        "albatross queue drains", mode="bm25", filters={"project": str(mine)}
    )
    assert {h["source"] for h in scoped["hits"]} == {str(mine / "src" / "notes.md")}
    unscoped = daemon.client.search("albatross queue drains", mode="bm25")
    assert len({h["source"] for h in unscoped["hits"]}) == 2
    prompt = payload(
        "claude", "UserPromptSubmit", mine, prompt="when does the albatross queue drain"
    )
    code, out, _ = hook(daemon.socket, "claude", prompt)
    assert code == 0 and "other team" not in out
