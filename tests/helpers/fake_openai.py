"""A small real OpenAI-compatible HTTP server on 127.0.0.1, for tests of our clients.

The `openai` 3.x client sits on `httpx2`, so transport mocks of `httpx` do not reach it; a real
socket does. The server answers

- `POST /v1/embeddings`: deterministic vectors (a signed bag of hashed words, so texts sharing
  words are similar), float or base64 (little-endian float32) as the request's
  `encoding_format` asks, of length `dimension` or the request's `dimensions`;
- `POST /v1/chat/completions`: a chat completion whose content is JSON facts for the rounds in
  the request (`{"rounds": [...]}`), made by `facts_for` (by default one fact per round,
  "<first speaker> said that <first turn>.").

Answers can be scripted per endpoint (`script("embeddings", Reply(status=429, ...))`): a status
with headers and body, a delay (cut short when the server stops), malformed content or a vector
of the wrong length. Every request is recorded with its headers, JSON body and arrival time.
`stop()` closes the listening socket, so later requests are refused.

    with FakeOpenAI(dimension=16) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="k")
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass
class Reply:
    """A scripted answer for the next request to one endpoint.

    Attributes:
        status: HTTP status; anything but 200 is sent with `body` (default: an error object).
        headers: Extra response headers, e.g. `{"Retry-After": "1"}`.
        body: Raw response bytes instead of the normal answer.
        delay_s: Wait this long before answering.
        content: For chat completions: the message content instead of the canned facts.
        dimension: For embeddings: the vector length instead of the usual one.
    """

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    delay_s: float = 0.0
    content: str | None = None
    dimension: int | None = None


@dataclass
class Recorded:
    """One request the server received (header names in lower case)."""

    path: str
    headers: dict[str, str]
    body: Any
    at: float


def fake_vector(text: str, dimension: int) -> np.ndarray:
    """The server's deterministic, unnormalised vector for `text`."""
    out = np.zeros(dimension, dtype=np.float32)
    for word in _WORD.findall(text.lower()):
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        bucket = int.from_bytes(digest[:4], "little") % dimension
        out[bucket] += 2.0 if digest[4] & 1 else -2.0
    if not out.any():
        out[0] = 1.0
    return out


def canned_facts(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One fact per round: "<speaker> said that <text>." from its first turn."""
    answer = []
    for rnd in rounds:
        turn = rnd["turns"][0]
        answer.append(
            {"round": rnd["round"], "facts": [f"{turn['speaker']} said that {turn['text']}"]}
        )
    return {"facts": answer}


class _Server(ThreadingHTTPServer):
    fake: FakeOpenAI

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up (timeout) leaves a broken pipe behind; that is expected


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.0: one request per connection, so no idle keep-alive thread outlives a test.
    protocol_version = "HTTP/1.0"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        fake = self.server.fake
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        path = self.path.rstrip("/")
        headers = {k.lower(): v for k, v in self.headers.items()}
        fake.record(Recorded(path, headers, body, time.monotonic()))
        reply = fake.next_reply(path)
        if reply.delay_s and fake.stopping.wait(reply.delay_s):
            return
        if reply.status != 200 or reply.body is not None:
            error = {"error": {"message": f"scripted {reply.status}", "type": "test"}}
            payload = reply.body if reply.body is not None else json.dumps(error).encode()
            self._send(reply.status, payload, reply.headers)
        elif path.endswith("/embeddings") and isinstance(body, dict):
            self._send(200, json.dumps(fake.embeddings(body, reply)).encode(), reply.headers)
        elif path.endswith("/chat/completions") and isinstance(body, dict):
            self._send(200, json.dumps(fake.chat(body, reply)).encode(), reply.headers)
        else:
            self._send(404, b'{"error": {"message": "not found"}}', {})

    def _send(self, status: int, payload: bytes, headers: dict[str, str]) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass


class FakeOpenAI:
    """The fake endpoint; use as a context manager or call `start()` / `stop()`.

    Args:
        dimension: Length of the vectors it returns.
        honour_dimensions: Whether a request's `dimensions` changes the length (like OpenAI's
            text-embedding-3 models); False behaves like servers that ignore it.
        facts_for: Makes the chat answer's JSON object from the request's rounds.
    """

    def __init__(
        self,
        dimension: int = 16,
        *,
        honour_dimensions: bool = True,
        facts_for: Callable[[list[dict[str, Any]]], dict[str, Any]] = canned_facts,
    ) -> None:
        self.dimension = dimension
        self.honour_dimensions = honour_dimensions
        self.facts_for = facts_for
        self.requests: list[Recorded] = []
        self.stopping = threading.Event()
        self._scripts: dict[str, deque[Reply]] = {}
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        """The API root to give a client."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FakeOpenAI:
        """Listen on a free port (or on `port`, when set: a restart after `stop()` comes back
        on the same one) and serve in a thread."""
        self.stopping.clear()
        server = _Server(("127.0.0.1", self.port), _Handler)
        server.fake = self
        self._server = server
        self.port = server.server_address[1]
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket (idempotent); delayed answers are dropped."""
        if self._server is None:
            return
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        assert self._thread is not None
        self._thread.join(5)
        self._server = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def script(self, endpoint: str, *replies: Reply) -> None:
        """Queue answers for the next requests to `embeddings` or `chat/completions`."""
        with self._lock:
            self._scripts.setdefault("/" + endpoint.strip("/"), deque()).extend(replies)

    def next_reply(self, path: str) -> Reply:
        with self._lock:
            for suffix, queue in self._scripts.items():
                if path.endswith(suffix) and queue:
                    return queue.popleft()
        return Reply()

    def record(self, request: Recorded) -> None:
        with self._lock:
            self.requests.append(request)

    def requests_to(self, endpoint: str) -> list[Recorded]:
        """The requests received by `embeddings` or `chat/completions`, in order."""
        with self._lock:
            return [r for r in self.requests if r.path.endswith("/" + endpoint.strip("/"))]

    def embeddings(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        inputs = body["input"]
        inputs = [inputs] if isinstance(inputs, str) else inputs
        dimension = self.dimension
        if self.honour_dimensions and isinstance(body.get("dimensions"), int):
            dimension = body["dimensions"]
        dimension = reply.dimension or dimension
        data = []
        for index, text in enumerate(inputs):
            vector = fake_vector(text, dimension)
            if body.get("encoding_format") == "base64":
                encoded: Any = base64.b64encode(vector.astype("<f4").tobytes()).decode()
            else:
                encoded = [float(x) for x in vector]
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        tokens = sum(len(_WORD.findall(t)) for t in inputs)
        return {
            "object": "list",
            "data": data,
            "model": body.get("model"),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    def chat(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        content = reply.content
        if content is None:
            rounds = json.loads(body["messages"][-1]["content"])["rounds"]
            content = json.dumps(self.facts_for(rounds))
        return {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
