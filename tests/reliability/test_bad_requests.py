"""A corpus of malformed requests sent over the real socket (issue 18, item 7): each one gets a
JSON-RPC error, a -32602 naming the param wherever a param is at fault, never -32603 and never
a closed connection; and the values that once poisoned a store (`event_time` of `1e400`) are
refused at the door."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from recalld import protocol
from tests.pipeline.conftest import Running

BIG = "x" * 70_000  # over the 65,536 characters of a string param
HUGE = 10**30  # past SQLite's 64-bit integers
LONG_PATH = "/" + "a" * 5000

# (method, params, the param the error must name)
PARAM_CASES: list[tuple[str, Any, str]] = [
    # poisoned values: JSON numbers Python reads as inf or nan
    ("remember", {"text": "t", "event_time": "@1e400"}, "event_time"),
    ("remember", {"text": "t", "event_time": "@-1e400"}, "event_time"),
    ("remember", {"text": "t", "event_time": "@Infinity"}, "event_time"),
    ("remember", {"text": "t", "event_time": "@NaN"}, "event_time"),
    ("remember", {"text": "t", "event_time": 1e300}, "event_time"),
    ("remember", {"text": "t", "event_time": -1e18}, "event_time"),
    ("remember", {"text": "t", "event_time": "Infinity"}, "event_time"),
    ("remember", {"text": "t", "event_time": "99999-01-01"}, "event_time"),
    ("remember", {"text": "t", "importance": "@NaN"}, "importance"),
    ("remember", {"text": "t", "importance": "@1e400"}, "importance"),
    ("remember", {"text": "t", "importance": 2}, "importance"),
    ("memories/update", {"id": 1, "event_time": "@1e400"}, "event_time"),
    ("memories/update", {"id": 1, "importance": "@-Infinity"}, "importance"),
    ("links/add", {"src": 1, "dst": 2, "relation": "related", "weight": "@NaN"}, "weight"),
    ("search", {"query": "q", "filters": {"since": "@1e400"}}, "filters.since"),
    ("search", {"query": "q", "filters": {"until": "@-Infinity"}}, "filters.until"),
    ("search", {"query": "q", "filters": {"since": -1e300}}, "filters.since"),
    ("forget", {"query": "q", "filters": {"until": "@NaN"}}, "filters.until"),
    ("list", {"since": "@1e400"}, "since"),
    ("jobs/wait", {"id": "j1", "timeout_s": "@NaN"}, "timeout_s"),
    # huge numbers
    ("get", {"id": HUGE}, "id"),
    ("forget", {"id": HUGE}, "id"),
    ("memories/history", {"id": HUGE}, "id"),
    ("links/list", {"id": HUGE}, "id"),
    ("links/remove", {"src": HUGE, "dst": 1}, "src"),
    ("links/add", {"src": 1, "dst": HUGE, "relation": "related"}, "dst"),
    ("search", {"query": "q", "limit": HUGE}, "limit"),
    ("search", {"query": "q", "limit": "@1e400"}, "limit"),
    ("errors/list", {"limit": HUGE}, "limit"),
    # negative and zero limits and ids
    ("search", {"query": "q", "limit": -1}, "limit"),
    ("search", {"query": "q", "limit": 0}, "limit"),
    ("search", {"query": "q", "expand": -3}, "expand"),
    ("search", {"query": "q", "budget_tokens": -100}, "budget_tokens"),
    ("errors/list", {"limit": -5}, "limit"),
    ("forget", {"query": "q", "limit": -1}, "limit"),
    ("get", {"id": -1}, "id"),
    ("get", {"id": 0}, "id"),
    ("list", {"limit": -1}, "limit"),
    ("list", {"offset": -1}, "offset"),
    ("context", {"event": "prompt", "budget_tokens": -5}, "budget_tokens"),
    # wrong types
    ("search", {"query": 5}, "query"),
    ("search", {"query": "q", "limit": "5"}, "limit"),
    ("search", {"query": "q", "limit": 2.5}, "limit"),
    ("search", {"query": "q", "explain": "yes"}, "explain"),
    ("search", {"query": "q", "mode": "psychic"}, "mode"),
    ("search", {"query": "q", "filters": []}, "filters"),
    ("search", {"query": "q", "filters": {"kinds": ["poem"]}}, "filters.kinds"),
    ("search", {"query": "q", "filters": {"tags": {"a": 1}}}, "filters.tags"),
    ("search", {"query": "q", "filters": {"sources": [1, 2]}}, "filters.sources"),
    ("search", {"query": "q", "filters": {"since": True}}, "filters.since"),
    ("search", {"query": "q", "filters": {"color": "red"}}, "filters.color"),
    ("get", {"id": "1"}, "id"),
    ("get", {"id": True}, "id"),
    ("get", {"id": [1]}, "id"),
    ("remember", {"text": ["a"]}, "text"),
    ("remember", {"text": "t", "tags": [None]}, "tags"),
    ("remember", {"text": "t", "type": "dream"}, "type"),
    ("forget", {"source": 5}, "source"),
    ("admin/check", {"repair": "yes"}, "repair"),
    ("export", {"vectors": 1}, "vectors"),
    ("reindex", {"model": 5}, "model"),
    ("links/list", {"id": 1, "direction": "sideways"}, "direction"),
    ("links/add", {"src": 1, "dst": 2, "relation": "loves"}, "relation"),
    # missing params
    ("search", {}, "query"),
    ("get", {}, "id"),
    ("remember", {}, "text"),
    ("forget", {}, "source"),
    ("ingest", {}, "path"),
    ("import", {}, "path"),
    ("sources/add", {}, "path"),
    ("memories/update", {"id": 1}, "text"),
    ("links/add", {"src": 1}, "dst"),
    # unknown params
    ("status", {"verbose": True}, "verbose"),
    ("search", {"query": "q", "limt": 5}, "limt"),
    # oversized and unusable strings
    ("search", {"query": BIG}, "query"),
    ("remember", {"text": "t", "tags": [BIG]}, "tags"),
    ("remember", {"text": "t", "tags": ["t"] * 1001}, "tags"),
    ("forget", {"source": BIG}, "source"),
    ("ingest", {"path": LONG_PATH}, "path"),
    ("sources/add", {"path": LONG_PATH}, "path"),
    ("ingest", {"path": "/tmp/a\x00b"}, "path"),
    ("sources/add", {"path": "/tmp/a\x00b"}, "path"),
    ("import", {"path": "/tmp/a\x00b"}, "path"),
    ("ingest", {"path": "relative/notes"}, "path"),
    ("forget/path", {"path": 5}, "path"),
    ("remember", {"text": "   "}, "text"),
    ("remember", {"text": "a lone surrogate \ud800"}, "text"),
    ("remember", {"text": "t", "tags": ["\udfff"]}, "tags"),
]

# Lines that are wrong before any param is read: (line, expected code)
PROTOCOL_CASES: list[tuple[bytes, int]] = [
    (b"not json", protocol.PARSE_ERROR),
    (b'{"jsonrpc":"2.0","id":1,"method":"status"', protocol.PARSE_ERROR),
    (b"\xff\xfe\x00", protocol.PARSE_ERROR),
    (b'{"jsonrpc":"1.0","id":1,"method":"status"}', protocol.INVALID_REQUEST),
    (b'{"id":1,"method":"status"}', protocol.INVALID_REQUEST),
    (b'{"jsonrpc":2.0,"id":1,"method":"status"}', protocol.INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":1}', protocol.INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":1,"method":5}', protocol.INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":1,"method":""}', protocol.INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":1.5,"method":"status"}', protocol.INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":1e400,"method":"status"}', protocol.INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":[1],"method":"status"}', protocol.INVALID_REQUEST),
    (b'[{"jsonrpc":"2.0","id":1,"method":"status"}]', protocol.INVALID_REQUEST),
    (b'"status"', protocol.INVALID_REQUEST),
    (b"null", protocol.INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":1,"method":"nosuch"}', protocol.METHOD_NOT_FOUND),
    (b'{"jsonrpc":"2.0","id":1,"method":"search/../status"}', protocol.METHOD_NOT_FOUND),
    (b'{"jsonrpc":"2.0","id":1,"method":"' + b"m" * 100_000 + b'"}', protocol.METHOD_NOT_FOUND),
    # What Python's json cannot read at all: a 5,000-digit integer, nesting 100,000 deep.
    (b'{"jsonrpc":"2.0","id":1,"method":"get","params":{"id":' + b"9" * 5000 + b"}}", -32700),
    (b'{"jsonrpc":"2.0","id":' + b"9" * 5000 + b',"method":"status"}', protocol.PARSE_ERROR),
    (
        b'{"jsonrpc":"2.0","id":1,"method":"search","params":{"query":"q","filters":'
        + b"[" * 100_000
        + b"]" * 100_000
        + b"}}",
        protocol.PARSE_ERROR,
    ),
    (
        b'{"jsonrpc":"2.0","id":1,"method":"search","params":'
        + b'{"a":' * 50_000
        + b"1"
        + b"}" * 50_001,
        protocol.PARSE_ERROR,
    ),
]
# Params that are not an object: -32602 naming `params`.
NON_OBJECT_PARAMS = [b"[1,2]", b'"query"', b"42", b"true"]


def encode(method: str, params: Any, request_id: int) -> bytes:
    """A request line; a string value "@X" is written as the bare JSON token X (1e400,
    Infinity, NaN), which no JSON encoder produces but any peer can send."""
    text = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
    for token in ("1e400", "-1e400", "Infinity", "-Infinity", "NaN"):
        text = text.replace(f'"@{token}"', token)
    return text.encode() + b"\n"


async def ask(streams: list[Any], socket: Path, line: bytes) -> tuple[dict[str, Any] | None, bool]:
    """Send one line on the shared connection; the answer, and whether the daemon closed it
    (then a new connection replaces it, so one failure does not hide the next)."""
    reader, writer = streams
    writer.write(line if line.endswith(b"\n") else line + b"\n")
    await writer.drain()
    answer = await asyncio.wait_for(reader.readline(), 30)
    if not answer:
        streams[:] = await asyncio.open_unix_connection(str(socket), limit=2**24)
        return None, True
    message: dict[str, Any] = json.loads(answer)
    return message, False


async def test_every_bad_request_gets_a_named_error_and_the_connection_stays(
    daemon: Running,
) -> None:
    async with daemon.client() as client:
        first = await client.remember("The tide tables are pinned by the door")
        await client.remember("Low tide is at noon on Sunday")
    assert first["id"] == 1
    streams: list[Any] = list(await asyncio.open_unix_connection(str(daemon.socket), limit=2**24))
    closed: list[str] = []
    internal: list[str] = []
    wrong: list[str] = []
    named = 0
    request_id = 100
    for method, params, param in PARAM_CASES:
        request_id += 1
        answer, hung_up = await ask(streams, daemon.socket, encode(method, params, request_id))
        label = f"{method} {json.dumps(params)[:80]}"
        if hung_up or answer is None:
            closed.append(label)
            continue
        error = answer.get("error") or {}
        if error.get("code") == protocol.INTERNAL_ERROR:
            internal.append(label)
        elif answer.get("id") != request_id or error.get("code") != protocol.INVALID_PARAMS:
            wrong.append(f"{label} -> {answer}")
        elif (error.get("data") or {}).get("param") != param:
            wrong.append(f"{label} -> names {error.get('data')}, not {param!r}")
        else:
            named += 1
    for line in NON_OBJECT_PARAMS:
        request_id += 1
        raw = b'{"jsonrpc":"2.0","id":%d,"method":"search","params":%s}' % (request_id, line)
        answer, hung_up = await ask(streams, daemon.socket, raw)
        if hung_up or answer is None:
            closed.append(raw.decode())
        elif answer["error"]["code"] == protocol.INVALID_PARAMS and answer["error"].get("data") == {
            "param": "params"
        }:
            named += 1
        else:
            wrong.append(f"{raw!r} -> {answer}")
    protocol_ok = 0
    for line, code in PROTOCOL_CASES:
        answer, hung_up = await ask(streams, daemon.socket, line)
        if hung_up or answer is None:
            closed.append(repr(line[:60]))
        elif answer["error"]["code"] == protocol.INTERNAL_ERROR:
            internal.append(repr(line[:60]))
        elif answer["error"]["code"] != code:
            wrong.append(f"{line[:60]!r} -> {answer}")
        else:
            protocol_ok += 1
    streams[1].close()
    total = len(PARAM_CASES) + len(NON_OBJECT_PARAMS) + len(PROTOCOL_CASES)
    print(
        f"\nbad-request corpus: {total} requests; {named} of "
        f"{len(PARAM_CASES) + len(NON_OBJECT_PARAMS)} param errors named their param "
        f"(-32602), {protocol_ok} of {len(PROTOCOL_CASES)} protocol errors got their code; "
        f"{len(internal)} internal errors, {len(closed)} closed connections"
    )
    assert not closed, closed
    assert not internal, internal
    assert not wrong, "\n".join(wrong)
    # Nothing poisoned got in: the store still reads back, every value of it.
    async with daemon.client() as client:
        hits = (await client.search("tide", mode="bm25"))["hits"]
        assert {h["id"] for h in hits} == {1, 2}
        assert all(h["event_time"] is None or h["event_time"] < 1e11 for h in hits)
        assert (await client.check())["ok"]
        assert (await client.status())["state"] == "ready"
