"""The protocol codec and the error mapping in both directions (daemon → wire → client)."""

from __future__ import annotations

import json
import logging

import pytest

from recalld import protocol
from recalld.client.base import error_from_object
from recalld.errors import (
    DaemonError,
    NotFoundError,
    ProtocolError,
    RecalldError,
    UnsupportedFormatError,
    error_classes,
)


def test_dumps_is_compact_utf8_one_line() -> None:
    line = protocol.dumps(protocol.request(7, "search", {"query": "café\nsqlite", "limit": 5}))
    assert (
        line
        == (
            '{"jsonrpc":"2.0","id":7,"method":"search","params":'
            '{"query":"café\\nsqlite","limit":5}}\n'
        ).encode()
    )
    assert line.count(b"\n") == 1


def test_request_round_trip() -> None:
    parsed = protocol.parse_request(protocol.dumps(protocol.request("a", "get", {"id": 3})))
    assert parsed == protocol.Request(method="get", params={"id": 3}, id="a")
    assert not parsed.is_notification


def test_notification_has_no_id() -> None:
    parsed = protocol.parse_request(b'{"jsonrpc":"2.0","method":"status"}')
    assert parsed.is_notification and parsed.id is None


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (b"{not json", protocol.PARSE_ERROR),
        (b"\xff\xfe", protocol.PARSE_ERROR),
        (b'[{"jsonrpc":"2.0","id":1,"method":"status"}]', protocol.INVALID_REQUEST),
        (b'"status"', protocol.INVALID_REQUEST),
        (b'{"jsonrpc":"1.0","id":1,"method":"status"}', protocol.INVALID_REQUEST),
        (b'{"jsonrpc":"2.0","id":1}', protocol.INVALID_REQUEST),
        (b'{"jsonrpc":"2.0","id":{"x":1},"method":"status"}', protocol.INVALID_REQUEST),
        (b'{"jsonrpc":"2.0","id":1,"method":"search","params":["q"]}', protocol.INVALID_PARAMS),
    ],
)
def test_bad_requests(line: bytes, code: int) -> None:
    with pytest.raises(protocol.RpcError) as info:
        protocol.parse_request(line)
    assert info.value.code == code
    response = info.value.to_response()
    assert response["error"]["code"] == code
    if code == protocol.PARSE_ERROR:
        assert response["id"] is None


def test_parse_incoming_response_and_notification() -> None:
    note = protocol.parse_incoming(protocol.dumps(protocol.notification("progress", {"token": 1})))
    assert note.is_notification and note.params == {"token": 1}
    answer = protocol.parse_incoming(protocol.dumps(protocol.result_response(1, {"a": 1})))
    assert not answer.is_notification and answer.result == {"a": 1} and answer.error is None


def test_daemon_state_codes_do_not_collide_with_domain_codes() -> None:
    domain = {cls.code for cls in error_classes().values()}
    states = {protocol.SHUTTING_DOWN, protocol.NOT_READY, protocol.LINE_TOO_LONG}
    assert not domain & states
    assert all(-32099 <= code <= -32000 for code in domain | states)


ERROR_CLASSES: list[type[RecalldError]] = sorted(error_classes().values(), key=lambda c: c.code)


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=[c.__name__ for c in ERROR_CLASSES])
def test_every_error_class_round_trips(cls: type[RecalldError]) -> None:
    from recalld.daemon.methods import error_object

    code, message, data = error_object(cls("it broke; do X", data={"path": "/a"}), "m")
    assert code == cls.code
    wire = json.loads(protocol.dumps(protocol.error_response(1, code, message, data)))
    back = error_from_object(wire["error"])
    assert type(back) is cls
    assert back.message == "it broke; do X"
    assert back.data == {"path": "/a"}


def test_unknown_exception_is_internal_error_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    from recalld.daemon.methods import error_object

    with caplog.at_level(logging.ERROR, logger="recalld"):
        code, message, data = error_object(KeyError("secret"), "search")
    assert code == protocol.INTERNAL_ERROR
    assert "secret" not in message and data is None
    assert caplog.records[0].exc_info is not None
    assert isinstance(error_from_object({"code": code, "message": message}), DaemonError)


def test_protocol_codes_become_protocol_errors() -> None:
    for code in (protocol.METHOD_NOT_FOUND, protocol.INVALID_PARAMS, protocol.PARSE_ERROR):
        error = error_from_object({"code": code, "message": "x"})
        assert type(error) is ProtocolError and error.data["rpc_code"] == code
    shutting = error_from_object({"code": protocol.SHUTTING_DOWN, "message": "bye"})
    assert type(shutting) is DaemonError


def test_data_type_wins_over_code() -> None:
    error = error_from_object(
        {"code": -1, "message": "m", "data": {"type": "UnsupportedFormatError", "path": "x"}}
    )
    assert isinstance(error, UnsupportedFormatError)
    assert not isinstance(
        error_from_object({"code": NotFoundError.code, "message": "m", "data": {"type": "Bogus"}}),
        NotFoundError,
    )


def test_params_validation() -> None:
    from recalld.daemon.params import InvalidParams, Params

    params = Params(
        {
            "query": "x",
            "limit": 5,
            "flag": True,
            "when": "2024-03-01",
            "filters": {"kinds": ["code"]},
        }
    )
    assert params.string("query") == "x"
    assert params.integer("limit", None, low=1, high=10) == 5
    assert params.boolean("flag") is True
    assert params.time("when") == 1709251200.0
    nested = params.object("filters")
    assert nested.strings("kinds", ("text", "code")) == ("code",)
    nested.done()
    params.done()
    with pytest.raises(InvalidParams, match="'limit' must be an integer"):
        Params({"limit": "5"}).integer("limit")
    with pytest.raises(InvalidParams, match="must be an integer"):
        Params({"limit": True}).integer("limit")
    with pytest.raises(InvalidParams, match="missing param 'query'"):
        Params({}).string("query")
    with pytest.raises(InvalidParams, match="unknown param 'qeury'"):
        Params({"qeury": "x"}).done()
    with pytest.raises(InvalidParams, match=r"'filters.kinds': 'nope'"):
        Params({"kinds": ["nope"]}, "filters.").strings("kinds", ("text",))
