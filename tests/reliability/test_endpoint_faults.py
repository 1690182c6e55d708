"""Embedding endpoint faults (issue 6), against a real HTTP server the test controls: timeouts,
429 with Retry-After, 500s, malformed JSON, vectors of the wrong length and a server that is
gone. The daemon keeps the files pending (`status.queues.retrying`), backs off, keeps
answering (hybrid searches fall back to keywords), loses nothing, and completes once the
endpoint recovers. A model of another
dimension is refused at start with a clear error."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from recalld.daemon.lifecycle import STARTUP_FAILURE, Config, Server
from recalld.errors import EmbeddingError
from recalld.ingest import scheduler as scheduler_module
from tests.helpers.fake_openai import FakeOpenAI, Reply
from tests.pipeline.conftest import Running, daemon_env, start, stop, wait_until

DIMENSION = 16


class FaultyEndpoint(FakeOpenAI):
    """The fake endpoint, with one fault applied to every embedding request while set."""

    fault: Reply | None = None

    def next_reply(self, path: str) -> Reply:
        if self.fault is not None and path.endswith("/embeddings"):
            return self.fault
        return super().next_reply(path)


@pytest.fixture
def endpoint() -> Iterator[FaultyEndpoint]:
    server = FaultyEndpoint(dimension=DIMENSION)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def endpoint_env(home: Path, socket: Path, endpoint: FakeOpenAI, folder: Path) -> dict[str, str]:
    return daemon_env(
        home,
        socket,
        RECALLD_EMBED__MODEL="openai:test",
        RECALLD_EMBED__BASE_URL=endpoint.base_url,
        RECALLD_EMBED__TIMEOUT_S="0.3",
        RECALLD_EMBED__MAX_RETRIES="1",
        RECALLD_FACTS__ENABLED="false",
        RECALLD_DAEMON__WATCH=str(folder),
    )


# Each scenario: a name, how to break the endpoint, and what the failure looks like.
SCENARIOS: list[tuple[str, Reply | None]] = [
    ("timeout", Reply(delay_s=0.8)),
    ("429 Retry-After", Reply(status=429, headers={"Retry-After": "0.3"})),
    ("500", Reply(status=500)),
    ("malformed JSON", Reply(body=b'{"data": [ {"embedding": ')),
    ("wrong dimension", Reply(dimension=DIMENSION // 2)),
    ("connection refused", None),  # the server is stopped
]


@pytest.mark.slow
async def test_endpoint_faults_keep_files_pending_until_it_recovers(
    isolated_home: Path,
    short_dir: Path,
    tmp_path: Path,
    endpoint: FaultyEndpoint,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(scheduler_module, "RETRY_FIRST_S", 0.2)
    monkeypatch.setattr(scheduler_module, "RETRY_MAX_S", 1.0)
    folder = tmp_path / "notes"
    folder.mkdir()
    env = endpoint_env(isolated_home, short_dir / "s.sock", endpoint, folder)
    server, task = await start(env)
    running = Running(server, task, short_dir / "s.sock", isolated_home, env)
    survived: list[str] = []
    try:
        async with running.client() as client:

            async def status() -> dict[str, Any]:
                result: dict[str, Any] = await client.status()
                return result

            await client.remember("The lighthouse keeper logs the weather at dawn.")
            expected = 1
            for index, (name, fault) in enumerate(SCENARIOS):
                endpoint.fault = fault
                if fault is None:
                    endpoint.stop()
                names = [f"s{index}f{n}.md" for n in range(3)]
                with caplog.at_level(logging.WARNING, logger="recalld"):
                    for n, file in enumerate(names):
                        await asyncio.to_thread(
                            (folder / file).write_text,
                            f"Scenario {index} file {n}: the token fault{index}x{n} is here.\n",
                        )

                    async def retrying(count: int = len(names)) -> bool:
                        return bool((await status())["queues"]["retrying"] == count)

                    await wait_until(retrying, 30)
                    # Held under the fault through a few back-off rounds: pending, never lost,
                    # never recorded as failed, and the daemon answers all the while.
                    await asyncio.sleep(0.6)
                    during = await status()
                # Each file waits out its back-off or is being tried again: never dropped.
                waiting = during["queues"]["retrying"] + during["pending"]
                assert waiting >= len(names), (name, during["queues"])
                assert during["counts"]["documents"] == expected, name
                assert during["errors"] == 0 and during["ingested"]["failed"] == 0, name
                assert (await client.search(f"fault{index}x0", mode="bm25"))["hits"] == []
                # Searching goes on by keywords; asking for vectors only says why it cannot.
                found = await client.search(f"lighthouse keeper {name}", explain=True)
                assert found["hits"] and "lighthouse" in found["hits"][0]["text"], name
                assert found["explain"]["vector_unavailable"], name
                with pytest.raises(EmbeddingError):
                    await client.search(f"weather at dawn {name}", mode="vector")
                assert "embedding failed" in caplog.text, name
                caplog.clear()

                # The endpoint recovers: everything comes in, once.
                endpoint.fault = None
                if fault is None:
                    endpoint.start()  # on the same port
                expected += len(names)

                async def recovered(expected: int = expected) -> bool:
                    info = await status()
                    return bool(info["counts"]["documents"] == expected and info["pending"] == 0)

                await wait_until(recovered, 30)
                assert (await status())["queues"]["retrying"] == 0
                for n in range(len(names)):
                    hits = (await client.search(f"fault{index}x{n}", mode="bm25"))["hits"]
                    assert [h["source"] for h in hits] == [str(folder / names[n])], name
                survived.append(name)

            report = await client.check()
            assert report["ok"], report
            assert report["counts"]["vectors"] == report["counts"]["chunks"]
    finally:
        endpoint.fault = None
        assert await stop(server, task) == 0
    print(f"\nendpoint faults survived: {', '.join(survived)}")
    assert len(survived) == len(SCENARIOS)


async def test_retry_after_is_honoured(endpoint: FaultyEndpoint) -> None:
    from recalld.config import EmbedSettings
    from recalld.embeddings.openai_compat import openai_embedder

    settings = EmbedSettings(
        model="openai:test", base_url=endpoint.base_url, timeout_s=2, max_retries=2
    )
    embedder = await asyncio.to_thread(openai_embedder, "openai:test", settings)
    try:
        endpoint.script("embeddings", Reply(status=429, headers={"Retry-After": "1"}))
        before = len(endpoint.requests_to("embeddings"))
        vectors = await asyncio.to_thread(embedder.embed, ["after a pause"])
        assert vectors.shape == (1, DIMENSION)
        limited, retried = endpoint.requests_to("embeddings")[before:]
        assert retried.at - limited.at >= 1.0
    finally:
        embedder.close()


async def test_a_model_of_another_dimension_is_refused(
    isolated_home: Path,
    short_dir: Path,
    tmp_path: Path,
    endpoint: FaultyEndpoint,
    caplog: pytest.LogCaptureFixture,
) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.md").write_text("Stored with sixteen dimensions: the capybara.\n")
    env = endpoint_env(isolated_home, short_dir / "s.sock", endpoint, folder)
    server, task = await start(env)
    assert server.scheduler is not None
    await server.scheduler.wait_idle()
    assert await stop(server, task) == 0
    # The same model name, now answering with longer vectors.
    endpoint.stop()
    wider = FaultyEndpoint(dimension=DIMENSION + 8)
    wider.port = endpoint.port
    with wider, caplog.at_level(logging.ERROR, logger="recalld"):
        code = await Server(Config(env=env, install_signal_handlers=False)).serve()
    assert code == STARTUP_FAILURE
    assert f"({DIMENSION} dims) but recalld is configured for" in caplog.text
    assert f"({DIMENSION + 8} dims)" in caplog.text
    endpoint.start()  # back on its port for the fixture's teardown
