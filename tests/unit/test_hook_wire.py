"""The agent hook's import path stays tiny, and its JSON (`recalld.hooks.wire`, the json
package's C core) reads and writes what `json` does."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from recalld.hooks import wire


def test_the_hook_imports_almost_nothing() -> None:
    code = (
        "import sys; import recalld.launcher, recalld.hooks.context; "
        "print([m for m in ('re', 'typing', 'json', 'socket', 'collections', 'functools', "
        "'click', 'recalld.config', 'recalld.client', 'asyncio') if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    "value",
    [
        {"hook_event_name": "UserPromptSubmit", "prompt": 'naïve "quotes" \\ \n tab\t 🦜'},
        [1, -2.5, 1e300, True, False, None, "", {}, []],
        {"nested": {"a": [{"b": [None]}]}, "unicode": "\u2028\u0000"},
    ],
)
def test_round_trips_like_json(value: object) -> None:
    text = wire.dumps(value)
    assert text == json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    assert wire.loads(text) == value
    assert wire.loads(json.dumps(value, indent=2) + "\n") == value


@pytest.mark.parametrize(
    "text", ["", "   ", "{", '{"a": 1', '{"a": 1} x', "[1,]", "nope", '{"a": 1}{"b": 2}', "\ud800"]
)
def test_malformed_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        wire.loads(text)


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (b'{"hook_event_name": "SessionStart", "cwd": "/"}', "daemon unavailable"),
        (b"not json", "payload is not JSON"),
        (b'{"hook_event_name": "UserPromptSubmit"}', "daemon unavailable"),
        (b'{"hook_event_name": "SessionStart"}', "budget 0"),
    ],
)
def test_verbose_says_why_nothing_was_printed(payload: bytes, why: str, tmp_path) -> None:
    budget = ["--budget", "0"] if why == "budget 0" else []
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "recalld",
            "context",
            "--verbose",
            "--socket",
            str(tmp_path / "x"),
            *budget,
        ],
        input=payload,
        capture_output=True,
        check=False,
    )
    assert proc.returncode == 0 and proc.stdout == b""
    assert why in proc.stderr.decode()
