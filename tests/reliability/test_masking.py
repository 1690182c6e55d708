"""Passwords inside URLs are never shown (issue 18, item 7): `embed.base_url`, `facts.base_url`
and a `postgresql://` store path, through `config show` (offline and from the daemon),
`models`, `status`, the daemon's log and its error answers, with a real daemon process talking
to a real OpenAI-compatible server."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest

from recalld import protocol
from recalld.daemon.lifecycle import JsonFormatter, TextFormatter
from tests.helpers.fake_openai import FakeOpenAI
from tests.integration.conftest import Daemon

EMBED_SECRET = "emb3d-S3CRET"
FACTS_SECRET = "f4cts-S3CRET"
STORE_SECRET = "st0re-S3CRET"
SECRETS = (EMBED_SECRET, FACTS_SECRET, STORE_SECRET)


@pytest.fixture
def endpoint() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI(dimension=32)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def with_password(url: str, user: str, secret: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{user}:{secret}@{rest}"


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "recalld", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_passwords_in_urls_are_masked_everywhere(
    make_daemon: Callable[..., Daemon], endpoint: FakeOpenAI
) -> None:
    embed_url = with_password(endpoint.base_url, "alice", EMBED_SECRET)
    facts_url = with_password(endpoint.base_url, "bob", FACTS_SECRET)
    daemon = make_daemon(
        RECALLD_EMBED__MODEL="openai:test",
        RECALLD_EMBED__BASE_URL=embed_url,
        RECALLD_EMBED__TIMEOUT_S="1",
        RECALLD_EMBED__MAX_RETRIES="0",
        RECALLD_FACTS__BASE_URL=facts_url,
        OPENAI_API_KEY="sk-test",
    )
    daemon.start()
    daemon.wait_ready()
    shown: list[str] = []
    try:
        client = daemon.client
        client.remember("The boiler service is due in March")
        assert client.search("boiler service")["hits"]
        shown.append(json.dumps(client.config_show()))
        shown.append(json.dumps(client.call("models/list")))
        shown.append(json.dumps(client.status()))
        for args in (["config", "show"], ["config", "show", "--json"], ["models"], ["status"]):
            done = cli(daemon.env, *args)
            assert done.returncode == 0, done.stderr
            shown += [done.stdout, done.stderr]
        # The endpoint goes away: the failures are answered and logged, the password is not.
        endpoint.stop()
        failed = cli(daemon.env, "remember", "The endpoint is down now")
        assert failed.returncode != 0
        shown += [failed.stdout, failed.stderr]
        failed = cli(daemon.env, "search", "endpoint", "--mode", "vector")
        shown += [failed.stdout, failed.stderr]
        # A store URL with a password, as `config show` resolves it offline.
        store_url = f"postgresql://carol:{STORE_SECRET}@db.example/recalld"
        offline = cli(daemon.env, "config", "show", "--json", "--set", f"store.path={store_url}")
        assert offline.returncode == 0, offline.stderr
        shown += [offline.stdout, offline.stderr]
        assert "postgresql://carol:****@db.example/recalld" in offline.stdout
    finally:
        assert daemon.stop() == 0
    shown.append(daemon.log.read_text())
    assert "alice:****@127.0.0.1" in "".join(shown)  # the URL is still recognisable
    for text in shown:
        for secret in SECRETS:
            assert secret not in text, text[max(0, text.find(secret) - 300) :][:600]


def test_error_answers_and_log_lines_mask_passwords() -> None:
    """The two places every error and log line pass through, on their own."""
    url = f"postgresql://dave:{STORE_SECRET}@db.example/x"
    answer = protocol.dumps(
        protocol.error_response(1, -32020, f"cannot open store {url}", {"path": url})
    ).decode()
    assert STORE_SECRET not in answer and "dave:****@db.example" in answer
    record = logging.LogRecord("recalld.x", logging.ERROR, __file__, 1, "store %s", (url,), None)
    for formatter in (TextFormatter("%(message)s"), JsonFormatter()):
        line = formatter.format(record)
        assert STORE_SECRET not in line and "dave:****@" in line
    assert os.environ.get("RECALLD_HOME")  # the suite's isolated home, untouched
