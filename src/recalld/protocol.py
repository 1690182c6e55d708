"""The socket protocol: JSON-RPC 2.0, one compact UTF-8 JSON object per line (NDJSON).

Shared by the daemon and the client, so both frame and parse messages the same way:

    → {"jsonrpc":"2.0","id":7,"method":"search","params":{"query":"sqlite wal","limit":5}}
    ← {"jsonrpc":"2.0","method":"progress","params":{"token":7,"done":1,"total":3}}
    ← {"jsonrpc":"2.0","id":7,"result":{"hits":[...],"tier":"high","rejected":false}}

Rules (documented in `docs/protocol.md`):
- One message per line, at most `MAX_LINE_BYTES`. A line that is not JSON gets `PARSE_ERROR`
  with a null id and the connection stays open; an oversized line gets `LINE_TOO_LONG` and the
  connection is closed (the rest of the line cannot be re-synchronised cheaply).
- Batches (JSON arrays) are not supported and get `INVALID_REQUEST`.
- Long work reports progress as `progress` notifications (no id) whose `token` is the id of the
  request they belong to.
- Domain errors carry their own codes (see `recalld.errors`) and `data.type`, the error class
  name, which the client raises back.

This module only knows framing and message shapes; it imports nothing from the daemon.
"""

from __future__ import annotations

import json

# typing, and the regular expressions of `recalld.masking`, are left out of a client's start-up
# (`recalld search`, issue 20): mypy reads this block, Python skips it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROTOCOL_VERSION = 1
JSONRPC = "2.0"

# The StreamReader limit on both sides. Requests are small; results of a large search or a
# `get` of a big chunk stay far below this.
MAX_LINE_BYTES = 8 * 2**20

# Standard JSON-RPC 2.0 codes.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

# Daemon states. -32000 and -32010..-32099 belong to the error tree in `recalld.errors`, so the
# states take the free codes just above the base code.
SHUTTING_DOWN = -32001
NOT_READY = -32002
LINE_TOO_LONG = -32003
PERMISSION_DENIED = -32004
TOO_MANY_CONNECTIONS = -32005
# `recalld.errors.IntegrityError`'s code: the answer held a stored value JSON cannot carry.
UNENCODABLE_ANSWER = -32023

STANDARD_MESSAGES = {
    PARSE_ERROR: "parse error",
    INVALID_REQUEST: "invalid request",
    METHOD_NOT_FOUND: "method not found",
    INVALID_PARAMS: "invalid params",
    INTERNAL_ERROR: "internal error",
    SHUTTING_DOWN: "the daemon is shutting down",
    NOT_READY: "the daemon is starting up",
    LINE_TOO_LONG: "message too long",
    PERMISSION_DENIED: "permission denied",
    TOO_MANY_CONNECTIONS: "too many connections",
}

PROGRESS = "progress"

RequestId = int | str | None


class RpcError(Exception):
    """A protocol-level failure to answer with an error object.

    Args:
        code: A JSON-RPC error code.
        message: Human-readable description.
        request_id: The id of the request, when it could be read.
        data: Extra structured detail.
    """

    def __init__(
        self,
        code: int,
        message: str,
        request_id: RequestId = None,
        data: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id
        self.data = data

    def to_response(self) -> dict[str, Any]:
        """The error response for this failure."""
        return error_response(self.request_id, self.code, self.message, self.data)


class Request:
    """A parsed request or notification (a plain class: `dataclasses` or `typing.NamedTuple`
    would cost every client's start-up some ms, issue 20).

    Attributes:
        method: The method name.
        params: Named parameters (positional parameters are not used by recalld).
        id: The request id; None for a notification, which gets no response.
        is_notification: True when the message had no `id` member at all.
    """

    __slots__ = ("id", "is_notification", "method", "params")

    def __init__(
        self,
        method: str,
        params: dict[str, Any],
        id: RequestId = None,
        is_notification: bool = False,
    ) -> None:
        self.method = method
        self.params = params
        self.id = id
        self.is_notification = is_notification

    def _fields(self) -> tuple[str, dict[str, Any], RequestId, bool]:
        return (self.method, self.params, self.id, self.is_notification)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Request) and self._fields() == other._fields()

    def __repr__(self) -> str:
        method, params, request_id, is_notification = self._fields()
        return (
            f"Request(method={method!r}, params={params!r}, id={request_id!r}, "
            f"is_notification={is_notification!r})"
        )


def dumps(message: dict[str, Any]) -> bytes:
    """Encode one message as a compact UTF-8 JSON line, newline included."""
    text = json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.encode("utf-8") + b"\n"


def dumps_answer(message: dict[str, Any]) -> bytes:
    """`dumps`, or, for a message that cannot be encoded (a stored `inf` an older recalld let
    in), an error answer to the same request, so one bad value never costs the connection."""
    try:
        return dumps(message)
    except (TypeError, ValueError) as exc:
        if "method" in message:  # a notification: nobody waits for it
            raise
        error = error_response(
            message.get("id"),
            UNENCODABLE_ANSWER,
            f"the answer holds a value JSON cannot carry ({str(exc)[:200]}); run `recalld "
            "check` to find it and `recalld check --repair` to fix it",
            {"type": "IntegrityError"},
        )
        try:
            return dumps(error)
        except ValueError:  # the id itself cannot be sent (a lone surrogate in a string id)
            return dumps({**error, "id": None})


def loads(line: bytes | str) -> Any:
    """Decode one line.

    Raises:
        RpcError: `PARSE_ERROR` when the line is not UTF-8 JSON.
    """
    try:
        return json.loads(line)
    except (ValueError, RecursionError) as exc:
        # ValueError covers bad UTF-8, bad JSON and an integer of over 4,300 digits;
        # RecursionError, arrays or objects nested thousands deep.
        raise RpcError(PARSE_ERROR, f"parse error: {str(exc)[:200]}") from exc


def request(
    request_id: RequestId, method: str, params: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A request message."""
    message: dict[str, Any] = {"jsonrpc": JSONRPC, "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """A notification message (no id, no response)."""
    message: dict[str, Any] = {"jsonrpc": JSONRPC, "method": method}
    if params is not None:
        message["params"] = params
    return message


def result_response(request_id: RequestId, result: Any) -> dict[str, Any]:
    """A successful response."""
    return {"jsonrpc": JSONRPC, "id": request_id, "result": result}


def error_response(
    request_id: RequestId, code: int, message: str, data: dict[str, Any] | None = None
) -> dict[str, Any]:
    """An error response; `data` is left out when empty. A URL's password in the message or
    the data is masked (`recalld.masking`): errors end up in terminals and logs."""
    from recalld.masking import mask, mask_value  # only for errors: a client never needs it

    error: dict[str, Any] = {"code": code, "message": mask(message)}
    if data:
        error["data"] = mask_value(data)
    return {"jsonrpc": JSONRPC, "id": request_id, "error": error}


def parse_request(line: bytes | str) -> Request:
    """Parse and validate one incoming line as a request or notification.

    Raises:
        RpcError: `PARSE_ERROR` for bad JSON (null id); `INVALID_REQUEST` for a batch, a
            non-object, a wrong `jsonrpc`, a missing method or params that are not an object.
    """
    message = loads(line)
    if isinstance(message, list):
        raise RpcError(
            INVALID_REQUEST, "batch requests are not supported; send one request per line"
        )
    if not isinstance(message, dict):
        raise RpcError(INVALID_REQUEST, "a request must be a JSON object")
    raw_id = message.get("id")
    request_id: RequestId = None
    if isinstance(raw_id, (int, str)) and not isinstance(raw_id, bool):
        request_id = raw_id
    elif raw_id is not None:
        raise RpcError(INVALID_REQUEST, "id must be a string, an integer or null")
    if message.get("jsonrpc") != JSONRPC:
        raise RpcError(INVALID_REQUEST, 'jsonrpc must be "2.0"', request_id)
    method = message.get("method")
    if not isinstance(method, str) or not method:
        raise RpcError(INVALID_REQUEST, "method must be a non-empty string", request_id)
    params = message.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise RpcError(
            INVALID_PARAMS,
            "params must be an object of named parameters",
            request_id,
            {"param": "params"},
        )
    return Request(method=method, params=params, id=request_id, is_notification="id" not in message)


class Incoming:
    """A message the client received: a response to one of its requests, or a notification."""

    __slots__ = ("error", "id", "method", "params", "result")

    def __init__(
        self,
        id: RequestId,
        method: str | None,
        params: dict[str, Any],
        result: Any,
        error: dict[str, Any] | None,
    ) -> None:
        self.id = id
        self.method = method
        self.params = params
        self.result = result
        self.error = error

    @property
    def is_notification(self) -> bool:
        """True for a notification (progress)."""
        return self.method is not None


def parse_incoming(line: bytes | str) -> Incoming:
    """Parse one line the daemon sent.

    Raises:
        RpcError: The line is not a JSON-RPC response or notification.
    """
    message = loads(line)
    if not isinstance(message, dict) or message.get("jsonrpc") != JSONRPC:
        raise RpcError(INVALID_REQUEST, "the daemon sent something that is not JSON-RPC 2.0")
    method = message.get("method")
    if isinstance(method, str):
        params = message.get("params")
        return Incoming(None, method, params if isinstance(params, dict) else {}, None, None)
    error = message.get("error")
    if error is not None and not isinstance(error, dict):
        raise RpcError(INVALID_REQUEST, "the daemon sent a malformed error object")
    return Incoming(message.get("id"), None, {}, message.get("result"), error)
