"""`recalld context`: read a host's hook payload on stdin, ask the daemon, print what the host
injects.

Payloads (JSON objects on stdin) carry `hook_event_name`, `cwd`, `session_id`,
`transcript_path` and, for prompts, `prompt`, as Claude Code
(https://code.claude.com/docs/en/hooks), Gemini CLI (https://geminicli.com/docs/hooks/reference)
and Codex CLI (https://developers.openai.com/codex/hooks) document them. Context goes back as
`{"hookSpecificOutput": {"hookEventName": ..., "additionalContext": ...}}`, the shape all
three read. Whatever goes wrong (no daemon, a malformed payload, a budget of 0, a slow
answer) the hook prints nothing and exits 0: an agent must never break or wait on memory.

It imports only os, select, sys, time and the C cores of socket and json (`_socket`,
`_json`, see `recalld.hooks.wire`), plus `recalld.projects`; the socket call is written out
here rather than taken from `recalld.client`, whose imports cost more than the whole hook
should.
"""

from __future__ import annotations

import _socket  # the socket module's C core: `socket` builds its IntEnums on import
import os
import select
import sys
import time

from recalld.hooks import wire
from recalld.projects import project_of

# Names for the type checker only: typing and collections.abc cost imports (typing pulls in
# `re`) that a hook run on every prompt should not pay.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any, TextIO

# Each host's hook events, as its documentation names them, and what recalld does at each.
EVENTS: dict[str, dict[str, str]] = {
    "claude": {
        "SessionStart": "start",
        "UserPromptSubmit": "prompt",
        "Stop": "stop",
        "SessionEnd": "stop",
    },
    "gemini": {
        "SessionStart": "start",
        "BeforeAgent": "prompt",
        "AfterAgent": "stop",
        "SessionEnd": "stop",
    },
    "codex": {"SessionStart": "start", "UserPromptSubmit": "prompt", "Stop": "stop"},
}
ANY_HOST = {name: event for events in EVENTS.values() for name, event in events.items()}
DEFAULT_BUDGET = 800
FLAGS = frozenset({"verbose"})  # options without a value
TIMEOUT_S = 2.0  # for the whole exchange with the daemon
STDIN_TIMEOUT_S = 2.0
MAX_PAYLOAD = 4 * 1024 * 1024
MAX_ANSWER = 8 * 1024 * 1024


class _Skip(Exception):
    """Nothing to do, or nothing that can be done: print nothing, exit 0."""


def _options(argv: Sequence[str]) -> dict[str, str]:
    """`--name value` / `--name=value` pairs (argparse costs more to import than this hook
    spends on its work)."""
    options: dict[str, str] = {}
    args = list(argv)
    while args:
        arg = args.pop(0)
        if not arg.startswith("--"):
            raise _Skip(f"unexpected argument {arg!r}")
        name, eq, value = arg[2:].partition("=")
        if not eq and name in FLAGS:
            value = "1"
        elif not eq:
            if not args:
                raise _Skip(f"--{name} needs a value")
            value = args.pop(0)
        options[name] = value
    return options


def read_payload(stream: TextIO, timeout: float = STDIN_TIMEOUT_S) -> dict[str, Any]:
    """The hook payload: one JSON object on `stream`, read within `timeout` seconds."""
    fd = stream.fileno()
    deadline = time.monotonic() + timeout
    data = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise _Skip("no payload on stdin in time")
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_PAYLOAD:
            raise _Skip("payload too large")
    try:
        payload = wire.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise _Skip("payload is not JSON") from None
    if not isinstance(payload, dict):
        raise _Skip("payload is not a JSON object")
    return payload


def call(path: str, method: str, params: Mapping[str, Any], timeout: float) -> Any:
    """One JSON-RPC call over the daemon's socket; its result. Progress notifications are
    skipped. Raises `_Skip` on any failure."""
    deadline = time.monotonic() + timeout
    request = {"jsonrpc": "2.0", "id": 1, "method": method, "params": dict(params)}
    try:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    except OSError as exc:
        raise _Skip(f"no socket: {exc}") from None
    try:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.sendall(wire.dumps(request).encode() + b"\n")
        buffer = b""
        while True:
            line, newline, rest = buffer.partition(b"\n")
            if newline:
                buffer = rest
                message = wire.loads(line.decode("utf-8"))
                if not isinstance(message, dict) or message.get("id") != 1:
                    continue  # a progress notification
                error = message.get("error")
                if isinstance(error, dict):
                    raise _Skip(str(error.get("message")))
                return message.get("result")
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            chunk = sock.recv(65536)
            if not chunk or len(buffer) > MAX_ANSWER:
                raise _Skip("the daemon closed the connection")
            buffer += chunk
    except (OSError, ValueError) as exc:
        raise _Skip(f"daemon unavailable: {exc}") from None
    finally:
        sock.close()


def socket_path(options: Mapping[str, str]) -> str:
    """The daemon's socket: `--socket` (what `recalld agent install` writes), else resolved
    from the settings as every command does (slower: it loads the config machinery)."""
    if options.get("socket"):
        return options["socket"]
    from recalld.config import load_settings

    return os.fspath(load_settings(None, os.environ).settings.socket_path)


def request(payload: Mapping[str, Any], options: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    """The host's event name and the params of the `context` call for it."""
    name = options.get("event") or payload.get("hook_event_name")
    events = EVENTS.get(options.get("host", ""), ANY_HOST)
    event = name if name in ("start", "prompt", "stop") else events.get(str(name))
    if event is None:
        raise _Skip(f"not an event recalld acts on: {name!r}")
    try:
        budget = int(options.get("budget", DEFAULT_BUDGET))
    except ValueError:
        raise _Skip("--budget is not a number") from None
    if budget <= 0 and event != "stop":
        raise _Skip("budget 0")
    cwd = payload.get("cwd")
    folder = options.get("project") or (cwd if isinstance(cwd, str) and cwd else os.getcwd())
    params: dict[str, Any] = {
        "event": event,
        "project": project_of(folder),
        "budget_tokens": max(0, min(budget, 100_000)),
    }
    for key in ("session_id", "transcript_path", "prompt"):
        value = payload.get(key)
        if isinstance(value, str) and value:
            params[key] = value
    return str(name), params


def run(argv: Sequence[str], stdin: TextIO, stdout: TextIO) -> None:
    """The hook: payload in, context out; raises `_Skip` when there is nothing to print."""
    options = _options(argv)
    payload = read_payload(stdin)
    name, params = request(payload, options)
    result = call(socket_path(options), "context", params, TIMEOUT_S)
    text = result.get("text") if isinstance(result, dict) else None
    if params["event"] == "stop" or not text:
        return
    output = {"hookSpecificOutput": {"hookEventName": name, "additionalContext": text}}
    stdout.write(wire.dumps(output) + "\n")
    stdout.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the hook; always returns 0. With `--verbose 1` it says on stderr why nothing was
    printed."""
    args = list(sys.argv[2:] if argv is None else argv)
    verbose = "--verbose" in args or any(a.startswith("--verbose=") for a in args)
    try:
        run(args, sys.stdin, sys.stdout)
    except _Skip as why:
        if verbose:
            sys.stderr.write(f"recalld context: {why}\n")
    except Exception as exc:  # never break the agent, whatever happened
        if verbose:
            sys.stderr.write(f"recalld context: {type(exc).__name__}: {exc}\n")
    return 0
